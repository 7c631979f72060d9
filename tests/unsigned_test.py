#!/usr/bin/env python3
"""ONNX BitShift, uint64 Min / Max / Mod and a uint64 power against NumPy, on the values that
break them.

kiln stores uint64 as int64 and uint16 / uint32 in wider signed types: a shift right of a value
past 2^63 must bring in zeros (not copies of the sign bit), orders and remainders of such values
must compare the bits as unsigned, and a narrow type's left shift must wrap at its width. Each
case is an ONNX model made here with Debian's onnx package and run by `kiln run`; then a
BitShift of signed integers must fail naming the input.

usage: unsigned_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(3)
failures = []
CODES = {np.uint8: TensorProto.UINT8, np.uint16: TensorProto.UINT16,
         np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64, np.int32: TensorProto.INT32}


def model(name, op, dtype, n_inputs=2, **attrs):
    code = CODES[dtype]
    ins = [helper.make_tensor_value_info(f"x{k}", code, [None]) for k in range(n_inputs)]
    g = helper.make_graph([helper.make_node(op, [f"x{k}" for k in range(n_inputs)], ["y"], **attrs)],
                          name, ins, [helper.make_tensor_value_info("y", code, None)])
    return kiln_cli.write_model(WORK, name, g, [("", 17)])


def run(path, inputs):
    return kiln_cli.run(KILN, path, {f"x{k}": v for k, v in enumerate(inputs)})


def check(name, path, inputs, want):
    r, out = run(path, inputs)
    if r.returncode != 0:
        failures.append(name + ": kiln failed: " + r.stderr.strip()[-400:])
        return
    got = np.load(os.path.join(out, "y.npy"))
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:3] if got.shape == want.shape else []
        failures.append(f"{name}: got {got.dtype} {got.shape}, NumPy {want.dtype} {want.shape}; "
                        f"first differences at {list(bad)}: {got.ravel()[bad]} vs {want.ravel()[bad]}")


def values(dtype, n):
    bits = np.iinfo(dtype).bits
    top = [np.iinfo(dtype).max, np.iinfo(dtype).max - 1, 1 << (bits - 1), (1 << (bits - 1)) + 5, 0, 1]
    rest = RNG.integers(0, np.iinfo(dtype).max, n - len(top), dtype=dtype, endpoint=True)
    return np.concatenate([np.array(top, dtype), rest])


N = 37  # past a vector's width, with a tail
for dtype in (np.uint8, np.uint16, np.uint32, np.uint64):
    bits = np.iinfo(dtype).bits
    x = values(dtype, N)
    s = RNG.integers(0, bits, N).astype(dtype)
    s[:3] = [0, bits - 1, 1]
    for direction, ref in (("LEFT", np.left_shift), ("RIGHT", np.right_shift)):
        path = model(f"shift_{direction.lower()}_{dtype.__name__}", "BitShift", dtype,
                     direction=direction)
        check(f"BitShift {direction} {dtype.__name__}", path, [x, s], ref(x, s).astype(dtype))

x, y = values(np.uint64, N), values(np.uint64, N)[::-1].copy()
y[y == 0] = 7
check("Min uint64", model("min_u64", "Min", np.uint64), [x, y], np.minimum(x, y))
check("Max uint64", model("max_u64", "Max", np.uint64), [x, y], np.maximum(x, y))
check("Mod uint64", model("mod_u64", "Mod", np.uint64), [x, y], np.mod(x, y))

# A float base to a uint64 power: exponents past 2^63 must not read as negative.
g = helper.make_graph([helper.make_node("Pow", ["x0", "x1"], ["y"])], "pow_u64",
                      [helper.make_tensor_value_info("x0", TensorProto.FLOAT, [None]),
                       helper.make_tensor_value_info("x1", TensorProto.UINT64, [None])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
pow_path = kiln_cli.write_model(WORK, "pow_u64", g, [("", 17)])
base = np.array([1.0, 0.5, 2.0, -1.0, 0.5, 3.0], np.float32)
expo = np.array([2**63 + 5, 3, 2**64 - 1, 2, 2**63, 4], np.uint64)
with np.errstate(over="ignore"):
    check("Pow float32 ^ uint64", pow_path, [base, expo],
          np.power(base.astype(np.float64), expo.astype(np.float64)).astype(np.float32))

r, _ = run(model("shift_signed", "BitShift", np.int32, direction="LEFT"),
           [np.ones(3, np.int32), np.ones(3, np.int32)])
if r.returncode == 0 or "BitShift takes unsigned integers; input 0 is int32" not in r.stderr:
    failures.append("BitShift of int32: expected an error naming the input, got rc "
                    f"{r.returncode}: {r.stderr.strip()[-300:]}")

for f in failures:
    print("FAIL", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
