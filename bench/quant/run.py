#!/usr/bin/env python3
"""int8 inference side by side: kiln and onnxruntime on the same quantized file, and kiln int8
against kiln float32 on the same model (bench/quant/quantize.py makes the files; 2 threads).

Per model, --rounds rounds in turn (kiln int8, onnxruntime int8, kiln float32; kiln in a fresh
process through bench/onnx_bench, compiling through the kernel cache; each round the median of
--repeat runs after --warmup-ms of untimed runs, the same for every tool); a ratio is the median
of the rounds' ratios. Agreement: kiln's int8 output against onnxruntime's on the same file
(largest difference, in units of one quantization step of the output where the model ends in
DequantizeLinear, and the share of rows whose argmax agrees), and both against the float
model. Writes bench/results/quant.md.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from peers import machine  # noqa: E402

MODELS = ["resnet18", "resnet50", "mobilenet_v2", "efficientnet_b0", "bert_mini", "bert",
          "deit_tiny", "gpt2", "llama"]


def kiln(bench, model, x, repeat, tmp, warmup_ms):
    xin = os.path.join(tmp, "x.npy")
    out = os.path.join(tmp, "k.npy")
    np.save(xin, x)
    r = subprocess.run([bench, model, xin, "--repeat", str(repeat), "--warmup-ms",
                        str(warmup_ms), "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"kiln failed on {model}: {r.stderr}")
    vals = dict((l.split()[0], l.split()[1:]) for l in r.stdout.splitlines())
    return float(vals["run_ms"][0]), np.load(out)


def ort_session(path, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_ms(sess, x, repeat, warmup_ms):
    name = sess.get_inputs()[0].name
    y = sess.run(None, {name: x})[0]
    t0 = time.perf_counter()
    while (time.perf_counter() - t0) * 1e3 < warmup_ms:
        sess.run(None, {name: x})
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        sess.run(None, {name: x})
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2], y


def output_step(path):
    """The scale of the DequantizeLinear that makes the model's output, if one does."""
    m = onnx.load(path, load_external_data=False)
    out = m.graph.output[0].name
    init = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out and n.input[1] in init:
            return float(np.max(init[n.input[1]]))
    return None


def argmax_agree(a, b):
    a = a.reshape(-1, a.shape[-1])
    b = b.reshape(-1, b.shape[-1])
    return float(np.mean(a.argmax(-1) == b.argmax(-1)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data", "quant"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    # Untimed runs before each timed set, for every tool alike: the steady state, not a
    # fresh process's first ~100 ms (clocks ramping up, threads settling on their cores).
    ap.add_argument("--warmup-ms", type=float, default=300)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "release", "bench", "onnx_bench"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "quant.md"))
    args = ap.parse_args()
    os.environ["KILN_ENGINE_WORKERS"] = str(args.threads)  # kiln on as many cores as the peers
    rows = []
    ratios_ort, ratios_f32, conv_f32 = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        files = [(name, os.path.join(args.data, name + s)) for name in args.models
                 for s in (".qdq.onnx", ".qop.onnx", ".dyn.onnx")
                 if os.path.exists(os.path.join(args.data, name + s))]
        for name in args.models:
            if not any(n == name for n, _ in files):
                print(f"{name}: no quantized file in {args.data} (bench/quant/quantize.py)")
        for name, q in files:
            f = os.path.join(args.data, name + ".float.onnx")
            x = np.load(os.path.join(args.data, name + ".input.npy"))
            sq, sf = ort_session(q, args.threads), ort_session(f, args.threads)
            kq, ko, kf, oq = [], [], [], []
            for r in range(args.rounds):
                time.sleep(0.3)
                t_kq, y_kq = kiln(args.bench, q, x, args.repeat, tmp, args.warmup_ms)
                t_oq, y_oq = ort_ms(sq, x, args.repeat, args.warmup_ms)
                time.sleep(0.3)
                t_kf, y_kf = kiln(args.bench, f, x, args.repeat, tmp, args.warmup_ms)
                kq.append(t_kq)
                oq.append(t_oq)
                kf.append(t_kf)
            _, y_of = ort_ms(sf, x, 1, 0)
            step = output_step(q)
            dev = float(np.max(np.abs(y_kq - y_oq)))
            dev_s = f"{dev / step:.1f} steps" if step else f"{dev:.2g} (scale {np.abs(y_oq).max():.2g})"
            r_ort = float(np.median(np.array(kq) / np.array(oq)))
            r_f32 = float(np.median(np.array(kf) / np.array(kq)))
            ratios_ort.append(r_ort)
            ratios_f32.append(r_f32)
            if ".dyn." not in q:
                conv_f32.append(r_f32)
            rows.append((name, os.path.basename(q), np.median(kq), np.median(oq), r_ort,
                         np.median(kf), r_f32, dev_s, argmax_agree(y_kq, y_oq),
                         argmax_agree(y_kq, y_of), argmax_agree(y_oq, y_of)))
            print(f"{name}: kiln int8 {np.median(kq):.2f} ms, onnxruntime {np.median(oq):.2f} ms "
                  f"({r_ort:.2f}x), kiln f32 {np.median(kf):.2f} ms ({r_f32:.2f}x faster int8), "
                  f"kiln vs ort {dev_s}", flush=True)
    geo = lambda v: float(np.exp(np.mean(np.log(v)))) if v else float("nan")  # noqa: E731
    lines = [
        "# int8: kiln and onnxruntime on the same quantized files",
        "",
        f"Measured by `bench/quant/run.py` on {machine()}; onnxruntime {ort.__version__}, "
        f"{args.threads} threads, {args.rounds} interleaved rounds of {args.repeat} runs, each after "
        f"{args.warmup_ms:.0f} ms of untimed runs (every tool alike). Files from "
        "`bench/quant/quantize.py` (onnxruntime's `quantize_static` in its QDQ (`.qdq`) and "
        "QOperator (`.qop`) formats, uint8 activations, int8 per-channel weights, 8 seeded "
        "calibration inputs; `quantize_dynamic` (`.dyn`) for the transformers: the BERTs, DeiT-tiny, GPT-2 and Llama).",
        "",
        "| model | file | kiln int8 ms | onnxruntime int8 ms | kiln / ort | kiln f32 ms | "
        "f32 / int8 | kiln vs ort (max) | argmax = ort | argmax = float (kiln) | argmax = float (ort) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} | "
                     f"{r[6]:.2f} | {r[7]} | {r[8]:.0%} | {r[9]:.0%} | {r[10]:.0%} |")
    lines += ["", f"Geometric mean: kiln int8 / onnxruntime int8 = {geo(ratios_ort):.2f}; "
              f"kiln float32 / kiln int8 = {geo(ratios_f32):.2f} "
              f"(convolutional models: {geo(conv_f32):.2f}).", ""]
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    # Sections written by hand after the table (the GEMM against the int8 peak) stay.
    kept = ""
    if os.path.exists(args.results):
        with open(args.results) as fh:
            old = fh.read()
        at = old.find("\n## ")
        kept = old[at:] if at >= 0 else ""
    with open(args.results, "w") as fh:
        fh.write("\n".join(lines) + kept)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
