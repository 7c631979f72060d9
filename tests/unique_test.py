#!/usr/bin/env python3
"""ONNX Unique against NumPy's np.unique, on the values that break it.

Unique's output sizes depend on the values, so kiln computes it on the host between compiled
stages; here its input is computed by the model (x * 1, so a prefix stage runs first). Cases:
sorted and in first-occurrence order, flattened and along an axis (negative too), NaNs (equal
to each other, last), -0.0 beside 0.0, ties, an empty input, int64 and uint8. Then an axis
outside the rank must fail naming it.

usage: unique_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(9)
failures = []
CODES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.uint8): TensorProto.UINT8}
OUTS = ["y", "indices", "inverse", "counts"]


def model(name, dtype, rank, **attrs):
    code = CODES[np.dtype(dtype)]
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "one"], ["x1"]),
         helper.make_node("Unique", ["x1"], OUTS, **attrs)], name,
        [helper.make_tensor_value_info("x", code, [None] * rank)],
        [helper.make_tensor_value_info(o, code if o == "y" else TensorProto.INT64, None)
         for o in OUTS],
        [helper.make_tensor("one", code, [], [1])])
    return kiln_cli.write_model(WORK, name, g, [("", 17)])


def run(path, x):
    return kiln_cli.run(KILN, path, {"x": x})


def reference(x, axis, sorted_):
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True, return_counts=True,
                                 axis=axis, equal_nan=True)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        y = np.take(y, order, axis=0 if axis is None else axis)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        idx, cnt, inv = idx[order], cnt[order], rank[inv]
    return [y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)]


def check(name, x, axis=None, sorted_=1):
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    path = model(name, x.dtype, x.ndim, **attrs)
    r, out = run(path, x)
    if r.returncode != 0:
        failures.append(f"{name}: kiln failed: {r.stderr.strip()[-400:]}")
        return
    for o, want in zip(OUTS, reference(x, axis, sorted_)):
        got = np.load(os.path.join(out, o + ".npy"))
        if got.shape != want.shape or not np.array_equal(got, want, equal_nan=True):
            failures.append(f"{name}: {o} is {got.tolist()}, NumPy {want.tolist()}")


x = RNG.integers(-4, 5, 41).astype(np.float32)
x[[3, 17, 30]] = np.nan
x[5], x[6] = -0.0, 0.0
for s in (1, 0):
    check(f"flat float32 sorted={s}", x, None, s)
    check(f"int64 rows, axis 0, sorted={s}", RNG.integers(0, 2, (9, 3)).astype(np.int64), 0, s)
    check(f"uint8 columns, axis -1, sorted={s}", RNG.integers(0, 3, (2, 11)).astype(np.uint8), -1, s)
check("empty", np.zeros(0, np.float32))
check("3-D along the middle axis", RNG.integers(0, 2, (2, 6, 2)).astype(np.int64), 1)

r, _ = run(model("bad_axis", np.float32, 2, axis=2), np.zeros((2, 2), np.float32))
if r.returncode == 0 or "axis 2 is outside" not in r.stderr:
    failures.append(f"axis past the rank: expected an error naming it, got rc {r.returncode}: "
                    + r.stderr.strip()[-300:])

for f in failures:
    print("FAIL", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
