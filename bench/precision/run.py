#!/usr/bin/env python3
"""kiln at --precision bf16 against kiln at float32 and onnxruntime (float32) on the same files.

The models are the broad zoo's (bench/zoo/broad.py exports them into bench/data/broad when
missing). Per model, --rounds rounds in turn (kiln float32, kiln bf16, onnxruntime; kiln in a
fresh process through bench/onnx_bench, compiling through the kernel cache, KILN_PRECISION
choosing the precision; each round the median of --repeat runs after a warm-up); a ratio is the
median of the rounds' ratios. Accuracy: each output against PyTorch's float32 output saved at
export (largest difference relative to the output's largest magnitude, and the share of rows
whose argmax agrees). Also timed in the same run: the bfloat16 and float32 GEMM kernels on
one thread (bench/gemm_bench), and which bfloat16 kernel this CPU gets. Writes
bench/results/precision.md.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "quant"))
from peers import machine  # noqa: E402
import run as quant  # noqa: E402  (kiln through onnx_bench, onnxruntime, argmax agreement)

MODELS = ["bert", "bert_mini", "gpt2", "llama", "deit_tiny", "resnet50"]
DATA = os.path.join(ROOT, "bench", "data", "broad")


def rel_err(y, ref):
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / max(np.max(np.abs(ref)), 1e-30))


def kiln_at(precision, bench, path, x, repeat, tmp):
    env = os.environ.get("KILN_PRECISION")
    os.environ["KILN_PRECISION"] = precision
    try:
        return quant.kiln(bench, path, x, repeat, tmp)
    finally:
        if env is None:
            del os.environ["KILN_PRECISION"]
        else:
            os.environ["KILN_PRECISION"] = env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=MODELS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "release", "bench", "onnx_bench"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "precision.md"))
    args = ap.parse_args()
    os.environ["KILN_ENGINE_WORKERS"] = str(args.threads)  # kiln on as many cores as onnxruntime
    missing = [m for m in args.models if not os.path.exists(os.path.join(DATA, m + ".onnx"))]
    if missing:
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "zoo", "broad.py"), *missing],
                       check=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            path = os.path.join(DATA, name + ".onnx")
            x = np.load(os.path.join(DATA, name + ".input.npy"))
            ref = np.load(os.path.join(DATA, name + ".expected.npy")).astype(np.float64)
            sess = quant.ort_session(path, args.threads)
            kiln_at("f32", args.bench, path, x, 1, tmp)  # compile both outside the timing
            kiln_at("bf16", args.bench, path, x, 1, tmp)
            f32, bf16, ort, r_bf, r_ort = [], [], [], [], []
            for _ in range(args.rounds):
                t32, y32 = kiln_at("f32", args.bench, path, x, args.repeat, tmp)
                t16, y16 = kiln_at("bf16", args.bench, path, x, args.repeat, tmp)
                to, yo = quant.ort_ms(sess, x, args.repeat)
                f32.append(t32), bf16.append(t16), ort.append(to)
                r_bf.append(t16 / t32), r_ort.append(t16 / to)
            med = lambda v: float(np.median(v))  # noqa: E731
            rows.append((name, med(f32), med(bf16), med(ort), med(r_bf), med(r_ort),
                         rel_err(y32, ref), rel_err(y16, ref), quant.argmax_agree(y16, ref)))
            print(f"{name}: kiln f32 {med(f32):.2f} ms, bf16 {med(bf16):.2f} ms "
                  f"(x{med(r_bf):.2f}), onnxruntime {med(ort):.2f} ms; bf16 error "
                  f"{rows[-1][7]:.2e}, argmax {rows[-1][8]:.3f}", flush=True)
    gemm = subprocess.run([os.path.join(os.path.dirname(args.bench), "gemm_bench"), "--repeat",
                           "30"], capture_output=True, text=True, check=True).stdout
    kernels = {}
    for kernel in ("dp", "fma"):
        out = subprocess.run([os.path.join(os.path.dirname(args.bench), "gemm_bench"), "--repeat",
                              "30"], capture_output=True, text=True, check=True,
                             env=dict(os.environ, KILN_GEMM_BF16=kernel)).stdout
        kernels[kernel] = [l.split()[-2] for l in out.splitlines()[1:]]
    lines = ["# bfloat16 products on the CPU (--precision bf16)", "",
             f"Machine: {machine()}; {args.threads} threads. Regenerate with "
             "`~/.cache/kiln-python/bin/python bench/precision/run.py`.", "",
             "kiln f32 and kiln bf16 run the same ONNX file (bench/data/broad, float32 weights); "
             "onnxruntime runs it at float32. Error: the largest difference from PyTorch's "
             "float32 output, relative to that output's largest magnitude. "
             f"{args.rounds} interleaved rounds of {args.repeat} runs; a ratio is the median "
             "of the rounds' ratios.", "",
             "| model | kiln f32 ms | kiln bf16 ms | onnxruntime ms | bf16 / f32 | "
             "bf16 / onnxruntime | f32 error | bf16 error | bf16 argmax agrees |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r[0]} | {r[1]:.2f} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]:.2f} "
                     f"| {r[6]:.1e} | {r[7]:.1e} | {r[8]:.3f} |")
    lines += ["", "GEMM kernels on one thread (bench/gemm_bench; GF/s of the bfloat16 kernel "
              "with each instruction forced by KILN_GEMM_BF16, and the kernel kiln picks):", "",
              "```", gemm.rstrip(), "```", "",
              "| shape | vdpbf16ps GF/s | float32 FMA kernel GF/s |", "|---|---|---|"]
    for line, dp, fma in zip(gemm.splitlines()[1:], kernels["dp"], kernels["fma"]):
        lines.append(f"| {line[:24].strip()} | {dp} | {fma} |")
    with open(args.results, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote " + args.results)


if __name__ == "__main__":
    main()
