#!/usr/bin/env python3
"""Inference latency of kiln, onnxruntime, OpenVINO and PyTorch on a model zoo: the tuned zoo
(bench/zoo/export.py, the default) or the broad zoo of architectures nobody tuned kiln for
(--zoo broad, bench/zoo/broad.py), or the coverage zoo of decoders, a GAN, style transfer, a
spatial transformer and a log-mel front-end (--zoo coverage, bench/zoo/coverage_zoo.py).

For each model: kiln runs NAME.onnx through build/release/bench/onnx_bench (a fresh process per
round, compiling through the kernel cache), onnxruntime and OpenVINO (f32, when installed; the
broad zoo's runner installs it) load the same file, and PyTorch runs the same seeded module
rebuilt by the zoo's build(). All get the same input and the same thread count (--threads,
default 2). The tools take --rounds rounds in turn (interleaved, so a
noisy neighbour hits all of them alike; kiln and onnxruntime back to back, their order swapped
each round); each round is the median of --repeat timed runs after a warm-up, and the median
round is reported. A ratio is the median of the rounds' ratios: each pair was measured within
a second, where the two columns' own medians may come from different phases of a host whose
speed drifts. Every output is checked against the PyTorch output saved at export
(NAME.expected.npy) before its times count.

Also measured in the same run: OpenBLAS SGEMM at 1024^3 on the same threads (the library kiln
links), the yardstick for "machine speed"; each model's GFLOP/s uses the multiply-adds of its
Conv, Gemm and MatMul nodes (2 FLOP each). Run through bench/zoo/run, which sets up the tools.
"""
import argparse
import ctypes
import ctypes.util
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import shape_inference

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import export  # noqa: E402  (the seeded models behind the ONNX files)
ZOOS = {"tuned": ("zoo", "zoo.md"), "broad": ("broad", "broad.md"),
        "coverage": ("coverage", "coverage.md")}
from peers import machine, median_ms  # noqa: E402  (one timing rule for every bench)


def model_flops(path, input_shape):
    """2 x the multiply-adds of the model's Conv, Gemm and MatMul nodes, at the input's shape
    (a model with dynamic axes is counted at the size it runs; data propagation follows the
    shapes that Shape, Concat and Reshape compute, as timm's same-padding does)."""
    m = onnx.load(path, load_external_data=False)
    for d, size in zip(m.graph.input[0].type.tensor_type.shape.dim, input_shape):
        d.dim_value = size
    m = shape_inference.infer_shapes(m, data_prop=True)
    g = m.graph
    shapes = {}
    for v in list(g.value_info) + list(g.input) + list(g.output):
        dims = [d.dim_value for d in v.type.tensor_type.shape.dim]
        shapes[v.name] = dims
    for t in g.initializer:
        shapes[t.name] = list(t.dims)
    total = 0
    for n in g.node:
        if n.op_type == "Conv":
            w, y = shapes.get(n.input[1]), shapes.get(n.output[0])
            if w and y:
                total += 2 * math.prod(y) * math.prod(w[1:])
        elif n.op_type in ("Gemm", "MatMul"):
            a, y = shapes.get(n.input[0]), shapes.get(n.output[0])
            if a and y:
                trans_a = any(at.name == "transA" and at.i for at in n.attribute)
                k = a[-2] if trans_a else a[-1]
                total += 2 * math.prod(y) * k
    return total


def openblas_sgemm_gflops(threads, n=1024, repeat=20):
    """GFLOP/s of cblas_sgemm at n^3 through the system OpenBLAS kiln links."""
    name = ctypes.util.find_library("openblas")
    if not name:
        return None
    lib = ctypes.CDLL(name)
    if hasattr(lib, "openblas_set_num_threads"):
        lib.openblas_set_num_threads(threads)
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), dtype=np.float32)
    fp = ctypes.POINTER(ctypes.c_float)
    args = [101, 111, 111, n, n, n, ctypes.c_float(1.0), a.ctypes.data_as(fp), n,
            b.ctypes.data_as(fp), n, ctypes.c_float(0.0), c.ctypes.data_as(fp), n]
    ms = median_ms(lambda: lib.cblas_sgemm(*args), repeat)
    if not np.allclose(c, a @ b, rtol=1e-3, atol=1e-2):
        raise SystemExit("OpenBLAS sgemm disagrees with numpy")
    return 2 * n ** 3 / (ms * 1e6)


def agrees(y, ref, flips=0.0):
    """Relative tolerance 1e-3 against the reference's scale; with flips, that share of the
    elements may lie outside it (a model that picks a maximum's position: two candidates
    closer than the convolutions' rounding may pick differently in any two implementations)."""
    scale = float(np.max(np.abs(ref))) or 1.0
    if y.shape != ref.shape:
        return False
    outside = np.abs(y - ref) > 1e-3 * scale
    return float(np.mean(outside)) <= flips if flips else not outside.any()


def paired_ratio(a, b):
    """Median over rounds of a[r] / b[r]; None when b has no rounds."""
    if not b:
        return None
    r = sorted(x / y for x, y in zip(a, b))
    n = len(r)
    return r[n // 2] if n % 2 else math.sqrt(r[n // 2 - 1] * r[n // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoo", choices=sorted(ZOOS), default="tuned")
    ap.add_argument("--data", help="the exported models (default: bench/data/zoo or broad)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--no-openvino", action="store_true", help="skip OpenVINO")
    ap.add_argument("--kiln-bench", default=os.path.join(ROOT, "build", "release", "bench", "onnx_bench"))
    ap.add_argument("--results", help="the table (default: bench/results/zoo.md or broad.md)")
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: SqueezeNet (unless models are named) exported afresh, one round of "
                         "2 runs, no pauses, the table to a temporary file")
    ap.add_argument("models", nargs="*", help="default: the whole zoo")
    args = ap.parse_args()
    folder, table = ZOOS[args.zoo]
    args.data = args.data or os.path.join(ROOT, "bench", "data", folder)
    args.results = args.results or os.path.join(ROOT, "bench", "results", table)
    if args.zoo == "broad":
        import broad as zoo
        names = list(zoo.MODELS)
    elif args.zoo == "coverage":
        import coverage_zoo as zoo
        names = list(zoo.MODELS)
    else:
        zoo, names = export, export.ZOO
    ov = None
    if not args.no_openvino:
        try:
            import openvino as ov
        except ImportError:
            print("OpenVINO is not installed: no OpenVINO column", flush=True)
    if args.smoke:
        args.rounds, args.repeat = 1, 2
        args.models = args.models or ["squeezenet"]
        args.data = export.smoke_folder(args.models)
        args.results = os.path.join(args.data, "zoo.md")
    import torch
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    env = dict(os.environ, KILN_ENGINE_WORKERS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))
    sgemm = openblas_sgemm_gflops(args.threads)
    print(f"OpenBLAS SGEMM 1024^3, {args.threads} threads: {sgemm:.1f} GFLOP/s" if sgemm else
          "OpenBLAS not found: no SGEMM yardstick", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models or names:
            if name not in zoo.MODELS:
                raise SystemExit(f"unknown model '{name}' (known: {', '.join(zoo.MODELS)})")
            path = os.path.join(args.data, name + ".onnx")
            xin = os.path.join(args.data, name + ".input.npy")
            if not os.path.exists(path):
                raise SystemExit(f"{path} is missing: export it first (bench/zoo/run does)")
            x = np.load(xin)
            ref = np.load(os.path.join(args.data, name + ".expected.npy"))
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            feed = {sess.get_inputs()[0].name: x}
            flips = getattr(zoo, "FLIPS", {}).get(name, 0)  # the same allowance for every tool
            if not agrees(sess.run(None, feed)[0], ref, flips):
                raise SystemExit(f"{name}: onnxruntime disagrees with PyTorch's saved output")
            request = None
            if ov:
                compiled = ov.Core().compile_model(path, "CPU", {
                    "INFERENCE_NUM_THREADS": args.threads, "INFERENCE_PRECISION_HINT": "f32",
                    "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1})
                request = compiled.create_infer_request()
                request.infer({0: x})
                if not agrees(request.get_output_tensor(0).data.copy(), ref, flips):
                    raise SystemExit(f"{name}: OpenVINO disagrees with PyTorch's saved output")
            model = xt = None
            if not args.no_torch:
                model, _ = zoo.build(name)
                xt = torch.from_numpy(x)
                if not agrees(model(xt).numpy(), ref):
                    raise SystemExit(f"{name}: the rebuilt PyTorch model differs from the export "
                                     "(another torch version?): re-export the zoo")
            kout = os.path.join(tmp, "y.npy")
            times = {"kiln": [], "onnxruntime": [], "OpenVINO": [], "PyTorch": []}
            def kiln_round(first):
                # The peers' thread pools spin for a while after their last call; kiln measured
                # then would share the cores with them.
                time.sleep(0 if args.smoke else 0.5)
                out = subprocess.run([args.kiln_bench, path, xin, "--repeat", str(args.repeat),
                                      "--out", kout], capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    raise SystemExit(f"kiln failed on {name}: {out.stderr}")
                fields = dict(l.split(None, 1) for l in out.stdout.splitlines() if " " in l)
                if first and not agrees(np.load(kout), ref, flips):
                    y = np.load(kout)
                    raise SystemExit(f"{name}: kiln disagrees with PyTorch (max abs diff "
                                     f"{float(np.max(np.abs(y - ref))):.3g}, scale {float(np.max(np.abs(ref))):.3g})")
                return float(fields["run_ms"].split()[0]), float(fields["compile_ms"])

            def ort_round():
                time.sleep(0 if args.smoke else 0.5)  # PyTorch's threads, likewise
                return median_ms(lambda: sess.run(None, feed), args.repeat)

            def ov_round():
                time.sleep(0 if args.smoke else 0.5)
                return median_ms(lambda: request.infer({0: x}), args.repeat)

            # An untimed first compile, checked against PyTorch: every timed round then loads
            # the same cached module, and what the compile wrote (a prepared weight set can be
            # 100 MB) is on disk before the first of them starts.
            _, compile_ms = kiln_round(True)
            os.sync()
            for r in range(max(1, args.rounds)):
                # kiln and onnxruntime back to back, the order swapped every round, so a slow
                # phase of the shared host lands on both alike and on neither side always.
                if r % 2 == 0:
                    k_ms, _ = kiln_round(False)
                    o_ms = ort_round()
                else:
                    o_ms = ort_round()
                    k_ms, _ = kiln_round(False)
                times["kiln"].append(k_ms)
                times["onnxruntime"].append(o_ms)
                if request is not None:
                    times["OpenVINO"].append(ov_round())
                if model is not None:
                    times["PyTorch"].append(median_ms(lambda: model(xt), args.repeat))
            med = {k: sorted(v)[len(v) // 2] if v else None for k, v in times.items()}
            # The ratios are taken round by round (each pair measured within a second of each
            # other), and their median reported: on a host whose speed drifts by tens of
            # percent, independent medians of the two columns can pair a fast phase with a slow.
            med["ratio_ort"] = paired_ratio(times["kiln"], times["onnxruntime"])
            med["ratio_torch"] = paired_ratio(times["kiln"], times["PyTorch"])
            med["ratio_ov"] = paired_ratio(times["kiln"], times["OpenVINO"])
            flops = model_flops(path, x.shape)
            if model is not None and flops == 0:
                # Shapes computed through arithmetic on sizes (timm's same-padding) defeat
                # ONNX's shape inference; PyTorch's own count of the same products stands in.
                from torch.utils.flop_counter import FlopCounterMode
                with FlopCounterMode(display=False) as counter:
                    model(xt)
                flops = counter.get_total_flops()
            rows.append((name, med, flops, compile_ms))
            t, v = med["PyTorch"], med["OpenVINO"]
            print(f"{name:20s} kiln {med['kiln']:8.2f} ms  onnxruntime {med['onnxruntime']:8.2f} ms  "
                  + (f"OpenVINO {v:8.2f} ms  " if v else "")
                  + (f"PyTorch {t:8.2f} ms  " if t else "")
                  + f"kiln/ort {med['ratio_ort']:5.2f}  "
                  + (f"kiln/ov {med['ratio_ov']:5.2f}  " if v else "")
                  + (f"kiln/torch {med['ratio_torch']:5.2f}  " if t else "")
                  + f"kiln {flops / med['kiln'] / 1e6:6.1f} GFLOP/s", flush=True)
    if sgemm:
        # Measured again at the end and the faster kept: a yardstick taken in a slow phase of
        # the host would flatter the batch-8 ratio below.
        again = openblas_sgemm_gflops(args.threads)
        print(f"OpenBLAS SGEMM 1024^3 again: {again:.1f} GFLOP/s", flush=True)
        sgemm = max(sgemm, again)

    def geomean(key):
        vals = [m[key] for _, m, _, _ in rows if m[key]]
        return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None

    geo = {k: geomean("ratio_" + k) for k in ("ort", "ov", "torch")}
    worst = {k: max((m["ratio_" + k] for _, m, _, _ in rows if m["ratio_" + k]), default=None)
             for k in ("ort", "ov")}
    summary = ", ".join(f"kiln/{label} {geo[k]:.3f}" for k, label in
                        (("ort", "onnxruntime"), ("ov", "OpenVINO"), ("torch", "PyTorch")) if geo[k])
    print(f"geometric mean {summary}")
    peers = "onnxruntime" + (", OpenVINO" if geo["ov"] else "") + " and PyTorch"
    versions = f"onnxruntime {ort.__version__}" + (f", OpenVINO {ov.__version__}" if geo["ov"] else "")
    lines = [
        f"# The {'' if args.zoo == 'tuned' else args.zoo + ' '}model zoo: kiln vs {peers}",
        "",
        f"Machine: {machine()}. {versions}, PyTorch {torch.__version__}; "
        f"{args.threads} threads each (OpenVINO at f32 precision, latency mode, one stream). Each "
        f"time is the median of {args.repeat} runs after a warm-up; "
        f"the tools took {args.rounds} rounds in turn (kiln and onnxruntime back to back, their order "
        "swapped each round, then OpenVINO) and the median round is shown; a ratio is the median "
        "of the rounds' ratios. Every output "
        "matched PyTorch's (relative tolerance 1e-3). GFLOP/s counts the Conv, Gemm and MatMul "
        "multiply-adds. Ratio < 1 means kiln is faster. Regenerate with `bench/zoo/run"
        + ("" if args.zoo == "tuned" else " --zoo " + args.zoo) + "`.",
        "",
    ]
    if sgemm:
        lines += [f"OpenBLAS SGEMM at 1024³ in the same run (the faster of a measurement before the "
                  f"models and one after): **{sgemm:.1f} GFLOP/s**.", ""]
    lines += [
        "| model | GFLOP | kiln ms | onnxruntime ms | OpenVINO ms | PyTorch ms | kiln / onnxruntime | "
        "kiln / OpenVINO | kiln / PyTorch | kiln GFLOP/s | onnxruntime GFLOP/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def cell(x, fmt):
        return format(x, fmt) if x else "–"

    for name, m, flops, _ in rows:
        lines.append(f"| {name} | {flops / 1e9:.2f} | {m['kiln']:.2f} | {m['onnxruntime']:.2f} | "
                     f"{cell(m['OpenVINO'], '.2f')} | {cell(m['PyTorch'], '.2f')} | "
                     f"{m['ratio_ort']:.2f} | {cell(m['ratio_ov'], '.2f')} | "
                     f"{cell(m['ratio_torch'], '.2f')} | {flops / m['kiln'] / 1e6:.1f} | "
                     f"{flops / m['onnxruntime'] / 1e6:.1f} |")
    lines += ["", "Geometric mean " + "; ".join(
        f"kiln / {label}: **{geo[k]:.3f}**" for k, label in
        (("ort", "onnxruntime"), ("ov", "OpenVINO"), ("torch", "PyTorch")) if geo[k]) + "."]
    lines += ["Highest ratio " + "; ".join(
        f"kiln / {label}: {worst[k]:.2f}" for k, label in
        (("ort", "onnxruntime"), ("ov", "OpenVINO")) if worst[k]) + "."]
    b8 = next((r for r in rows if r[0] == "resnet18_b8"), None)
    if b8 and sgemm:
        g = b8[2] / b8[1]["kiln"] / 1e6
        lines.append(f"ResNet-18 at batch 8 runs end to end at {g:.1f} GFLOP/s, {100 * g / sgemm:.0f}% of "
                     "SGEMM at 1024³.")
    with open(args.results, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"written to {args.results}")


if __name__ == "__main__":
    main()
