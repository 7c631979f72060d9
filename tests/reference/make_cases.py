#!/usr/bin/python3
"""Writes numpy reference cases for kiln's elementwise ops, reductions and softmax.

    make_cases.py OUTDIR

Every case is an op, a dtype and an operand pattern; each of its runs holds inputs and
the output numpy computes (in float64, or exactly for integers) as .npy files. The inputs
hold the values that break kernels -- NaN, +-inf, -0.0, exact .5 ties, denormals, the
largest finite values -- at the start, in the middle and in the tail of rows, in sizes
below and above every vector width, and large enough to split across workers. The
C++ side (tests/reference_test.cpp) compiles each case once (dynamic dims) and compares
every run: NaN where numpy has NaN, infinities exactly, the sign of zero where the op
defines it, and otherwise within the case's ulp bound. OUTDIR/cases.json lists them.
"""
import json
import math
import os
import sys

import numpy as np

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261122)

# (rows, cols): one element; below, at and past 8/16-lane widths; long rows; many rows.
SHAPES = [(1, 1), (1, 7), (3, 16), (2, 17), (5, 33), (3, 130), (2, 4099)]


def specials(dt):
    fi = np.finfo(dt)
    return np.array(
        [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1.0, -1.0,
         fi.tiny, -fi.tiny, fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny / 3,
         fi.max, -fi.max, fi.eps, 3.0, -7.25, 100.0, -100.0, 0.75, -3.5],
        dtype=dt)


def random_values(dt, n):
    small = rng.uniform(-4, 4, n)
    top = 30 if dt == np.float32 else 300
    wide = np.sign(rng.uniform(-1, 1, n)) * 10.0 ** rng.uniform(-top, top, n)
    return np.where(rng.uniform(0, 1, n) < 0.7, small, wide).astype(dt)


def float_input(dt, shape, salt):
    """Random values with the specials at the start, spread over the middle and at the end."""
    n = shape[0] * shape[1]
    x = random_values(dt, n)
    sp = np.roll(specials(dt), salt)
    k = min(len(sp), n)
    x[:k] = sp[:k]
    if n > 2 * len(sp):
        x[-k:] = sp[::-1][:k]  # the tail past the last full vector
        mid = rng.choice(np.arange(k, n - k), size=min(k, n - 2 * k), replace=False)
        x[mid] = sp[: len(mid)]
    return x.reshape(shape)


def pair_inputs(dt, shape, salt):
    """Two operands that together hold every pair of specials, then random pairs."""
    a = float_input(dt, shape, salt)
    b = float_input(dt, shape, salt + 5)
    sp = specials(dt)
    grid_a, grid_b = np.meshgrid(sp, sp)
    n = a.size
    fa, fb = a.reshape(-1), b.reshape(-1)
    m = min(n, grid_a.size)
    fa[:m] = grid_a.reshape(-1)[:m]
    fb[:m] = grid_b.reshape(-1)[:m]
    return fa.reshape(shape), fb.reshape(shape)


def int_input(dt, shape):
    info = np.iinfo(dt)
    lim = info.max // 4  # products and sums stay in range: C's overflow is undefined
    edge = np.array([0, 1, -1, 2, -2, 7, -7, lim, -lim, 255, -256], dtype=np.int64)
    x = rng.integers(-1000, 1000, shape[0] * shape[1]).astype(np.int64)
    k = min(len(edge), x.size)
    x[:k] = edge[:k]
    return x.astype(dt).reshape(shape)


f64 = np.float64


def erf(x):
    return np.vectorize(math.erf, otypes=[f64])(x)


def gelu(x):
    # erfc, not 1 + erf: for negative x the sum cancels and loses every digit. The argument
    # -x/sqrt(2) is carried in long double and its rounding corrected to first order
    # (d erfc(z)/dz = -2/sqrt(pi) exp(-z^2)): in the tail, that rounding alone costs dozens of
    # float64 ulp.
    with np.errstate(all="ignore"):
        z_ld = -np.asarray(x, dtype=np.longdouble) / np.sqrt(np.longdouble(2))
        z = z_ld.astype(f64)
        rest = np.where(np.isfinite(z), (z_ld - z).astype(f64), 0.0)
        erfc = np.vectorize(math.erfc, otypes=[f64])(z)
        erfc = erfc - 2.0 / math.sqrt(math.pi) * np.exp(-z * z) * rest
        r = 0.5 * x * erfc
    return np.where(x == -np.inf, -0.0, r)  # the limit, not -inf * 0


def sigmoid(x):
    with np.errstate(all="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def nan_keeping(f):
    def g(a, b):
        r = f(a, b)
        return np.where(np.isnan(a) | np.isnan(b), np.nan, r)
    return g


# name: (arity, numpy reference in float64, ulp bound f32, ulp bound f64, zero sign checked,
#        attrs, domain filter). Semantics are ONNX's where numpy differs (round: half to even
#        in both; relu and sign: the sign of zero is not compared).
UNARY = {
    "neg": (np.negative, 0, 0, True),
    "abs": (np.abs, 0, 0, True),
    "sign": (np.sign, 0, 0, False),
    "exp": (np.exp, 4, 4, True),
    "log": (np.log, 4, 4, True),
    "log1p": (np.log1p, 4, 4, True),
    "expm1": (np.expm1, 4, 4, True),
    "sqrt": (np.sqrt, 1, 1, True),
    "reciprocal": (lambda x: 1.0 / x, 1, 1, True),
    # numpy's own float64 sin and cos (SIMD) are within 4 ulp, not 1
    "sin": (np.sin, 2, 4, True),
    "cos": (np.cos, 2, 4, True),
    "tanh": (np.tanh, 4, 4, True),
    "sigmoid": (sigmoid, 4, 4, False),
    "relu": (lambda x: np.where(x < 0, 0.0, x), 0, 0, False),
    "softplus": (lambda x: np.logaddexp(0.0, x), 4, 4, False),
    "erf": (erf, 4, 4, True),
    "gelu": (gelu, 8, 8, False),
    "floor": (np.floor, 0, 0, True),
    "ceil": (np.ceil, 0, 0, True),
    "round": (np.round, 0, 0, True),
    "sinh": (np.sinh, 3, 3, True),
    "cosh": (np.cosh, 3, 3, True),
    "asin": (np.arcsin, 2, 2, True),
    "acos": (np.arccos, 2, 2, True),
    "atan": (np.arctan, 2, 2, True),
    "asinh": (np.arcsinh, 3, 3, True),
    "acosh": (np.arccosh, 3, 3, True),
    "atanh": (np.arctanh, 3, 3, True),
}
UNARY_ATTRS = {
    "leaky_relu": ({"alpha": 0.125}, lambda x: np.where(x < 0, 0.125 * x, x), 1, 1, False),
    "elu": ({"alpha": 0.5}, lambda x: np.where(x < 0, 0.5 * np.expm1(x), x), 3, 3, False),
}
BINARY = {
    "add": (np.add, 0, 0, True),
    "sub": (np.subtract, 0, 0, True),
    "mul": (np.multiply, 0, 0, True),
    "div": (np.divide, 0, 0, True),
    "pow": (np.power, 2, 2, True),
    "mod": (np.mod, 0, 0, False),
    "fmod": (np.fmod, 0, 0, True),
    "maximum": (nan_keeping(np.maximum), 0, 0, False),
    "minimum": (nan_keeping(np.minimum), 0, 0, False),
}
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}
INT_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply,
              "maximum": np.maximum, "minimum": np.minimum}
INT_UNARY = {"neg": np.negative, "abs": np.abs, "relu": lambda x: np.maximum(x, 0)}

cases = []


def save(case_dir, name, array):
    path = os.path.join(case_dir, name)
    np.save(path, np.ascontiguousarray(array))
    return os.path.relpath(path, OUT)


def add_case(name, op, dtype, inputs_per_run, reference, ulp=0, zero_sign=False, attrs=None,
             pattern="same", out_dtype=None, atol_scale=0.0, split=True, category="unary"):
    case_dir = os.path.join(OUT, name)
    os.makedirs(case_dir, exist_ok=True)
    runs = []
    for r, inputs in enumerate(inputs_per_run):
        with np.errstate(all="ignore"):
            want = reference(*[np.asarray(x, dtype=f64) if np.issubdtype(x.dtype, np.floating)
                               else x for x in inputs])
        with np.errstate(over="ignore"):  # a float64 result past float32's range is inf
            want = np.asarray(want).astype(out_dtype or dtype)
        files = [save(case_dir, f"r{r}_in{k}.npy", x) for k, x in enumerate(inputs)]
        # For sums: an absolute slack proportional to the magnitude summed (orders differ).
        atol = 0.0
        if atol_scale < 0:  # a fixed absolute slack
            atol = float(-atol_scale)
        elif atol_scale:
            atol = float(atol_scale * np.nansum(np.abs(np.asarray(inputs[0], dtype=f64)
                                                       [np.isfinite(inputs[0])])))
        runs.append({"inputs": files, "output": save(case_dir, f"r{r}_out.npy", want),
                     "atol": atol})
    cases.append({"name": name, "op": op, "attrs": attrs or {}, "dtype": dtype.__name__,
                  "ranks": [np.ndim(x) for x in inputs_per_run[0]],
                  "pattern": pattern, "ulp": ulp, "zero_sign": zero_sign, "runs": runs,
                  "split": split, "category": category})


for dt in (np.float32, np.float64):
    tag = dt.__name__
    for name, (ref, u32, u64, zs) in UNARY.items():
        runs = [[float_input(dt, s, i)] for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}", name, dt, runs, ref, u32 if dt == np.float32 else u64, zs)
    for name, (attrs, ref, u32, u64, zs) in UNARY_ATTRS.items():
        runs = [[float_input(dt, s, i)] for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}", name, dt, runs, ref, u32 if dt == np.float32 else u64, zs,
                 attrs)
    for name, (ref, u32, u64, zs) in BINARY.items():
        u = u32 if dt == np.float32 else u64
        runs = [list(pair_inputs(dt, s, i)) for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}", name, dt, runs, ref, u, zs, category="binary")
        # Broadcast: a row vector against every row, and a column against every column.
        runs = [[float_input(dt, s, i), float_input(dt, (1, s[1]), i + 3)]
                for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}_row", name, dt, runs, ref, u, zs, pattern="row",
                 category="binary")
        runs = [[float_input(dt, s, i), float_input(dt, (s[0], 1), i + 4)]
                for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}_col", name, dt, runs, ref, u, zs, pattern="col",
                 category="binary")
    for name, ref in COMPARE.items():
        runs = [list(pair_inputs(dt, s, i)) for i, s in enumerate(SHAPES)]
        add_case(f"{name}_{tag}", name, dt, runs, ref, out_dtype=np.bool_, category="compare")
    runs = [[float_input(dt, s, i), float_input(dt, (1, s[1]), i + 1),
             float_input(dt, (1, s[1]), i + 2)] for i, s in enumerate(SHAPES)]
    # ONNX Clip: max(x, lo) then min(., hi), a NaN x stays NaN (a NaN bound is ignored).
    def clip_ref(x, lo, hi):
        m = np.where(x < lo, lo, x)
        return np.where(m > hi, hi, m)
    add_case(f"clip_{tag}", "clip", dt, runs, clip_ref, pattern="row", category="binary")
    # Reductions over the last axis (rows >= 16 with the extreme value in the tail) and the
    # first; and softmax / log_softmax along rows.
    for red, ref, atol in [("reduce_sum", np.sum, 2e-7 if dt == np.float32 else 1e-15),
                           ("reduce_mean", np.mean, 2e-7 if dt == np.float32 else 1e-15),
                           ("reduce_max", np.max, 0.0), ("reduce_min", np.min, 0.0),
                           ("reduce_prod", np.prod, 0.0)]:
        for axis in (1, 0):
            runs = []
            for i, s in enumerate(SHAPES):
                x = float_input(dt, s, i) if red in ("reduce_max", "reduce_min") else \
                    rng.uniform(-2, 2, s).astype(dt)
                if red == "reduce_prod":
                    x = rng.uniform(0.5, 1.5, s).astype(dt)
                if red in ("reduce_sum", "reduce_mean") and s[1] >= 16:
                    x[0, -1] = np.nan      # a NaN only in the tail of the first row
                    x[-1, -2] = np.inf     # an inf near the tail of the last row
                if red in ("reduce_max", "reduce_min") and s[1] >= 16:
                    x[:, :] = np.where(np.isnan(x), 0.0, x)
                    x[-1, -1] = dt(1e30) if red == "reduce_max" else dt(-1e30)
                    x[0, -1] = np.nan
                runs.append([x])
            add_case(f"{red}_{tag}_axis{axis}", red, dt, runs,
                     lambda x, axis=axis, ref=ref: ref(x, axis=axis, keepdims=True),
                     # float32 products accumulate a rounding per factor
                     ulp=256 if red == "reduce_prod" else 1 if red == "reduce_mean" else 0,
                     attrs={"axes": [axis], "keepdims": 1}, atol_scale=atol, split=False,
                     category="reduce")
    for sm in ("softmax", "log_softmax"):
        runs = []
        for i, s in enumerate(SHAPES):
            x = rng.uniform(-5, 5, s).astype(dt)
            if s[1] >= 16:
                x[-1, -1] = dt(80.0)        # the row maximum, in the tail: exp(80) overflows f32
                x[0, -1] = -np.inf          # exp(-inf) = 0
            if s[0] >= 3:
                x[1, 2] = np.nan            # a NaN row stays NaN
            runs.append([x])

        def ref(x, sm=sm, dt=dt):
            # x - max is rounded in the input's precision, as any implementation in it
            # rounds it; everything after is float64.
            m = np.max(x, axis=1, keepdims=True)
            z = (x.astype(dt) - m.astype(dt)).astype(f64)
            lse = np.log(np.sum(np.exp(z), axis=1, keepdims=True))
            return z - lse if sm == "log_softmax" else np.exp(z - lse)
        # log_softmax: z - log(sum) cancels near the maximum, so an absolute slack of a few
        # eps of the terms' size.
        add_case(f"{sm}_{tag}", sm, dt, runs, ref, ulp=16, attrs={"axis": -1}, split=False,
                 category="reduce", atol_scale=0.0 if sm == "softmax" else -8 * np.finfo(dt).eps)

for dt in (np.int32, np.int64):
    tag = dt.__name__
    for name, ref in INT_BINARY.items():
        runs = [[int_input(dt, s), int_input(dt, s)[::-1].copy()] for s in SHAPES]
        if name == "mul":
            runs = [[(a % 30000).astype(dt), (b % 30000).astype(dt)] for a, b in runs]
        add_case(f"{name}_{tag}", name, dt, runs, ref, category="integer")
    for name, ref in INT_UNARY.items():
        runs = [[int_input(dt, s)] for s in SHAPES]
        add_case(f"{name}_{tag}", name, dt, runs, ref, category="integer")

with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
print(f"{len(cases)} cases, {sum(len(c['runs']) for c in cases)} runs in {OUT}")
