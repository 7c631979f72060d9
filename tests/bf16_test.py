#!/usr/bin/env python3
"""kiln's bfloat16 products (--precision bf16, KILN_PRECISION=bf16) against NumPy.

The reference rounds A and the weights to bfloat16 here (to nearest, ties to even, written
from the format's definition, not kiln's code) and multiplies in float64; kiln's float32 sums
must land within the rigorous bound of K float32 roundings, K * 2^-24 * (|A| @ |B|). A
float32 product misses that bound by far (bfloat16 keeps 8 significant bits), so each case
also proves that the bf16 kernel ran. Shapes cross the kernel's tails: M = 1, 2, 7, 13 (the
row blocks of 6), K = 1, 2, 5, 67, 131, 1100 (odd K pads a pair; 1100 crosses the 512-k
block), N = 16, 17, 33, 50, 300 (panels of 16, the 256-column chunk). Gemm with a bias, ReLU
(the kernel's clamp), transA (A read down its columns), transB, alpha and beta; rank-3 activations; a weight two products
share; NaN, inf and rounding ties in A; a product narrower than 16 columns, which stays
float32; a bfloat16 model, exact at either precision. Every case runs with the kernel kiln picks, with KILN_GEMM_BF16=fma (the float32
kernel, all a CPU without AVX512-BF16 has) and, where the CPU has AVX512-BF16, with
KILN_GEMM_BF16=dp (vdpbf16ps): the last two must agree bit for bit. Then bad precisions must
fail naming the flag.

usage: bf16_test.py KILN_BINARY WORKDIR
"""
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(11)
failures = []
with open("/proc/cpuinfo") as f:
    FLAGS = next((l.split(":")[1].split() for l in f if l.startswith("flags")), [])
BF16_CPU = "avx512_bf16" in FLAGS


def bf16(x):
    """float32 values rounded to bfloat16 (to nearest, ties to even), as float32."""
    x = np.asarray(x, np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16) & 0xFFFFFFFF
    out = r.astype(np.uint32).view(np.float32).copy()
    out[np.isnan(x)] = np.nan
    return out


def reference(a, b):
    """bf16(a) @ bf16(b) in float64, and the float32 summation bound of each element."""
    a16, b16 = bf16(a).astype(np.float64), bf16(b).astype(np.float64)
    k = a.shape[-1]
    with np.errstate(invalid="ignore", over="ignore"):
        return a16 @ b16, (np.abs(a16) @ np.abs(b16)) * k * 2.0**-24


def graph(nodes, inputs, consts, outputs, name):
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return kiln_cli.write_model(WORK, name, g, [("", 13)])


def close(got, want, bound):
    """Equal where want is NaN or infinite, within bound elsewhere."""
    if got.shape != want.shape:
        return "shape " + str(got.shape) + " != " + str(want.shape)
    special = ~np.isfinite(want)
    if not np.array_equal(np.isnan(got), np.isnan(want)) or \
            not np.array_equal(got[special & ~np.isnan(want)], want[special & ~np.isnan(want)]):
        bad = np.argwhere((np.isnan(got) != np.isnan(want)))
        return f"NaN/inf differ at {bad[:4].tolist()}"
    with np.errstate(invalid="ignore"):
        err = np.abs(got.astype(np.float64) - want)
    over = np.argwhere(~special & (err > bound + 1e-30))
    if len(over):
        i = tuple(over[0])
        return (f"{len(over)} elements past the bound, first {list(i)}: got {got[i]!r} want "
                f"{want[i]!r} (bound {bound[i]:.3g})")
    return None


def check(name, path, inputs, wants):
    """wants: output name -> (reference, bound). Each kernel within the bound; the two kernels
    bit for bit alike (no input here is subnormal, which only vdpbf16ps flushes)."""
    got = {}
    for kernel in ("", "fma") + (("dp",) if BF16_CPU else ()):
        env = {"KILN_PRECISION": "bf16", **({"KILN_GEMM_BF16": kernel} if kernel else {})}
        r, out = kiln_cli.run(KILN, path, inputs, env)
        label = name + (f" [KILN_GEMM_BF16={kernel}]" if kernel else "")
        if r.returncode != 0:
            failures.append(label + ": kiln failed: " + r.stderr.strip()[-400:])
            continue
        for k, (want, bound) in wants.items():
            got[kernel, k] = np.load(os.path.join(out, k + ".npy"))
            msg = close(got[kernel, k], want, bound)
            if msg:
                failures.append(f"{label} output {k}: {msg}")
    for k in wants:
        if ("fma", k) in got and ("dp", k) in got and \
                got["fma", k].tobytes() != got["dp", k].tobytes():
            failures.append(f"{name} output {k}: vdpbf16ps and the float32 kernel differ")


# ---- MatMul by a weight, over the kernel's tails: one model per M, an output per (K, N) ---
for m in (1, 2, 7, 13):
    nodes, inputs, consts, wants = [], {}, {}, {}
    for k in (1, 2, 5, 67, 131, 1100):
        for n in (16, 17, 33, 50, 300):
            if k == 1100 and n not in (17, 300):
                continue
            t = f"{k}x{n}"
            a = RNG.standard_normal((m, k)).astype(np.float32)
            w = RNG.standard_normal((k, n)).astype(np.float32)
            inputs["a" + t], consts["w" + t] = a, w
            nodes.append(helper.make_node("MatMul", ["a" + t, "w" + t], ["y" + t]))
            wants["y" + t] = reference(a, w)
    check(f"matmul M={m}", graph(nodes, inputs, consts, list(wants), f"matmul_m{m}"), inputs,
          wants)

# ---- Gemm: bias and ReLU in the kernel's store, transB, alpha; beta != 1 scales C first ----
m, k, n = 13, 70, 37
a = RNG.standard_normal((m, k)).astype(np.float32)
wt = RNG.standard_normal((n, k)).astype(np.float32)
c = RNG.standard_normal(n).astype(np.float32)
ab, bound = reference(a, wt.T)
at = np.ascontiguousarray(a.T)  # transA: the kernel reads A down its columns
nodes = [helper.make_node("Gemm", ["a", "wt", "c"], ["g"], transB=1),
         helper.make_node("Relu", ["g"], ["y"]),
         helper.make_node("Gemm", ["a", "wt", "c"], ["z"], transB=1, alpha=0.5, beta=2.0),
         helper.make_node("Gemm", ["at", "wt", "c"], ["ta"], transA=1, transB=1)]
wants = {"y": (np.maximum(ab + c, 0), bound),
         "z": (0.5 * ab + 2.0 * c, 0.5 * bound + 1e-6 * np.abs(c)),
         "ta": (ab + c, bound + 1e-6 * np.abs(c))}
check("gemm bias relu transA", graph(nodes, {"a": a, "at": at}, {"wt": wt, "c": c}, list(wants),
                                     "gemm"), {"a": a, "at": at}, wants)

# ---- rank-3 activations (a transformer's (batch, tokens, width) @ W), a shared weight, and a
# product 10 wide, which stays float32 ----
x = RNG.standard_normal((2, 9, 48)).astype(np.float32)
w = RNG.standard_normal((48, 64)).astype(np.float32)
w10 = RNG.standard_normal((48, 10)).astype(np.float32)
nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Relu", ["x"], ["x2"]),
         helper.make_node("MatMul", ["x2", "w"], ["y2"]),
         helper.make_node("MatMul", ["x", "w10"], ["narrow"])]
f32 = x.astype(np.float64) @ w10.astype(np.float64)
wants = {"y": reference(x, w), "y2": reference(np.maximum(x, 0), w),
         "narrow": (f32, 48 * 2.0**-24 * (np.abs(x.astype(np.float64)) @ np.abs(w10)))}
check("rank 3, shared weight, narrow", graph(nodes, {"x": x}, {"w": w, "w10": w10}, list(wants),
                                             "rank3"), {"x": x}, wants)

# ---- NaN, inf and rounding ties in A: 1 + 2^-8 rounds to 1, 1 + 3 * 2^-8 up to 1 + 2^-6 ----
a = RNG.standard_normal((7, 40)).astype(np.float32)
a[1, 3], a[2, 39], a[3, 0] = np.nan, np.inf, -np.inf
a[4, :] = np.float32(1 + 2.0**-8)
a[5, :] = np.float32(1 + 3 * 2.0**-8)
a[6, :] = np.float32(-(1 + 2.0**-8))
w = np.abs(RNG.standard_normal((40, 20))).astype(np.float32) + 0.1
want, bound = reference(a, w)
check("nan inf ties", graph([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"w": w},
                            ["y"], "special"), {"a": a}, {"y": (want, bound)})
if not (want[4] == bf16(w).astype(np.float64).sum(0)).all():
    failures.append("reference: 1 + 2^-8 should round to 1 (ties to even)")

# ---- A bfloat16 model (its weight and MatMul in bfloat16): kiln computes it in float32 on
# the model's own values; at bf16 the same values go through the bfloat16 kernel, exactly, so
# both runs are the float64 product rounded to bfloat16, within one step of it ----
x = RNG.standard_normal((5, 70)).astype(np.float32)
w = RNG.standard_normal((70, 33)).astype(np.float32)
wb16 = helper.make_tensor("w", TensorProto.BFLOAT16, w.shape, raw=True,
                          vals=(bf16(w).view(np.uint32) >> 16).astype(np.uint16).tobytes())
g = helper.make_graph(
    [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
     helper.make_node("MatMul", ["xb", "w"], ["yb"]),
     helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)], "bf16_model",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [wb16])
path = kiln_cli.write_model(WORK, "bf16_model", g, [("", 13)])
exact = reference(x, w)[0]
for precision in ("f32", "bf16"):
    r, out = kiln_cli.run(KILN, path, {"x": x}, {"KILN_PRECISION": precision})
    if r.returncode != 0:
        failures.append(f"bfloat16 model at {precision}: kiln failed: {r.stderr[-300:]}")
        continue
    err = np.abs(np.load(os.path.join(out, "y.npy")) - exact) / np.maximum(np.abs(exact), 1e-3)
    if err.max() > 2.0**-8:
        failures.append(f"bfloat16 model at {precision}: {err.max():.3g} from the rounded product")
r = subprocess.run([KILN, "source", "--graph", "--precision", "bf16", path], capture_output=True,
                   text=True)
if "bfloat16 (3, 35, 32)" not in r.stdout:
    failures.append("a bfloat16 model at bf16 should pack its weight as bfloat16 pairs: " +
                    r.stdout[-500:])

# ---- Convolutions: windows as rows (im2col, or the channels-last image for a 1x1) times the
# weight's bfloat16 panels; bias and ReLU in the store. NaN, inf and ties in X ----
def conv_reference(x, w, b, stride, pads, dil):
    """The convolution of bf16(x) by bf16(w) in float64 through its windows' rows, with the
    bound of the sums plus the float32 roundings of the bias's add."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]), np.float32)
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    rows = np.empty((n, oh, ow, c, kh, kw), np.float32)
    for ky in range(kh):
        for kx in range(kw):
            tap = xp[:, :, ky * dil[0]:ky * dil[0] + (oh - 1) * stride[0] + 1:stride[0],
                     kx * dil[1]:kx * dil[1] + (ow - 1) * stride[1] + 1:stride[1]]
            rows[:, :, :, :, ky, kx] = tap.transpose(0, 2, 3, 1)
    y, bound = reference(rows.reshape(n, oh, ow, -1), w.reshape(m, -1).T)
    if b is not None:
        y = y + b.astype(np.float64)
        bound = bound + (np.abs(y) + np.abs(b)) * 2.0**-23
    return y.transpose(0, 3, 1, 2), bound.transpose(0, 3, 1, 2)


x = RNG.standard_normal((2, 5, 9, 11)).astype(np.float32)
x.flat[[3, 40, 77]] = [np.nan, np.inf, 1.0 + 2.0**-8]  # a tie rounds to even
x1 = RNG.standard_normal((1, 8, 7, 6)).astype(np.float32)
w3 = RNG.standard_normal((16, 5, 3, 3)).astype(np.float32)
b3 = RNG.standard_normal(16).astype(np.float32)
w1 = RNG.standard_normal((24, 8, 1, 1)).astype(np.float32)
wd = RNG.standard_normal((17, 5, 2, 3)).astype(np.float32)
nodes = [helper.make_node("Conv", ["x", "w3", "b3"], ["c3"], kernel_shape=[3, 3],
                          strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c3"], ["r3"]),
         helper.make_node("Conv", ["x1", "w1"], ["c1"], kernel_shape=[1, 1]),
         helper.make_node("Conv", ["x", "wd"], ["cd"], kernel_shape=[2, 3], strides=[1, 2],
                          pads=[0, 1, 2, 1], dilations=[2, 2])]
want3, bound3 = conv_reference(x, w3, b3, (2, 2), (1, 1, 1, 1), (1, 1))
with np.errstate(invalid="ignore"):
    wants = {"r3": (np.maximum(want3, 0), bound3),
             "c1": conv_reference(x1, w1, None, (1, 1), (0, 0, 0, 0), (1, 1)),
             "cd": conv_reference(x, wd, None, (1, 2), (0, 1, 2, 1), (2, 2))}
path = graph(nodes, {"x": x, "x1": x1}, {"w3": w3, "b3": b3, "w1": w1, "wd": wd}, list(wants),
             "bf16_convs")
check("convolutions", path, {"x": x, "x1": x1}, wants)
r = subprocess.run([KILN, "source", "--graph", "--precision", "bf16", path], capture_output=True,
                   text=True)
lines = r.stdout.splitlines()
if r.returncode != 0 or sum("gemm{" in ln and ".packed.bf16" in ln for ln in lines) != 3 or \
        sum("im2col{" in ln for ln in lines) != 2 or any(" conv{" in ln for ln in lines):
    failures.append("bf16 convolutions should be two im2col and three bf16 products: " +
                    r.stdout[-600:] + r.stderr[-300:])
# KILN_PASSES=-bf16conv keeps the convolutions float32 at bf16 (the spec's "off" is not undone).
r = subprocess.run([KILN, "source", "--graph", "--precision", "bf16", path], capture_output=True,
                   text=True, env=dict(os.environ, KILN_PASSES="-cse, -bf16conv"))
if r.returncode != 0 or "im2col{" in r.stdout or "conv{" not in r.stdout:
    failures.append("KILN_PASSES=-bf16conv should keep the convolutions float32: " +
                    r.stdout[-400:] + r.stderr[-300:])

# ---- Without the option the same model stays float32 (past the bf16 bound's reach) ----
m, k, n = 6, 300, 40
a = RNG.standard_normal((m, k)).astype(np.float32)
w = RNG.standard_normal((k, n)).astype(np.float32)
path = graph([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, {"w": w}, ["y"], "plain")
r, out = kiln_cli.run(KILN, path, {"a": a}, {"KILN_PRECISION": "f32"})
exact = a.astype(np.float64) @ w.astype(np.float64)
if r.returncode != 0:
    failures.append("f32 run failed: " + r.stderr[-300:])
else:
    err = np.abs(np.load(os.path.join(out, "y.npy")) - exact).max()
    if err > 1e-3:
        failures.append(f"without bf16 the product should be float32: max error {err}")
    bf_err = np.abs(reference(a, w)[0] - exact).max()
    if bf_err < 10 * max(err, 1e-6):
        failures.append(f"the test cannot tell bf16 ({bf_err}) from f32 ({err}) apart")

# ---- The flag on the command line, and what `kiln source` shows ----
r = subprocess.run([KILN, "source", "--precision", "bf16", path], capture_output=True, text=True)
if r.returncode != 0 or "kiln_gemm_packed_bf16(" not in r.stdout:
    failures.append("kiln source --precision bf16 should call kiln_gemm_packed_bf16: " +
                    r.stderr[-300:])
r = subprocess.run([KILN, "source", path], capture_output=True, text=True,
                   env=dict(os.environ, KILN_PRECISION="f32"))
if r.returncode != 0 or "kiln_gemm_packed_bf16(" in r.stdout:
    failures.append("kiln source without --precision should not use the bf16 kernel")

# ---- Bad precisions, named ----
for args, env, words in (
        (["--precision", "fp16"], {}, ["--precision", "fp16"]),
        ([], {"KILN_PRECISION": "half"}, ["KILN_PRECISION", "half"]),
        (["--precision", "bf16", "--device", "cuda"], {"KILN_CUDA_DEVICE": "emulator"},
         ["precision bf16", "cuda"])):
    r = subprocess.run([KILN, "source", *args, path], capture_output=True, text=True,
                       env=dict(os.environ, **env))
    if r.returncode == 0 or not all(w in r.stderr for w in words):
        failures.append(f"{args} {env}: want an error naming {words}, got rc {r.returncode}: "
                        f"{r.stderr.strip()[-300:]}")

kiln_cli.finish(failures, "bf16_test: every product within the float32 bound of NumPy's bfloat16 "
                f"one ({'vdpbf16ps and ' if BF16_CPU else ''}the float32 kernel"
                f"{', bit for bit alike' if BF16_CPU else ''}); bad precisions named")
