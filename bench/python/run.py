#!/usr/bin/env python3
"""kiln from Python: the overhead of a call, and torch.compile(backend="kiln") against
backend="inductor" and eager PyTorch, in one run on the same models, inputs and threads.

- Call overhead: a tiny function (x + 1 on 4 floats) called from Python, against the same
  calls made from C++ (_kiln._native_call_seconds) in the same process.
- torch.compile: ResNet-18 and MobileNetV2 at 1x3x224x224 and a 4-layer transformer encoder
  (batch 2, sequence 64, width 256), random seeded weights. Compile time is the first call
  (dynamo, partitioning and kiln / inductor's compile); run time is the median of 20 calls.
  Each compiler starts from a fresh kernel cache (kiln) / fresh inductor cache.
Writes bench/results/python.md. Run with scripts/setup's environment:
    ~/.cache/kiln-python/bin/python bench/python/run.py
"""
import os
import sys
import tempfile
import time

# --smoke (ctest): a small MLP through the kiln backend and eager only, few calls, no results
# file (inductor's compile of real models takes minutes on two cores).
SMOKE = "--smoke" in sys.argv[1:]

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-bench-cache-"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cache-"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import median_seconds  # noqa: E402

import kiln  # noqa: E402
from kiln import _kiln  # noqa: E402
from kiln import graph as kg  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(2)
torch.backends.mha.set_fastpath_enabled(False)


def call_overhead():
    g = kg.Graph("tiny")
    x = g.input("x", "float32", [4])
    g.set_outputs([x + 1.0])
    f = kiln.compile(g)
    a = np.ones(4, np.float32)
    calls = 200 if SMOKE else 20000
    py = median_seconds(lambda: f(a), calls)
    native = _kiln._native_call_seconds(f, (a,), calls)
    return py * 1e6, native * 1e6


def models():
    torch.manual_seed(0)
    if SMOKE:
        mlp = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
        return [("mlp", mlp.eval(), torch.randn(4, 64))]
    layer = torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True)
    return [("resnet18", torchvision.models.resnet18().eval(), torch.randn(1, 3, 224, 224)),
            ("mobilenet_v2", torchvision.models.mobilenet_v2().eval(), torch.randn(1, 3, 224, 224)),
            ("transformer_encoder",
             torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval(),
             torch.randn(2, 64, 256))]


def main():
    py_us, native_us = call_overhead()
    rows = []
    for name, model, x in models():
        with torch.no_grad():
            want = model(x)
            runs = 3 if SMOKE else 20
            eager = median_seconds(lambda: model(x), runs)
            row = {"model": name, "eager": eager, "inductor": float("nan"),
                   "inductor_compile": float("nan")}
            for backend in ("kiln",) if SMOKE else ("kiln", "inductor"):
                torch._dynamo.reset()
                compiled = torch.compile(model, backend=backend)
                t = time.perf_counter()
                got = compiled(x)
                row[backend + "_compile"] = time.perf_counter() - t
                row[backend] = median_seconds(lambda: compiled(x), runs)
                err = float((got - want).abs().max() / want.abs().max())
                assert err < 1e-3, f"{name} {backend}: relative error {err}"
        rows.append(row)
    lines = ["# kiln from Python", "",
             f"PyTorch {torch.__version__}, 2 threads. Regenerate with "
             "`~/.cache/kiln-python/bin/python bench/python/run.py` (see its docstring).", "",
             "## Call overhead", "",
             "A function computing x + 1 on 4 floats, median per call:", "",
             "| from Python | from C++ | Python's extra cost |", "|---|---|---|",
             f"| {py_us:.2f} µs | {native_us:.2f} µs | {py_us - native_us:.2f} µs |", "",
             "## torch.compile: kiln vs inductor vs eager", "",
             "Compile time is the first call on a fresh cache; run time is the median of 20 "
             "calls. Outputs match eager to 1e-3 relative.", "",
             "| model | eager ms | kiln ms | inductor ms | kiln / inductor | kiln compile s | "
             "inductor compile s |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['eager'] * 1e3:.2f} | {r['kiln'] * 1e3:.2f} | "
                     f"{r['inductor'] * 1e3:.2f} | {r['kiln'] / r['inductor']:.2f} | "
                     f"{r['kiln_compile']:.2f} | {r['inductor_compile']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not SMOKE:
        with open(os.path.join(ROOT, "bench", "results", "python.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
