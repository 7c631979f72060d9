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
             pattern="same", out_dtype=None, atol_scale=0.0, split=True, category="unary",
             shapes=None, atol_of=None):
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
        if atol_of is not None:  # a slack computed from this run's inputs
            atol = float(atol_of(*inputs))
        elif atol_scale < 0:  # a fixed absolute slack
            atol = float(-atol_scale)
        elif atol_scale:
            atol = float(atol_scale * np.nansum(np.abs(np.asarray(inputs[0], dtype=f64)
                                                       [np.isfinite(inputs[0])])))
        runs.append({"inputs": files, "output": save(case_dir, f"r{r}_out.npy", want),
                     "atol": atol})
    cases.append({"name": name, "op": op, "attrs": attrs or {}, "dtype": dtype.__name__,
                  "ranks": [np.ndim(x) for x in inputs_per_run[0]],
                  "pattern": pattern, "ulp": ulp, "zero_sign": zero_sign, "runs": runs,
                  "split": split, "category": category,
                  # declared input shapes (null: dynamic); default: rank 2, all dynamic
                  "shapes": shapes})


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

# --- where, logical ops, casts -------------------------------------------------------------
for dt in (np.float32, np.float64):
    tag = dt.__name__
    runs = [[rng.uniform(0, 1, s) < 0.5, float_input(dt, s, i), float_input(dt, s, i + 2)]
            for i, s in enumerate(SHAPES)]
    add_case(f"where_{tag}", "where", dt, runs, lambda c, a, b: np.where(c, a, b), zero_sign=True,
             category="misc", shapes=[[None, None]] * 3)
    for to, ndt in (("float64", np.float64), ("float32", np.float32)):
        if ndt == dt:
            continue
        runs = [[float_input(dt, s, i)] for i, s in enumerate(SHAPES)]
        add_case(f"cast_{tag}_to_{to}", "cast", dt, runs, lambda x: x, zero_sign=True,
                 attrs={"to": to}, out_dtype=ndt, category="misc")
    # To integers: only values a C cast defines (finite, in range), truncated toward zero.
    runs = [[(rng.uniform(-1e6, 1e6, s) * (rng.uniform(0, 1, s) < 0.9)).astype(dt)]
            for s in SHAPES]
    add_case(f"cast_{tag}_to_int32", "cast", dt, runs, lambda x: np.trunc(x),
             attrs={"to": "int32"}, out_dtype=np.int32, category="misc")
for name, ref in (("logical_and", np.logical_and), ("logical_or", np.logical_or)):
    runs = [[rng.uniform(0, 1, s) < 0.5, rng.uniform(0, 1, s) < 0.5] for s in SHAPES]
    add_case(f"{name}_bool", name, np.bool_, runs, ref, category="misc")
runs = [[rng.uniform(0, 1, s) < 0.5] for s in SHAPES]
add_case("logical_not_bool", "logical_not", np.bool_, runs, np.logical_not, category="misc")
runs = [[int_input(np.int64, s)] for s in SHAPES]
add_case("cast_int64_to_float32", "cast", np.int64, runs, lambda x: x.astype(f64),
         attrs={"to": "float32"}, out_dtype=np.float32, category="misc")

# --- pads that read the data: numpy's np.pad modes (ONNX's reflect, edge and wrap are numpy's
# reflect, edge and wrap), pads past the vector width, reflections and repeats longer than the
# dimension (reflection bounces off both ends), specials carried exactly. Wrap stays within
# one period: numpy 1.24's wrap of a longer pad is not the torus ONNX describes
# (np.pad(np.arange(3), (5, 1), "wrap") starts 2, 0, 0, 1), which kiln's wrap is.
for dt in (np.float32, np.float64):
    tag = dt.__name__
    for mode in ("reflect", "edge", "wrap"):
        long_pad = (19, 3) if mode == "wrap" else (45, 3)
        for pname, pads in {"wide": ((0, 1), (1, 0), (17, 19)),
                            "long": ((1, 0), (0, 0), long_pad)}.items():
            runs = [[float_input(dt, (int(np.prod(sh[:-1])), sh[-1]), 3).reshape(sh)]
                    for sh in [(2, 5, 37), (3, 2, 20)]]
            flat = [p[0] for p in pads] + [p[1] for p in pads]
            add_case(f"pad_{mode}_{pname}_{tag}", "pad", dt, runs,
                     lambda x, pads=pads, mode=mode: np.pad(x, pads, mode=mode),
                     zero_sign=True, category="misc", attrs={"pads": flat, "mode": mode},
                     shapes=[[None, None, None]])

# --- dft against numpy's FFT: power-of-two lengths (the radix-2 FFT) and others (the direct
# sum), one-sided, inverse, complex, a signal zero-padded to a longer length and one cut to a
# shorter one, the signal axis between others (strided lines).
for dt in (np.float32, np.float64):
    tag = dt.__name__
    for cname, (shape, axis, inverse, onesided, length) in {
            "real_pow2": ((3, 64, 1), 1, 0, 0, 0),
            "real_45_onesided": ((2, 45, 1), 1, 0, 1, 0),
            "complex_inverse_32": ((2, 32, 2), 1, 1, 0, 0),
            "complex_inverse_30": ((1, 30, 2), 1, 1, 0, 0),
            "padded_to_50": ((2, 37, 1), 1, 0, 0, 50),
            "cut_to_16": ((2, 37, 2), 1, 0, 0, 16),
            "middle_axis": ((2, 24, 3, 2), 1, 0, 0, 0),
            "axis_2_onesided": ((2, 3, 40, 1), 2, 0, 1, 0)}.items():
        x = rng.uniform(-1, 1, shape).astype(dt)

        def dft_ref(x, axis=axis, inverse=inverse, onesided=onesided, length=length):
            z = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
            n = length or z.shape[axis]
            y = np.fft.ifft(z, n=n, axis=axis) if inverse else np.fft.fft(z, n=n, axis=axis)
            if onesided:
                y = np.take(y, np.arange(n // 2 + 1), axis=axis)
            return np.stack([y.real, y.imag], axis=-1)

        n = length or shape[axis]
        add_case(f"dft_{cname}_{tag}", "dft", dt, [[x]], dft_ref, category="linalg", ulp=4,
                 attrs={"axis": axis, "inverse": inverse, "onesided": onesided, "length": length},
                 atol_of=lambda x, n=n: 16 * np.finfo(dt).eps * n * float(np.max(np.abs(x))),
                 shapes=[[None] + list(shape[1:])], split=True)

# --- max pooling's indices (numpy's first argmax of each window, as a flat index over
# (N, C, H, W)) on values with ties (small integers) and windows of -inf alone, and unpooling
# by them (numpy's scatter into zeros).
for dt in (np.float32, np.float64):
    tag = dt.__name__
    x = rng.integers(-3, 4, (2, 3, 9, 11)).astype(dt)
    x[0, 1, :3, :3] = -np.inf

    def argmax_ref(x, k=3, st=2, pd=1):
        n, c, h, w = x.shape
        xp = np.pad(x.astype(f64), ((0, 0), (0, 0), (pd, pd), (pd, pd)), constant_values=np.nan)
        oh, ow = (h + 2 * pd - k) // st + 1, (w + 2 * pd - k) // st + 1
        out = np.zeros((n, c, oh, ow), np.int64)
        for i in range(oh):
            for j in range(ow):
                win = xp[:, :, i * st:i * st + k, j * st:j * st + k].reshape(n, c, -1)
                # padding never wins: NaN there, and a window of -inf keeps its first real tap
                filled = np.where(np.isnan(win), -np.inf, win)
                real = ~np.isnan(win)
                best = np.where(real & (filled == filled.max(-1, keepdims=True)), 1, 0)
                first = np.argmax(best, -1)
                y, xx = i * st - pd + first // k, j * st - pd + first % k
                out[:, :, i, j] = (np.arange(n)[:, None] * c + np.arange(c)[None, :]) * h * w \
                    + y * w + xx
        return out

    add_case(f"max_pool_indices_{tag}", "max_pool_indices", dt, [[x]], argmax_ref,
             category="linalg", out_dtype=np.int64, split=True,
             attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
             shapes=[[None, 3, 9, 11]])
    vals = rng.uniform(-1, 1, (2, 3, 4, 5)).astype(dt)
    idx = np.stack([rng.permutation(9 * 11)[:20] for _ in range(6)]).reshape(2, 3, 4, 5)
    idx = idx + (np.arange(6).reshape(2, 3, 1, 1) * 9 * 11)

    def unpool_ref(v, i):
        y = np.zeros(2 * 3 * 9 * 11)
        y[i.reshape(-1)] = v.reshape(-1)
        return y.reshape(2, 3, 9, 11)

    add_case(f"max_unpool_{tag}", "max_unpool", dt, [[vals, idx.astype(np.int64)]], unpool_ref,
             category="linalg", split=False, attrs={"output": [9, 11]},
             shapes=[[2, 3, 4, 5], [2, 3, 4, 5]])

# --- det against numpy's LAPACK: batches of sizes 1 to 17, a singular matrix (two equal rows),
# a permutation (sign flips only), a NaN and an infinity.
for dt in (np.float32, np.float64):
    tag = dt.__name__
    runs = []
    for m in (1, 2, 3, 5, 17):
        a = rng.uniform(-1, 1, (2, 3, m, m)).astype(dt)
        if m >= 3:
            a[0, 0, 1] = a[0, 0, 2]                      # singular
            a[0, 1] = np.eye(m, dtype=dt)[rng.permutation(m)]
            a[1, 0, 0, 0] = np.nan
            a[1, 1, m - 1, 0] = np.inf
        runs.append([a])
    add_case(f"det_{tag}", "det", dt, runs, lambda a: np.linalg.det(a), category="linalg",
             ulp=64, atol_of=lambda a: 64 * np.finfo(dt).eps * float(np.nanmax(np.abs(np.where(np.isinf(a), 0, a)))) ** a.shape[-1] * a.shape[-1] ** 2,
             shapes=[[None, None, None, None]], split=True)

# --- matmul, gemm, convolution and pooling (numpy's own kernels and loops) --------------------


def dot_slack(dt):
    # Orders of summation differ: a few eps of the sum of |products|.
    eps = np.finfo(dt).eps
    return lambda a, b, *rest: 8 * eps * float(np.max(np.abs(a.astype(f64)) @
                                                  np.abs(b.astype(f64)), initial=0)) + 1e-300


for dt in (np.float32, np.float64):
    tag = dt.__name__
    mm = [(1, 1, 1), (5, 7, 3), (16, 16, 16), (17, 33, 9), (33, 130, 17), (2, 300, 65)]
    runs = [[rng.uniform(-2, 2, (m, k)).astype(dt), rng.uniform(-2, 2, (k, n)).astype(dt)]
            for m, k, n in mm]
    add_case(f"matmul_{tag}", "matmul", dt, runs, np.matmul, category="linalg",
             atol_of=dot_slack(dt), ulp=4, shapes=[[None, None], [None, None]])
    runs = [[rng.uniform(-2, 2, (k, m)).astype(dt), rng.uniform(-2, 2, (n, k)).astype(dt),
             rng.uniform(-2, 2, (n,)).astype(dt)] for m, k, n in mm]
    add_case(f"gemm_transposed_{tag}", "gemm", dt, runs,
             lambda a, b, c: 0.5 * (a.T @ b.T) + 2.0 * c, category="linalg",
             attrs={"alpha": 0.5, "beta": 2.0, "transA": 1, "transB": 1},
             atol_of=lambda a, b, c: dot_slack(dt)(a.T, b.T) + 1e-6 * float(np.max(np.abs(c))),
             ulp=4, shapes=[[None, None], [None, None], [None]])

    def conv2d(x, w, b, strides, pads, dil, group):
        n, _, h, wd = x.shape
        m, cg, kh, kw = w.shape
        xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
        oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // strides[0] + 1
        ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // strides[1] + 1
        out = np.zeros((n, m, oh, ow))
        mg = m // group
        for g in range(group):
            for i in range(kh):
                for j in range(kw):
                    patch = xp[:, g * cg:(g + 1) * cg,
                               i * dil[0]: i * dil[0] + strides[0] * (oh - 1) + 1: strides[0],
                               j * dil[1]: j * dil[1] + strides[1] * (ow - 1) + 1: strides[1]]
                    out[:, g * mg:(g + 1) * mg] += np.einsum(
                        "nchw,mc->nmhw", patch, w[g * mg:(g + 1) * mg, :, i, j])
        return out + b[None, :, None, None]

    for cname, (n, c, h, wd, m, k, st, pd, dl, grp) in {
            "3x3_pad1": (2, 3, 9, 11, 4, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
            "5x5_stride2": (1, 4, 17, 19, 6, 5, (2, 2), (2, 1, 2, 1), (1, 1), 1),
            "3x3_dilated": (1, 2, 12, 12, 3, 3, (1, 1), (0, 0, 0, 0), (2, 2), 1),
            "depthwise": (1, 8, 10, 13, 8, 3, (1, 1), (1, 1, 1, 1), (1, 1), 8),
            "1x1_wide": (2, 16, 7, 7, 33, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1)}.items():
        x = rng.uniform(-1, 1, (n, c, h, wd)).astype(dt)
        w = rng.uniform(-1, 1, (m, c // grp, k, k)).astype(dt)
        b = rng.uniform(-1, 1, (m,)).astype(dt)
        attrs = {"strides": list(st), "pads": list(pd), "dilations": list(dl), "group": grp,
                 "kernel_shape": [k, k]}
        add_case(f"conv_{cname}_{tag}", "conv", dt, [[x, w, b]],
                 lambda x, w, b, st=st, pd=pd, dl=dl, grp=grp: conv2d(x, w, b, st, pd, dl, grp),
                 category="linalg", attrs=attrs, ulp=4,
                 atol_of=lambda x, w, b: 8 * np.finfo(dt).eps * x[0].size * 1.0,
                 shapes=[[None, c, h, wd], [m, c // grp, k, k], [m]])

    def conv_transpose2d(x, w, b, st, pd, op, dl, grp):
        # Each input position's value times each tap's weights, added at its strided place
        # in the uncropped output; the pads then crop (or, negative, extend) that output.
        n, c, h, wd = x.shape
        _, mg, kh, kw = w.shape
        cg = c // grp
        full = [(h - 1) * st[0] + (kh - 1) * dl[0] + 1, (wd - 1) * st[1] + (kw - 1) * dl[1] + 1]
        y = np.zeros((n, grp * mg, *full))
        for g in range(grp):
            for i in range(kh):
                for j in range(kw):
                    y[:, g * mg:(g + 1) * mg,
                      i * dl[0]: i * dl[0] + (h - 1) * st[0] + 1: st[0],
                      j * dl[1]: j * dl[1] + (wd - 1) * st[1] + 1: st[1]] += np.einsum(
                          "nchw,cm->nmhw", x[:, g * cg:(g + 1) * cg],
                          w[g * cg:(g + 1) * cg, :, i, j])
        out = [full[d] - pd[d] - pd[d + 2] + op[d] for d in range(2)]
        before = [max(0, -pd[d]) for d in range(2)]
        after = [max(0, pd[d] + out[d] - full[d]) for d in range(2)]
        y = np.pad(y, ((0, 0), (0, 0), (before[0], after[0]), (before[1], after[1])))
        lo = [pd[d] + before[d] for d in range(2)]
        y = y[:, :, lo[0]:lo[0] + out[0], lo[1]:lo[1] + out[1]]
        return y + b[None, :, None, None]

    # (n, c, h, w, mg, k, strides, pads, output_padding, dilations, group): a GAN's 4x4
    # stride-2 upsampling, a U-Net's 2x2 stride 2 (no overlap), 3x3 stride 2 with
    # output_padding, a dilated one, groups, negative pads (an output_shape past the windows'
    # reach: positions of bias alone), and 33 channels and 37 columns (tails past 16 wide).
    for cname, (n, c, h, wd, mg, k, st, pd, op, dl, grp) in {
            "4x4_stride2": (2, 5, 7, 9, 6, 4, (2, 2), (1, 1, 1, 1), (0, 0), (1, 1), 1),
            "2x2_stride2": (1, 8, 6, 5, 4, 2, (2, 2), (0, 0, 0, 0), (0, 0), (1, 1), 1),
            "3x3_outpad": (1, 4, 5, 6, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1),
            "dilated": (1, 3, 6, 5, 2, 3, (1, 2), (2, 0, 1, 1), (0, 1), (2, 1), 1),
            "groups": (2, 6, 5, 4, 2, 3, (2, 1), (0, 1, 1, 0), (0, 0), (1, 1), 3),
            "negative_pads": (1, 2, 3, 3, 2, 3, (3, 2), (-1, 0, -2, -1), (0, 0), (1, 1), 1),
            "tails": (1, 7, 3, 37, 33, 3, (1, 1), (1, 1, 1, 1), (0, 0), (1, 1), 1)}.items():
        x = rng.uniform(-1, 1, (n, c, h, wd)).astype(dt)
        w = rng.uniform(-1, 1, (c, mg, k, k)).astype(dt)
        b = rng.uniform(-1, 1, (grp * mg,)).astype(dt)
        attrs = {"strides": list(st), "pads": list(pd), "output_padding": list(op),
                 "dilations": list(dl), "group": grp}
        add_case(f"conv_transpose_{cname}_{tag}", "conv_transpose", dt, [[x, w, b]],
                 lambda x, w, b, st=st, pd=pd, op=op, dl=dl, grp=grp:
                 conv_transpose2d(x, w, b, st, pd, op, dl, grp),
                 category="linalg", attrs=attrs, ulp=4,
                 atol_of=lambda x, w, b: 8 * np.finfo(dt).eps * x[0].size * 1.0,
                 shapes=[[None, c, h, wd], [c, mg, k, k], [grp * mg]])

    def pool(x, k, st, pd, is_max):
        fill = -np.inf if is_max else np.nan
        xp = np.pad(x.astype(f64), ((0, 0), (0, 0), (pd[0], pd[2]), (pd[1], pd[3])),
                    constant_values=fill)
        win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
        win = win[:, :, ::st[0], ::st[1]]
        if is_max:
            return np.max(win, axis=(4, 5))
        return np.nanmean(win, axis=(4, 5))  # padding does not count (count_include_pad=0)

    for is_max, op in ((True, "max_pool"), (False, "average_pool")):
        x = float_input(dt, (2 * 3, 11 * 13), 1).reshape(2, 3, 11, 13) if is_max else \
            rng.uniform(-3, 3, (2, 3, 11, 13)).astype(dt)
        if is_max:
            x = np.where(np.isnan(x), dt(0), x)  # NaN windows: covered by reduce_max
        add_case(f"{op}_3x3_{tag}", op, dt, [[x]],
                 lambda x, is_max=is_max: pool(x, 3, (2, 2), (1, 1, 1, 1), is_max),
                 category="linalg", ulp=2 if not is_max else 0,
                 # a window's sum may cancel: slack of a few eps of the terms summed
                 atol_of=None if is_max else
                 (lambda x: 16 * 9 * np.finfo(dt).eps * float(np.max(np.abs(x)))),
                 attrs={"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                 shapes=[[None, 3, 11, 13]], split=False)

with open(os.path.join(OUT, "cases.json"), "w") as f:
    json.dump(cases, f, indent=1)
print(f"{len(cases)} cases, {sum(len(c['runs']) for c in cases)} runs in {OUT}")
