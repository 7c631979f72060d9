#!/usr/bin/env python3
"""Inference latency of kiln, onnxruntime and PyTorch on the same ONNX files and data.

For each model of examples/onnx (MLP, LeNet CNN, residual CNN block) at batch 1 and 32:
kiln runs the ONNX file through build/release/bench/onnx_bench, onnxruntime loads the same
file, and PyTorch runs the same module (examples/onnx/export_models.py) with the weights read
from the file's initializers. Each prints the median of --repeat timed runs after a warm-up;
outputs are cross-checked so every tool computes the same thing. Run through bench/onnx-peers,
which sets up the virtual environment.
"""
import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples", "onnx"))
import export_models  # noqa: E402  (the PyTorch definitions of the example models)
from peers import median_ms  # noqa: E402  (one timing rule for every bench)

MODELS = {
    "mlp": (export_models.MLP, (784,)),
    "lenet": (export_models.LeNet, (1, 28, 28)),
    "resblock": (export_models.ResidualBlock, (16, 12, 12)),
}


def torch_model(name, path):
    cls, _ = MODELS[name]
    model = cls().eval()
    weights = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in onnx.load(path).graph.initializer}
    state = model.state_dict()
    for key in state:
        if key in weights:
            state[key] = weights[key]
        elif not key.endswith("num_batches_tracked"):
            raise SystemExit(f"{path}: no initializer for PyTorch parameter {key}")
    model.load_state_dict(state)
    return model


def machine():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kiln-bench", default=os.path.join(ROOT, "build", "release", "bench", "onnx_bench"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "onnx_inference.md"))
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: one round of 3 runs, no pause, the table to a temporary file")
    args = ap.parse_args()
    if args.smoke:
        args.repeat, args.rounds = 3, 1
        args.results = os.path.join(tempfile.mkdtemp(prefix="kiln-onnx-peers-smoke-"), "onnx_inference.md")
    torch.set_grad_enabled(False)
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (_, shape) in MODELS.items():
            path = os.path.join(ROOT, "examples", "onnx", name, "model.onnx")
            sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            model = torch_model(name, path)
            for batch in (1, 32):
                x = rng.standard_normal((batch,) + shape).astype(np.float32)
                xin, kout = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
                np.save(xin, x)
                xt = torch.from_numpy(x)
                kiln_times, ort_times, torch_times = [], [], []
                for _ in range(max(1, args.rounds)):
                    # The peers' thread pools keep spinning for a while after their last call
                    # (OpenMP block time); kiln measured then shares the two cores with them.
                    if not args.smoke:
                        time.sleep(1.0)
                    out = subprocess.run([args.kiln_bench, path, xin, "--repeat", str(args.repeat), "--out", kout],
                                         capture_output=True, text=True)
                    if out.returncode != 0:
                        raise SystemExit(f"kiln failed on {name}: {out.stderr}")
                    kiln_times.append(
                        float(next(l for l in out.stdout.splitlines() if l.startswith("run_ms")).split()[1]))
                    if len(kiln_times) == 1:
                        y_ort = sess.run(None, {"x": x})[0]
                        y_torch = model(xt).numpy()
                        for who, y in (("onnxruntime", y_ort), ("PyTorch", y_torch)):
                            if not np.allclose(np.load(kout), y, rtol=1e-3, atol=1e-4):
                                raise SystemExit(f"{name} batch {batch}: kiln and {who} disagree")
                    ort_times.append(median_ms(lambda: sess.run(None, {"x": x}), args.repeat))
                    torch_times.append(median_ms(lambda: model(xt), args.repeat))
                kiln_ms, ort_ms, torch_ms = (sorted(t)[len(t) // 2] for t in (kiln_times, ort_times, torch_times))
                rows.append((name, batch, kiln_ms, ort_ms, torch_ms))
                print(f"{name:9s} batch {batch:2d}: kiln {kiln_ms:8.4f} ms  onnxruntime {ort_ms:8.4f} ms  "
                      f"PyTorch {torch_ms:8.4f} ms  kiln/ort {kiln_ms / ort_ms:5.2f}  kiln/torch {kiln_ms / torch_ms:5.2f}",
                      flush=True)
    lines = [
        "# ONNX inference latency: kiln vs onnxruntime and PyTorch",
        "",
        f"Machine: {machine()}. onnxruntime {ort.__version__}, PyTorch {torch.__version__} "
        f"({torch.get_num_threads()} threads). Each time is the median of {args.repeat} runs after a "
        f"warm-up; the tools took {args.rounds} rounds in turn and the median round is shown. "
        "Ratio < 1 means kiln is faster.",
        "",
        "| model | batch | kiln ms | onnxruntime ms | PyTorch ms | kiln / onnxruntime | kiln / PyTorch |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, batch, k, o, t in rows:
        lines.append(f"| {name} | {batch} | {k:.4f} | {o:.4f} | {t:.4f} | {k / o:.2f} | {k / t:.2f} |")
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"written to {args.results}")


if __name__ == "__main__":
    main()
