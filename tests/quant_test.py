#!/usr/bin/env python3
"""kiln's integer ops against NumPy with int64 sums, on the values that break int8 kernels.

Each case is an ONNX model made here with Debian's onnx package and run by `kiln run`
(compiled module, never the generic tier): MatMulInteger, QLinearMatMul, ConvInteger,
QLinearConv, QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear, with
saturation at both ends, zero points 0/127/255 (and -128/127 for int8), rounding ties,
full-range bytes (255 x -128, the pair sum a 16-bit kernel would overflow), sizes past
the vector width (N = 1, 17, 33, 50; K = 1, 5, 67, 131; M = 1, 7, 13), per-channel zero
points and scales of odd counts, weights both constant (packed at compile time) and
graph inputs (packed per run). Every case runs with the CPU's kernel and with
KILN_QGEMM=c (the plain C kernel), KILN_QGEMM=avx2 (vpmaddwd on widened bytes) and, where
the CPU has VBMI, KILN_QGEMM=vnni (VNNI without VBMI's transposed stores); where it has AMX, the
default is its tile products for 16 rows or more. Then bad
quantization parameters must fail naming the node and the input.

usage: quant_test.py KILN_BINARY WORKDIR
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
RNG = np.random.default_rng(7)
ONNX_TYPE = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8,
             np.int32: TensorProto.INT32, np.float32: TensorProto.FLOAT}
failures = []
with open("/proc/cpuinfo") as f:
    FLAGS = next((l.split(":")[1].split() for l in f if l.startswith("flags")), [])
VNNI_AND_VBMI = "avx512_vnni" in FLAGS and "avx512vbmi" in FLAGS


def onnx_type(a):
    return ONNX_TYPE[a.dtype.type]


def model(node, inputs, consts, outputs, name):
    """inputs: name -> array fed at run time; consts: name -> initializer (a node of the
    com.microsoft domain gets that opset too)."""
    g = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info(k, onnx_type(v), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, t, None) for k, t in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    opsets = [("", 13)]
    if node.domain == "com.microsoft":
        opsets.append(("com.microsoft", 1))
    return kiln_cli.write_model(WORK, name, g, opsets, ir_version=7)


def run(path, inputs, env_extra=None):
    return kiln_cli.run(KILN, path, inputs, env_extra, timeout=None)


def check(name, path, inputs, want, env_extra=None):
    r, out = run(path, inputs, env_extra)
    label = name + (f" [KILN_QGEMM={env_extra['KILN_QGEMM']}]" if env_extra else "")
    if r.returncode != 0:
        failures.append(label + ": kiln failed: " + r.stderr.strip()[-400:])
        return
    got = np.load(os.path.join(out, "y.npy"))
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        bad = np.argwhere(got != want) if got.shape == want.shape else "shape " + str(got.shape)
        failures.append(f"{label}: differs from NumPy at {bad[:5] if len(bad) else bad}, "
                        f"got {got.ravel()[:8]} want {want.ravel()[:8]}")


def outputs_under(label, path, inputs, envs, names=("y",)):
    """Runs the model once per environment: {str(env): [each named output]}; a failed run is
    a failure, and missing from the result."""
    got = {}
    for env in envs:
        r, out = run(path, inputs, env)
        if r.returncode != 0:
            failures.append(f"{label} {env}: kiln failed: {r.stderr.strip()[-300:]}")
            continue
        got[str(env)] = [np.load(os.path.join(out, n + ".npy")) for n in names]
    return got


def both(name, path, inputs, want):
    check(name, path, inputs, want)
    check(name, path, inputs, want, {"KILN_QGEMM": "c"})
    if "avx2" in FLAGS:
        check(name, path, inputs, want, {"KILN_QGEMM": "avx2"})
    if VNNI_AND_VBMI:  # the VNNI kernel without VBMI's transposed stores too
        check(name, path, inputs, want, {"KILN_QGEMM": "vnni"})


def requant(acc, mult, yz, ydt):
    """The float32 epilogue: rint(acc * mult) + y_zp, saturated (ties to even)."""
    lo, hi = (0, 255) if ydt == np.uint8 else (-128, 127)
    y = np.rint(acc.astype(np.float32) * mult.astype(np.float32)) + np.float32(yz)
    return np.clip(y, lo, hi).astype(ydt)


def edge_bytes(shape, dt):
    """Random bytes with each row's first elements at the extremes of the type."""
    info = np.iinfo(dt)
    a = RNG.integers(info.min, info.max + 1, size=shape).astype(dt)
    flat = a.reshape(-1)
    flat[: min(3, flat.size)] = [info.max, info.min, info.max][: min(3, flat.size)]
    return a


# ---- matrix products -----------------------------------------------------------------
# (37, 128, 40), (70, 192, 33): AMX's tile products where the CPU has them (16 rows and
# more): two blocks of 16 rows and vpdpbusd's 5 after them, an odd count of panels, the last
# partial. (37, 67, 33), (32, 24, 40), (48, 100, 17): k past a multiple of 64 (a partial
# group of four, a chunk shorter than one, a whole chunk and a part), the last two with A's
# rows so short that the partial chunk's 64-byte reads would run past A (copied out).
for m, k, n in [(1, 1, 1), (7, 5, 17), (13, 67, 33), (4, 131, 50), (6, 64, 32), (37, 128, 40),
                (70, 192, 33), (37, 67, 33), (32, 24, 40), (48, 100, 17)]:
    for adt, bdt in [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8),
                     (np.int8, np.uint8)]:
        a = edge_bytes((m, k), adt)
        b = edge_bytes((k, n), bdt)
        ainfo, binfo = np.iinfo(adt), np.iinfo(bdt)
        az = np.array(ainfo.max if adt == np.uint8 else 0, adt)
        bz = RNG.integers(binfo.min, binfo.max + 1, size=n).astype(bdt)  # per column
        ref = (a.astype(np.int64) - int(az)) @ (b.astype(np.int64) - bz.astype(np.int64))
        tag = f"{m}x{k}x{n}_{np.dtype(adt).name}_{np.dtype(bdt).name}"
        for const_b in (True, False):
            name = f"matmulinteger_{tag}_{'const' if const_b else 'input'}"
            node = helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])
            ins = {"a": a} if const_b else {"a": a, "b": b}
            consts = {"az": az, "bz": bz, **({"b": b} if const_b else {})}
            path = model(node, ins, consts, [("y", TensorProto.INT32)], name)
            both(name, path, ins, ref.astype(np.int32))
        # QLinearMatMul with per-column B scales, Y at either type, zero points 0/127/255.
        ydt = np.uint8 if (m + n) % 2 else np.int8
        for yz_v in ([0, 127, 255] if ydt == np.uint8 else [-128, 0, 127]):
            sa = np.float32(0.02)
            sb = (RNG.random(n).astype(np.float32) + 0.5) * np.float32(0.01)
            sy = np.float32(0.05 if k > 8 else 0.001)
            yz = np.array(yz_v, ydt)
            mult = (sa * sb) / sy
            want = requant(ref, mult, yz_v, ydt)
            name = f"qlinearmatmul_{tag}_yz{yz_v}"
            node = helper.make_node("QLinearMatMul",
                                    ["a", "sa", "az", "b", "sb", "bz", "sy", "yz"], ["y"])
            consts = {"sa": np.array(sa), "az": az, "b": b, "sb": sb, "bz": bz,
                      "sy": np.array(sy), "yz": yz}
            path = model(node, {"a": a}, consts, [("y", onnx_type(yz))], name)
            both(name, path, {"a": a}, want)

# A few rows against a large packed B (a classifier's one row): the parts split B's column
# panels (kiln_qmatmul's by_columns), the last panel partial; per-column zero points and
# scales follow each part's columns. Large enough that the thunk is split.
for m, k, n in [(1, 1280, 1000), (5, 300, 70)]:
    a = edge_bytes((m, k), np.uint8)
    b = edge_bytes((k, n), np.int8)
    az, bz = np.array(3, np.uint8), RNG.integers(-4, 5, size=n).astype(np.int8)
    sa, sy, yz = np.float32(0.02), np.float32(2.0), np.array(127, np.uint8)
    sb = (RNG.random(n).astype(np.float32) + 0.5) * np.float32(0.01)
    acc = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - bz.astype(np.int64))
    node = helper.make_node("QLinearMatMul", ["a", "sa", "az", "b", "sb", "bz", "sy", "yz"], ["y"])
    consts = {"sa": np.array(sa), "az": az, "b": b, "sb": sb, "bz": bz, "sy": np.array(sy), "yz": yz}
    both(f"qlinearmatmul_columns_{m}x{k}x{n}",
         model(node, {"a": a}, consts, [("y", TensorProto.UINT8)], f"qlinearmatmul_columns_{m}x{k}x{n}"),
         {"a": a}, requant(acc, (sa * sb) / sy, 127, np.uint8))

# Rounding ties: acc * mult lands exactly on .5 (acc odd, mult 0.5) -> half to even.
a = np.arange(1, 17, dtype=np.uint8).reshape(16, 1)
b = np.ones((1, 16), np.int8)
want = requant(a.astype(np.int64) @ b.astype(np.int64), np.float32(0.5), 100, np.uint8)
node = helper.make_node("QLinearMatMul", ["a", "sa", "az", "b", "sb", "bz", "sy", "yz"], ["y"])
consts = {"sa": np.array(np.float32(0.5)), "az": np.array(0, np.uint8), "b": b,
          "sb": np.array(np.float32(1.0)), "bz": np.array(0, np.int8),
          "sy": np.array(np.float32(1.0)), "yz": np.array(100, np.uint8)}
both("qlinearmatmul_ties", model(node, {"a": a}, consts, [("y", TensorProto.UINT8)], "ties"),
     {"a": a}, want)
assert want[0, 0] == 100 and want[2, 0] == 102  # 0.5 -> 0, 1.5 -> 2: the reference itself

# Dynamic quantization's dequantization, MatMulInteger -> Cast -> Mul by A's scale (a run-time
# input) times B's (per column or one), is done in the kernel's store (a float32 qmatmul,
# rewrite/fuse_epilogue.cpp): bit for bit NumPy's float32(acc) * float32(sa * sb). With an Add
# after the Mul, the Add is the product's epilogue, its parts whole rows (split_rows). Without
# one, the few-row case and the B of 8 MiB and more (a language model's head) split B's column
# panels; K past the vector width; N with a partial panel.
def dequantized_model(name, a_shape, consts, bias=None):
    """MatMulInteger(a, b, az, bz) -> Cast -> Mul by the run-time sa times sb (-> Add bias)."""
    nodes = [helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["sa", "sb"], ["s"]),
             helper.make_node("Mul", ["accf", "s"], ["y" if bias is None else "ys"])]
    if bias is not None:
        nodes.append(helper.make_node("Add", ["ys", "bias"], ["y"]))
        consts = {**consts, "bias": bias}
    g = helper.make_graph(
        nodes, "dequantized",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, a_shape),
         helper.make_tensor_value_info("sa", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k_) for k_, v in consts.items()])
    return kiln_cli.write_model(WORK, name, g, [("", 13)], ir_version=7)


for m, k, n in [(13, 67, 33), (1, 1280, 1000), (4, 131, 50), (13, 1024, 8200), (21, 128, 40)]:
    a = edge_bytes((m, k), np.uint8)
    b = edge_bytes((k, n), np.int8)
    az, bz = np.array(131, np.uint8), np.array(0, np.int8)
    acc = (a.astype(np.int64) - 131) @ b.astype(np.int64)
    for per_column, with_bias in ((True, False), (False, True)):
        sb = ((RNG.random(n).astype(np.float32) + 0.5) * np.float32(0.01) if per_column
              else np.array(np.float32(0.0123)))
        sa = np.array(np.float32(0.0371))
        bias = RNG.standard_normal(n).astype(np.float32)
        name = f"dequantized_{m}x{k}x{n}_{'columns' if per_column else 'one'}" + \
            ("_bias" if with_bias else "")
        path = dequantized_model(name, a.shape, {"b": b, "az": az, "bz": bz, "sb": sb},
                                 bias if with_bias else None)
        want = acc.astype(np.int32).astype(np.float32) * (sa * sb)
        if with_bias:
            want = want + bias
        both(name, path, {"a": a, "sa": sa}, want.astype(np.float32))
        src = subprocess.run([KILN, "source", "--graph", path], capture_output=True,
                             text=True).stdout
        if "scaled=1" not in src:
            failures.append(f"{name}: the dequantization is not in the qmatmul's store")
        if with_bias and 'with_epilogue{base="qmatmul"' not in src:
            failures.append(f"{name}: the Add after the dequantization is no epilogue")

# A float32 result larger than the caches (a language model's logits): the AMX kernel streams
# whole aligned lines past the caches, masked stores elsewhere (rows of 70001 floats are not
# line-aligned, the last panel partial). 48 rows: the parts take column panels.
a = edge_bytes((48, 128), np.uint8)
b = edge_bytes((128, 70001), np.int8)
acc = (a.astype(np.int64) - 131) @ b.astype(np.int64)
sa = np.array(np.float32(0.0371))
sb = (RNG.random(70001).astype(np.float32) + 0.5) * np.float32(0.01)
path = dequantized_model("dequantized_logits", a.shape,
                         {"b": b, "az": np.array(131, np.uint8), "bz": np.array(0, np.int8),
                          "sb": sb})
want = (acc.astype(np.int32).astype(np.float32) * (sa * sb)).astype(np.float32)
check("dequantized_logits", path, {"a": a, "sa": sa}, want)
if VNNI_AND_VBMI:
    check("dequantized_logits", path, {"a": a, "sa": sa}, want, {"KILN_QGEMM": "vbmi"})

# ---- convolutions -----------------------------------------------------------------------
def conv_ref(x, w, xz, wz, stride, pad, group, dil=1):
    n_img, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.full((n_img, c, h + 2 * pad, wd + 2 * pad), int(xz), np.int64)
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    oh = (h + 2 * pad - dil * (kh - 1) - 1) // stride + 1
    ow = (wd + 2 * pad - dil * (kw - 1) - 1) // stride + 1
    y = np.zeros((n_img, m, oh, ow), np.int64)
    mg = m // group
    for o in range(m):
        g = o // mg
        wv = w[o].astype(np.int64) - int(np.broadcast_to(wz, (m,))[o])
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + dil * (kh - 1) + 1:dil,
                           j * stride:j * stride + dil * (kw - 1) + 1:dil] - int(xz)
                y[:, o, i, j] = (patch * wv).sum(axis=(1, 2, 3))
    return y


for (n_img, c, h, wd, m, kh, stride, pad, group) in [
        (1, 3, 7, 7, 17, 3, 1, 1, 1), (2, 8, 9, 6, 33, 3, 2, 1, 1), (1, 4, 5, 5, 5, 1, 1, 0, 1),
        (1, 6, 8, 8, 6, 3, 1, 1, 3), (1, 16, 6, 6, 32, 3, 1, 0, 2),
        (1, 16, 30, 30, 32, 3, 1, 1, 1),  # large enough to split among parts
        (1, 8, 9, 9, 8, 3, 1, 1, 8), (1, 5, 10, 7, 5, 3, 2, 1, 5), (2, 4, 9, 9, 4, 5, 1, 2, 4),
        (1, 2, 3, 4100, 2, 3, 1, 1, 2)]:  # depthwise, too wide for the banded loops
    for xdt, wdt in [(np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)]:
        x = edge_bytes((n_img, c, h, wd), xdt)
        w = edge_bytes((m, c // group, kh, kh), wdt)
        xz = np.array(np.iinfo(xdt).max if xdt == np.uint8 else -3, xdt)
        wz = RNG.integers(np.iinfo(wdt).min, np.iinfo(wdt).max + 1, size=m).astype(wdt)
        ref = conv_ref(x, w, xz, wz, stride, pad, group)
        attrs = dict(kernel_shape=[kh, kh], strides=[stride, stride], pads=[pad] * 4, group=group)
        tag = f"{n_img}x{c}x{h}x{wd}_m{m}_k{kh}_s{stride}_g{group}_{np.dtype(xdt).name}_{np.dtype(wdt).name}"
        for const_w in (True, False):
            name = f"convinteger_{tag}_{'const' if const_w else 'input'}"
            node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
            ins = {"x": x} if const_w else {"x": x, "w": w}
            consts = {"xz": xz, "wz": wz, **({"w": w} if const_w else {})}
            path = model(node, ins, consts, [("y", TensorProto.INT32)], name)
            both(name, path, ins, ref.astype(np.int32))
        bias = RNG.integers(-5000, 5000, size=m).astype(np.int32)
        sx, sy = np.float32(0.03), np.float32(0.2)
        sw = (RNG.random(m).astype(np.float32) + 0.5) * np.float32(0.02)
        ydt = np.uint8 if m % 2 else np.int8
        yz_v = 128 if ydt == np.uint8 else -1
        acc = ref + bias.reshape(1, m, 1, 1)
        want = requant(acc, ((sx * sw) / sy).reshape(1, m, 1, 1), yz_v, ydt)
        name = f"qlinearconv_{tag}"
        node = helper.make_node("QLinearConv", ["x", "sx", "xz", "w", "sw", "wz", "sy", "yz", "bias"],
                                ["y"], **attrs)
        consts = {"sx": np.array(sx), "xz": xz, "w": w, "sw": sw, "wz": wz, "sy": np.array(sy),
                  "yz": np.array(yz_v, ydt), "bias": bias}
        path = model(node, {"x": x}, consts, [("y", onnx_type(np.array(0, ydt)))], name)
        both(name, path, {"x": x}, want)

# Dilated windows, grouped and not: each tap is its own run of the padded image (the in-place
# window segments' offsets step by the dilation; 4 or 8 channels a group, so VNNI reads them in
# place).
for (c, m, group, stride) in [(8, 6, 2, 1), (8, 16, 1, 2)]:
    x = edge_bytes((1, c, 11, 10), np.uint8)
    w = edge_bytes((m, c // group, 3, 3), np.int8)
    xz, wz = np.array(17, np.uint8), RNG.integers(-3, 4, size=m).astype(np.int8)
    ref = conv_ref(x, w, xz, wz, stride, 2, group, dil=2)
    bias = RNG.integers(-5000, 5000, size=m).astype(np.int32)
    sx, sy = np.float32(0.03), np.float32(0.2)
    sw = (RNG.random(m).astype(np.float32) + 0.5) * np.float32(0.02)
    want = requant(ref + bias.reshape(1, m, 1, 1), ((sx * sw) / sy).reshape(1, m, 1, 1), 3,
                   np.uint8)
    name = f"qlinearconv_dilated_c{c}_m{m}_g{group}_s{stride}"
    node = helper.make_node("QLinearConv", ["x", "sx", "xz", "w", "sw", "wz", "sy", "yz", "bias"],
                            ["y"], kernel_shape=[3, 3], strides=[stride, stride], pads=[2] * 4,
                            dilations=[2, 2], group=group)
    consts = {"sx": np.array(sx), "xz": xz, "w": w, "sw": sw, "wz": wz, "sy": np.array(sy),
              "yz": np.array(3, np.uint8), "bias": bias}
    path = model(node, {"x": x}, consts, [("y", TensorProto.UINT8)], name)
    both(name, path, {"x": x}, want)

# ---- quantize / dequantize ----------------------------------------------------------------
x = np.array([0, 0.5, 1.5, 2.5, -0.5, -1.5, 1e9, -1e9, 254.4, -129.5, 3.0000002, -0.0],
             np.float32).reshape(3, 4)
for ydt, zp in [(np.uint8, 0), (np.uint8, 127), (np.uint8, 255), (np.int8, -128), (np.int8, 0)]:
    scale = np.float32(1.0)
    info = np.iinfo(ydt)
    want = np.clip(np.rint(x / scale) + zp, info.min, info.max).astype(ydt)
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    name = f"quantize_{np.dtype(ydt).name}_{zp}"
    path = model(node, {"x": x}, {"s": np.array(scale), "z": np.array(zp, ydt)},
                 [("y", onnx_type(np.array(0, ydt)))], name)
    check(name, path, {"x": x}, want)
# Per axis, an odd channel count.
x = RNG.normal(0, 40, size=(2, 5, 3)).astype(np.float32)
s = np.array([0.3, 1.7, 0.1, 3.0, 0.7], np.float32)
z = np.array([0, 10, 128, 255, 3], np.uint8)
want = np.clip(np.rint(x / s.reshape(1, 5, 1)) + z.reshape(1, 5, 1), 0, 255).astype(np.uint8)
node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
check("quantize_axis", model(node, {"x": x}, {"s": s, "z": z}, [("y", TensorProto.UINT8)],
                             "quantize_axis"), {"x": x}, want)
def near_ties(s, n):
    """Floats whose quotient by s lies on or a few ulps either side of k + 0.5 (k in [-n, n)),
    where a quotient one ulp off rounds to the other integer; and the specials."""
    t = ((np.arange(-n, n, dtype=np.float32) + np.float32(0.5)) * s).astype(np.float32)
    out = [t]
    for steps in (1, 2, 3):
        out += [np.nextafter(t, np.float32(np.inf)), np.nextafter(t, np.float32(-np.inf))]
        t_up, t_dn = out[-2], out[-1]
        for _ in range(steps - 1):
            t_up = np.nextafter(t_up, np.float32(np.inf))
            t_dn = np.nextafter(t_dn, np.float32(-np.inf))
        out += [t_up, t_dn]
    specials = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 1e-30, 3.4e38, -3.4e38,
                         1.17549435e-38], np.float32)
    return np.concatenate(out + [specials]).astype(np.float32)


# A constant scale divides through its reciprocal and one fused correction (simplify's
# div_rcp): the same integers as the division wherever the quotient is normal, and where it
# is not (subnormal, infinite, an overflowing product) the same after rounding and
# saturation. Quotients a few ulps from every tie, per tensor and per axis, a scale whose
# reciprocal rounds up (1 - 2^-24) and ones that are not powers of two.
for tag, scales in (("0.1", [0.1]), ("one_less_ulp", [1 - 2.0 ** -24]), ("3", [3.0]),
                    ("axis", [0.1, 1 - 2.0 ** -24, 0.0173, 37.7, 1.1 * 2.0 ** -10])):
    sc = np.array(scales, np.float32)
    cols = [near_ties(v, 260) for v in sc]
    width = max(len(c_) for c_ in cols)
    x = np.stack([np.resize(c_, width) for c_ in cols]).reshape(1, len(sc), width)
    for ydt, zp in ((np.uint8, 128), (np.int8, 0)):
        info = np.iinfo(ydt)
        want = np.clip(np.rint(x / sc.reshape(1, -1, 1)) + np.float32(zp), info.min,
                       info.max).astype(ydt)
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1)
        name = f"quantize_reciprocal_{tag}_{np.dtype(ydt).name}"
        svals = sc if len(sc) > 1 else np.array(sc[0])
        zvals = np.full(len(sc), zp, ydt) if len(sc) > 1 else np.array(zp, ydt)
        path = model(node, {"x": x}, {"s": svals, "z": zvals},
                     [("y", onnx_type(np.array(0, ydt)))], name)
        check(name, path, {"x": x}, want)
        src = subprocess.run([KILN, "source", path], capture_output=True, text=True).stdout
        if "kiln_div_rcpf" not in src:
            failures.append(f"{name}: the division by the constant scale is not div_rcp")

q = RNG.integers(-128, 128, size=(2, 5, 3)).astype(np.int8)
zq = np.array([0, -128, 127, 5, -1], np.int8)
want = ((q.astype(np.float32) - zq.reshape(1, 5, 1).astype(np.float32)) * s.reshape(1, 5, 1))
node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
path = model(node, {"x": q}, {"s": s, "z": zq}, [("y", TensorProto.FLOAT)], "dequantize_axis")
check("dequantize_axis", path, {"x": q}, want.astype(np.float32))

# ---- onnxruntime's QOperator contrib ops (com.microsoft) --------------------------------------
def dq(q, s, z):
    return (q.astype(np.float32) - np.float32(z)) * np.float32(s)


def q8(y, s, z, dt):
    info = np.iinfo(dt)
    return np.clip(np.rint(y.astype(np.float32) / np.float32(s)) + np.float32(z),
                   info.min, info.max).astype(dt)


A = edge_bytes((2, 5, 4, 3), np.uint8)
B = edge_bytes((2, 5, 4, 3), np.uint8)
P = {"as": np.array(np.float32(0.02)), "az": np.array(120, np.uint8),
     "bs": np.array(np.float32(0.05)), "bz": np.array(3, np.uint8),
     "cs": np.array(np.float32(0.03)), "cz": np.array(128, np.uint8)}
for op, f in (("QLinearAdd", np.add), ("QLinearMul", np.multiply)):
    node = helper.make_node(op, ["a", "as", "az", "b", "bs", "bz", "cs", "cz"], ["y"],
                            domain="com.microsoft")
    want = q8(f(dq(A, 0.02, 120), dq(B, 0.05, 3)), 0.03, 128, np.uint8)
    path = model(node, {"a": A, "b": B}, {k: v for k, v in P.items()}, [("y", TensorProto.UINT8)],
                 op.lower())
    check(op, path, {"a": A, "b": B}, want)
node = helper.make_node("QLinearSigmoid", ["a", "as", "az", "cs", "cz"], ["y"],
                        domain="com.microsoft")
sig = 1 / (1 + np.exp(-dq(A, 0.02, 120).astype(np.float64)))
want = q8(sig.astype(np.float32), np.float32(1 / 256), 0, np.uint8)
consts = {"as": P["as"], "az": P["az"], "cs": np.array(np.float32(1 / 256)),
          "cz": np.array(0, np.uint8)}
path = model(node, {"a": A}, consts, [("y", TensorProto.UINT8)], "qlinearsigmoid")
r, out = run(path, {"a": A})
got = np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None
# kiln's float32 sigmoid against float64: one step where a value sits on a rounding edge.
if got is None or np.max(np.abs(got.astype(int) - want.astype(int))) > 1:
    failures.append("QLinearSigmoid: " + (r.stderr[-300:] if got is None else
                                          f"off by {np.max(np.abs(got.astype(int) - want.astype(int)))}"))
node = helper.make_node("QLinearGlobalAveragePool", ["a", "as", "az", "cs", "cz"], ["y"],
                        domain="com.microsoft")
want = q8(dq(A, 0.02, 120).mean(axis=(2, 3), keepdims=True), 0.03, 128, np.uint8)
consts = {"as": P["as"], "az": P["az"], "cs": P["cs"], "cz": P["cz"]}
path = model(node, {"a": A}, consts, [("y", TensorProto.UINT8)], "qlinearglobalaveragepool")
r, out = run(path, {"a": A})
got = np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None
if got is None or got.shape != want.shape or np.max(np.abs(got.astype(int) - want.astype(int))) > 1:
    failures.append("QLinearGlobalAveragePool: " + (r.stderr[-300:] if got is None else
                                                    f"got {got.ravel()[:6]} want {want.ravel()[:6]}"))


def near(label, path, inputs, want):
    """Within one quantization step: kiln's float32 op against NumPy's may round a value that
    sits on a step's edge the other way."""
    r, out = run(path, inputs)
    got = np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None
    if got is None or got.shape != want.shape or \
            np.max(np.abs(got.astype(int) - want.astype(int))) > 1:
        failures.append(f"{label}: " + (r.stderr[-300:] if got is None else
                                        f"got {got.ravel()[:6]} want {want.ravel()[:6]}"))


node = helper.make_node("QLinearLeakyRelu", ["a", "as", "az", "cs", "cz"], ["y"],
                        domain="com.microsoft", alpha=0.1)
xf = dq(A, 0.02, 120)
want = q8(np.where(xf < 0, xf * np.float32(0.1), xf), 0.03, 128, np.uint8)
near("QLinearLeakyRelu", model(node, {"a": A}, consts, [("y", TensorProto.UINT8)],
                               "qlinearleakyrelu"), {"a": A}, want)
node = helper.make_node("QLinearConcat", ["cs", "cz", "a", "as", "az", "b", "bs", "bz"], ["y"],
                        domain="com.microsoft", axis=-3)
want = q8(np.concatenate([dq(A, 0.02, 120), dq(B, 0.05, 3)], axis=1), 0.03, 128, np.uint8)
near("QLinearConcat", model(node, {"a": A, "b": B}, dict(P), [("y", TensorProto.UINT8)],
                            "qlinearconcat"), {"a": A, "b": B}, want)
# 3x3 windows at stride 2 with one pixel of padding that does not count.
X8 = edge_bytes((1, 3, 7, 6), np.uint8)
xf = dq(X8, 0.02, 120)
oh, ow = 4, 3
pooled = np.zeros((1, 3, oh, ow), np.float32)
for i in range(oh):
    for j in range(ow):
        win = xf[:, :, max(0, 2 * i - 1):2 * i + 2, max(0, 2 * j - 1):2 * j + 2]
        pooled[:, :, i, j] = win.mean(axis=(2, 3))
want = q8(pooled, 0.03, 128, np.uint8)
node = helper.make_node("QLinearAveragePool", ["a", "as", "az", "cs", "cz"], ["y"],
                        domain="com.microsoft", kernel_shape=[3, 3], strides=[2, 2],
                        pads=[1, 1, 1, 1], count_include_pad=0)
near("QLinearAveragePool", model(node, {"a": X8}, consts, [("y", TensorProto.UINT8)],
                                 "qlinearaveragepool"), {"a": X8}, want)

# QGemm: weights (N, K) read transposed, an int32 bias, per-column B scales; requantized, and
# float32 when Y's scale is absent.
X = edge_bytes((7, 37), np.uint8)
W = edge_bytes((19, 37), np.int8)
bias = RNG.integers(-3000, 3000, size=19).astype(np.int32)
sb = (RNG.random(19).astype(np.float32) + 0.5) * np.float32(0.01)
wz = RNG.integers(-5, 6, size=19).astype(np.int8)
acc = (X.astype(np.int64) - 7) @ (W.astype(np.int64) - wz.astype(np.int64)[:, None]).T + bias
for with_y in (True, False):
    ins = ["a", "as", "az", "w", "ws", "wz", "c"] + (["ys", "yz"] if with_y else [])
    node = helper.make_node("QGemm", ins, ["y"], domain="com.microsoft", transB=1)
    consts = {"as": np.array(np.float32(0.02)), "az": np.array(7, np.uint8), "w": W, "ws": sb,
              "wz": wz, "c": bias}
    if with_y:
        consts.update(ys=np.array(np.float32(0.5)), yz=np.array(100, np.uint8))
        want = requant(acc, (np.float32(0.02) * sb) / np.float32(0.5), 100, np.uint8)
        outs = [("y", TensorProto.UINT8)]
    else:
        want = acc.astype(np.float32) * (np.float32(0.02) * sb)
        outs = [("y", TensorProto.FLOAT)]
    path = model(node, {"a": X}, consts, outs, f"qgemm_{'bytes' if with_y else 'float'}")
    r, out = run(path, {"a": X})
    got = np.load(os.path.join(out, "y.npy")) if r.returncode == 0 else None
    ok = got is not None and got.shape == want.shape and (
        np.array_equal(got, want) if with_y else np.allclose(got, want, rtol=1e-6))
    if not ok:
        failures.append(f"QGemm ({'bytes' if with_y else 'float'}): " +
                        (r.stderr[-300:] if got is None else f"got {got.ravel()[:4]} want {want.ravel()[:4]}"))

# ---- activations of one byte tensor: a table of 256 values (FusedElementwise::table_code) ----
# DequantizeLinear -> x * sigmoid(x) -> QuantizeLinear (a quantized swish), on every byte value
# in a tensor longer than the 64-byte vectors with a tail, as bytes (kiln_support.lut_bytes)
# and dequantized to float32 (the table's generic loop): within a step of NumPy, and the same
# bits as the chain computed per element (fusion off, so no table).
for xdt in (np.uint8, np.int8):
    info = np.iinfo(xdt)
    x = np.concatenate([np.arange(info.min, info.max + 1), RNG.integers(info.min, info.max + 1, 44)])
    x = x.astype(xdt).reshape(3, 100)
    xs, xz, ys = np.float32(0.05), np.array(3 if xdt == np.uint8 else -5, xdt), np.float32(0.04)
    yz = np.array(20 if xdt == np.uint8 else -100, xdt)
    for out_float in (False, True):
        nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
                 helper.make_node("Sigmoid", ["f"], ["s"]),
                 helper.make_node("Mul", ["f", "s"], ["m"]),
                 helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["q" if out_float else "y"])]
        if out_float:
            nodes.append(helper.make_node("DequantizeLinear", ["q", "ys", "yz"], ["y"]))
        consts = {"xs": np.array(xs), "xz": xz, "ys": np.array(ys), "yz": yz}
        name = f"swish_table_{np.dtype(xdt).name}_{'float' if out_float else 'bytes'}"
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", onnx_type(x), x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT if out_float
                                                             else onnx_type(yz), None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
        path = kiln_cli.write_model(WORK, name, g, [("", 13)], ir_version=7)
        f = dq(x, xs, xz)
        want = q8(f * (1 / (1 + np.exp(-f.astype(np.float64)))).astype(np.float32), ys, yz, xdt)
        if out_float:
            want = dq(want, ys, yz)
        src = subprocess.run([KILN, "source", path], capture_output=True, text=True).stdout
        if "kiln_lut[256]" not in src:
            failures.append(f"{name}: the chain is not a table in the module's source")
        got = outputs_under(name, path, {"x": x}, ({}, {"KILN_PASSES": "-fusion"}))
        if len(got) != 2:
            continue
        (table,), (per_element,) = got["{}"], got[str({"KILN_PASSES": "-fusion"})]
        step = float(ys) if out_float else 1
        if table.shape != want.shape or np.max(np.abs(table.astype(np.float64) - want)) > step * 1.0001:
            failures.append(f"{name}: the table is more than a step from NumPy")
        if not np.array_equal(table, per_element):
            bad = np.argwhere(table != per_element)
            failures.append(f"{name}: the table differs from the per-element chain at {bad[:4]}")

# ---- a quantized squeeze-excitation block: the dequantized map stays bytes --------------------
# DequantizeLinear's float32 map is read by a global pool, by the gate's Mul and by a swish
# that is pooled too (EfficientNet's blocks, as quantize_static writes them). The map is
# stored as its bytes: each reader repeats the dequantization (rewrite/fuse_elementwise.cpp),
# and the pooled swish of one byte tensor runs as a 256-entry table inside the reduction
# (FusedReduce::c_code). Against NumPy, and bit for bit against fusion off.
x = edge_bytes((2, 37, 9, 9), np.uint8)
xs, xz, ys, yz = np.float32(0.06), np.array(9, np.uint8), np.float32(0.05), np.array(4, np.uint8)
nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
         helper.make_node("GlobalAveragePool", ["f"], ["p"]),
         helper.make_node("Sigmoid", ["p"], ["g"]),
         helper.make_node("Mul", ["f", "g"], ["m"]),
         helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"]),
         helper.make_node("Sigmoid", ["f"], ["s"]),
         helper.make_node("Mul", ["f", "s"], ["w"]),
         helper.make_node("GlobalAveragePool", ["w"], ["z"])]
consts = {"xs": np.array(xs), "xz": xz, "ys": np.array(ys), "yz": yz}
g = helper.make_graph(nodes, "se_block", [helper.make_tensor_value_info("x", onnx_type(x), x.shape)],
                      [helper.make_tensor_value_info("y", TensorProto.UINT8, None),
                       helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                      [numpy_helper.from_array(v, k) for k, v in consts.items()])
path = kiln_cli.write_model(WORK, "se_block", g, [("", 13)], ir_version=7)
f = dq(x, xs, xz).astype(np.float64)
sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
want_y = q8((f * sig(f.mean((2, 3), keepdims=True))).astype(np.float32), ys, yz, np.uint8)
want_z = (f * sig(f)).mean((2, 3), keepdims=True)
src = subprocess.run([KILN, "source", path], capture_output=True, text=True).stdout
if "float32 (2, 37, 9, 9)" in src:
    failures.append("se_block: the dequantized map is stored as float32")
if "kiln_lut[256]" not in src:
    failures.append("se_block: the pooled swish of one byte tensor is not a table")
got = outputs_under("se_block", path, {"x": x}, ({}, {"KILN_PASSES": "-fusion"}), ("y", "z"))
if len(got) == 2:
    (y, z), (y_off, z_off) = got["{}"], got[str({"KILN_PASSES": "-fusion"})]
    if y.shape != want_y.shape or np.max(np.abs(y.astype(np.int32) - want_y)) > 1:
        failures.append("se_block: the gated map is more than a step from NumPy")
    if z.shape != want_z.shape or not np.allclose(z, want_z, rtol=1e-5, atol=1e-6):
        failures.append(f"se_block: the pooled swish differs from NumPy by {np.max(np.abs(z - want_z))}")
    if not np.array_equal(y, y_off):
        failures.append("se_block: the gated map differs from the unfused one")

# ---- chains of convolutions: the channels-last layout (rewrite/cpu/layout_nhwc_int8.cpp) ------
# Two or more QLinearConvs in a row run channels-last: a 3x3, a depthwise (3x3 or 5x5, stride
# 1 or 2, on the vector loops of qdepthwise_nhwc: channel counts past a 64-channel block and
# between blocks), a grouped 1x1 and a 1x1 read in place, a residual QLinearAdd. Each stage against NumPy with
# the same float32 requantization, then the whole chain bit for bit, with the pass on and off.
def stage(x, xz, sx, w, wz, sw, bias, sy, yz, ydt, stride, pad, group):
    acc = conv_ref(x, w, xz, wz, stride, pad, group) + bias.reshape(1, -1, 1, 1)
    return requant(acc, ((sx * sw) / sy).reshape(1, -1, 1, 1), int(yz), ydt)


def chain_case(tag, xdt, c, h, wd, m, dw_k, dw_stride, dw_zp=False, residual_only=False):
    x = edge_bytes((2, c, h, wd), xdt)
    xz = np.array(np.iinfo(xdt).max - 20 if xdt == np.uint8 else -3, xdt)
    nodes, consts, cur, cur_z, cur_s = [], {}, x, xz, np.float32(0.03)
    names = {"x": "x"}
    specs = [("a", m, 3, 1, 1, 1), ("b", m, dw_k, dw_stride, dw_k // 2, m), ("c", 34, 1, 1, 0, 2),
             ("d", 34, 1, 1, 0, 1)]
    skip = None
    for i, (p, mo, k, st, pad, group) in enumerate(specs):
        ci = cur.shape[1]
        w = edge_bytes((mo, ci // group, k, k), np.int8)
        # Zero points of 0 on the depthwise one take its vpdpbusd loops (each weight less its
        # zero point an int8); dw_zp's take the int16 ones.
        zero = i % 2 and not (p == "b" and dw_zp)
        wz = np.zeros(mo, np.int8) if zero else RNG.integers(-4, 5, size=mo).astype(np.int8)
        sw = (RNG.random(mo).astype(np.float32) + 0.5) * np.float32(0.02)
        bias = RNG.integers(-3000, 3000, size=mo).astype(np.int32)
        sy = np.float32(0.1 + 0.05 * i)
        ydt = xdt
        yz = np.array(5 if ydt == np.uint8 else -2, ydt)
        y = stage(cur, cur_z, cur_s, w, wz, sw, bias, sy, yz, ydt, st, pad, group)
        ins = [names["x"], f"{p}_sx", f"{p}_xz", f"{p}_w", f"{p}_sw", f"{p}_wz", f"{p}_sy",
               f"{p}_yz", f"{p}_b"]
        nodes.append(helper.make_node("QLinearConv", ins, [p], kernel_shape=[k, k],
                                      strides=[st, st], pads=[pad] * 4, group=group))
        consts.update({f"{p}_sx": np.array(cur_s), f"{p}_xz": cur_z, f"{p}_w": w,
                       f"{p}_sw": sw, f"{p}_wz": wz, f"{p}_sy": np.array(sy), f"{p}_yz": yz,
                       f"{p}_b": bias})
        if p == "c":
            skip = (y, yz, sy)
        names["x"], cur, cur_z, cur_s = p, y, yz, sy
    # The residual: c + d, both 34 channels, requantized as QLinearAdd does (within a step:
    # kiln's float32 against NumPy's may round an edge value the other way).
    zdt = xdt
    zz = np.array(7 if zdt == np.uint8 else 0, zdt)
    want = q8(dq(skip[0], skip[2], skip[1]) + dq(cur, cur_s, cur_z), 0.2, zz, zdt)
    nodes.append(helper.make_node("QLinearAdd", ["c", "c_sy", "c_yz", "d", "d_sy", "d_yz",
                                                 "z_s", "z_z"], ["y"], domain="com.microsoft"))
    consts.update({"z_s": np.array(np.float32(0.2)), "z_z": zz})
    g = helper.make_graph(nodes, "chain_" + tag,
                          [helper.make_tensor_value_info("x", onnx_type(x), x.shape)],
                          [helper.make_tensor_value_info("y", onnx_type(zz), None)] +
                          ([] if residual_only else
                           [helper.make_tensor_value_info("d", onnx_type(zz), None)]),
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    path = kiln_cli.write_model(WORK, "chain_" + tag, g, [("", 13), ("com.microsoft", 1)],
                                ir_version=7)
    src = subprocess.run([KILN, "source", "--graph", path], capture_output=True, text=True)
    if src.stdout.count("nhwc=1") != 4:
        failures.append(f"chain {tag}: want its 4 convolutions channels-last, the graph has "
                        f"{src.stdout.count('nhwc=1')}: {src.stderr.strip()[-300:]}")
    # The residual add read only by its sum runs in the last convolution's thunk, on each
    # part's positions as they are done (QConv::c_split_unit); bit for bit the add alone.
    if residual_only and 'with_epilogue{base="qconv"' not in src.stdout:
        failures.append(f"chain {tag}: the residual add is not the 4th convolution's epilogue")
    envs = [{}, {"KILN_PASSES": "-nhwc"}, {"KILN_QGEMM": "c"}, {"KILN_QGEMM": "avx2"}]
    ys = {}
    for env in envs + ([{"KILN_PASSES": "-epilogue"}] if residual_only else []):
        if env.get("KILN_QGEMM") == "avx2" and "avx2" not in FLAGS:
            continue
        r, out = run(path, {"x": x}, env)
        label = f"chain {tag} {env}"
        if r.returncode != 0:
            failures.append(f"{label}: kiln failed: {r.stderr.strip()[-400:]}")
            continue
        y = ys[str(env)] = np.load(os.path.join(out, "y.npy"))
        if y.shape != want.shape or np.max(np.abs(y.astype(int) - want.astype(int))) > 1:
            failures.append(f"{label}: the residual add is off by more than a step")
        if residual_only:
            continue
        d = np.load(os.path.join(out, "d.npy"))
        if d.dtype != cur.dtype or not np.array_equal(d, cur):
            bad = np.argwhere(d != cur) if d.shape == cur.shape else d.shape
            failures.append(f"{label}: the 4th convolution differs from NumPy at {bad[:5]}")
    fused, alone = ys.get("{}"), ys.get(str({"KILN_PASSES": "-epilogue"}))
    if residual_only and fused is not None and alone is not None and not np.array_equal(fused, alone):
        failures.append(f"chain {tag}: the fused residual add differs from the add alone at "
                        f"{np.argwhere(fused != alone)[:5]}")


chain_case("u8_70ch_dw3s2", np.uint8, 3, 9, 7, 70, 3, 2)
chain_case("s8_100ch_dw5s1", np.int8, 5, 8, 11, 100, 5, 1)
chain_case("u8_128ch_dw3s1", np.uint8, 16, 13, 6, 128, 3, 1)
chain_case("u8_40ch_dw3s1_zp", np.uint8, 4, 6, 9, 40, 3, 1, dw_zp=True)
chain_case("s8_18ch_dw5s2", np.int8, 3, 12, 10, 18, 5, 2)
chain_case("u8_70ch_dw3s2_residual", np.uint8, 3, 9, 7, 70, 3, 2, residual_only=True)
chain_case("s8_100ch_dw5s1_residual", np.int8, 5, 13, 11, 100, 5, 1, residual_only=True)

# ---- unpadded convolutions read their channels-last input in place --------------------------
# After a first convolution (so both run channels-last), an unpadded 1x1 stride-2 (a ResNet
# downsample) and an unpadded 3x3 stride-2 read their windows from the uint8 image itself,
# not from a padded copy (kiln_qconv's windows_in_place); odd sizes leave a last row and
# column unread. Against NumPy, and bit for bit with the pass off.
for k2, tag in [(1, "1x1s2"), (3, "3x3s2")]:
    x = edge_bytes((2, 8, 11, 9), np.uint8)
    xz, sx = np.array(5, np.uint8), np.float32(0.03)
    nodes, consts, cur, cur_z, cur_s = [], {}, x, xz, sx
    for i, (p, mo, k, st, pad) in enumerate([("a", 16, 3, 1, 1), ("b", 24, k2, 2, 0)]):
        w = edge_bytes((mo, cur.shape[1], k, k), np.int8)
        wz = np.zeros(mo, np.int8)
        sw = (RNG.random(mo).astype(np.float32) + 0.5) * np.float32(0.02)
        bias = RNG.integers(-3000, 3000, size=mo).astype(np.int32)
        sy, yz = np.float32(0.1 + 0.05 * i), np.array(3 + i, np.uint8)
        y = stage(cur, cur_z, cur_s, w, wz, sw, bias, sy, yz, np.uint8, st, pad, 1)
        nodes.append(helper.make_node(
            "QLinearConv", ["x" if i == 0 else "a", f"{p}_sx", f"{p}_xz", f"{p}_w", f"{p}_sw",
                            f"{p}_wz", f"{p}_sy", f"{p}_yz", f"{p}_b"], ["a" if i == 0 else "y"],
            kernel_shape=[k, k], strides=[st, st], pads=[pad] * 4))
        consts.update({f"{p}_sx": np.array(cur_s), f"{p}_xz": cur_z, f"{p}_w": w, f"{p}_sw": sw,
                       f"{p}_wz": wz, f"{p}_sy": np.array(sy), f"{p}_yz": yz, f"{p}_b": bias})
        cur, cur_z, cur_s = y, yz, sy
    g = helper.make_graph(nodes, "unpadded_" + tag,
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(v, kk) for kk, v in consts.items()])
    path = kiln_cli.write_model(WORK, "unpadded_" + tag, g, [("", 13)], ir_version=7)
    for env, (y,) in outputs_under(f"unpadded {tag}", path, {"x": x},
                                   ({}, {"KILN_PASSES": "-nhwc"})).items():
        if not np.array_equal(y, cur):
            failures.append(f"unpadded {tag} {env}: differs from NumPy at "
                            f"{np.argwhere(y != cur)[:4]}")

# ---- a quantized swish after a convolution: its byte table as the convolution's epilogue ----
# Two QLinearConvs (channels-last), the second's bytes -> DequantizeLinear -> x * sigmoid(x) ->
# QuantizeLinear (EfficientNet's expansion and depthwise layers). The DequantizeLinear read by
# both the Sigmoid and the Mul is left dead by elementwise fusion: the swish must still become
# the convolution's epilogue (uses are counted on live nodes), and run there as a 256-entry
# table the convolution applies to each chunk it makes (kiln_qparams.table): with 3 and 70
# output channels (bytes past the 64-byte vectors, and a tail) and after a depthwise
# convolution (split by rows, not positions). Against NumPy within a step, and bit for bit the
# swish as a node of its own (epilogue fusion off).
for m2, group2 in ((3, 1), (70, 1), (16, 16)):
    x = edge_bytes((2, 8, 24, 23), np.uint8)  # several 96-position chunks, split in parts
    xz, sx = np.array(9, np.uint8), np.float32(0.03)
    nodes, consts, cur, cur_z, cur_s = [], {}, x, xz, sx
    for i, (p, mo, group) in enumerate([("a", 16, 1), ("b", m2, group2)]):
        w = edge_bytes((mo, cur.shape[1] // group, 3, 3), np.int8)
        wz = np.zeros(mo, np.int8)
        sw = (RNG.random(mo).astype(np.float32) + 0.5) * np.float32(0.02)
        bias = RNG.integers(-3000, 3000, size=mo).astype(np.int32)
        sy, yz = np.float32(0.1 + 0.05 * i), np.array(3 + 90 * i, np.uint8)
        y = stage(cur, cur_z, cur_s, w, wz, sw, bias, sy, yz, np.uint8, 1, 1, group)
        nodes.append(helper.make_node(
            "QLinearConv", ["x" if i == 0 else "a", f"{p}_sx", f"{p}_xz", f"{p}_w", f"{p}_sw",
                            f"{p}_wz", f"{p}_sy", f"{p}_yz", f"{p}_b"], [p],
            kernel_shape=[3, 3], pads=[1] * 4, group=group))
        consts.update({f"{p}_sx": np.array(cur_s), f"{p}_xz": cur_z, f"{p}_w": w, f"{p}_sw": sw,
                       f"{p}_wz": wz, f"{p}_sy": np.array(sy), f"{p}_yz": yz, f"{p}_b": bias})
        cur, cur_z, cur_s = y, yz, sy
    ys, yz = np.float32(0.04), np.array(17, np.uint8)
    nodes += [helper.make_node("DequantizeLinear", ["b", "b_sy", "b_yz"], ["f"]),
              helper.make_node("Sigmoid", ["f"], ["s"]),
              helper.make_node("Mul", ["f", "s"], ["m"]),
              helper.make_node("QuantizeLinear", ["m", "ys", "yz"], ["y"])]
    consts.update({"ys": np.array(ys), "yz": yz})
    name = f"conv_swish_table_{m2}ch_group{group2}"
    g = helper.make_graph(nodes, name,
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(v, kk) for kk, v in consts.items()])
    path = kiln_cli.write_model(WORK, name, g, [("", 13)], ir_version=7)
    f = dq(cur, cur_s, cur_z)
    want = q8(f * (1 / (1 + np.exp(-f.astype(np.float64)))).astype(np.float32), ys, yz, np.uint8)
    src = subprocess.run([KILN, "source", path], capture_output=True, text=True).stdout
    if 'with_epilogue{base="qconv"' not in src or "qp.table = (const uint8_t *)(kiln_lut)" not in src:
        failures.append(f"{name}: the swish is not the convolution's table epilogue")
    got = outputs_under(name, path, {"x": x}, ({}, {"KILN_PASSES": "-epilogue"}))
    if len(got) == 2:
        (fused,), (alone,) = got["{}"], got[str({"KILN_PASSES": "-epilogue"})]
        if fused.shape != want.shape or np.max(np.abs(fused.astype(int) - want.astype(int))) > 1:
            failures.append(f"{name}: the fused swish is more than a step from NumPy")
        if not np.array_equal(fused, alone):
            failures.append(f"{name}: the fused swish differs from the swish alone at "
                            f"{np.argwhere(fused != alone)[:4]}")

# ---- QDQ with a Relu: DequantizeLinear -> Gemm / Conv -> Relu -> QuantizeLinear ------------
# One integer product with the Relu as the epilogue's lower bound (Q(relu(v)) = max(Q(v), y_zp)
# bit for bit, rounding being monotone), y_zp away from the type's minimum so the bound acts.
# The Gemm stores rows of bytes; the two chained convolutions run channels-last, so the
# second (70 channels: a tile of 4 panels and one of 1) stores rows of bytes too.
def qdq_nodes(p, x, xs, xz, w, ws, wz, bias, ys, yz, op, attrs, nodes, consts):
    """p's DequantizeLinears, its op, a Relu and a QuantizeLinear to p + '_q'."""
    nodes += [helper.make_node("DequantizeLinear", [x, xs, xz], [p + "_dx"]),
              helper.make_node("DequantizeLinear", [p + "_w", p + "_ws", p + "_wz"], [p + "_dw"],
                               axis=0 if op == "Conv" else 1),
              helper.make_node("DequantizeLinear", [p + "_b", p + "_bs"], [p + "_db"], axis=0)]
    nodes.append(helper.make_node(op, [p + "_dx", p + "_dw", p + "_db"], [p + "_v"], **attrs))
    nodes += [helper.make_node("Relu", [p + "_v"], [p + "_r"]),
              helper.make_node("QuantizeLinear", [p + "_r", p + "_ys", p + "_yz"], [p + "_q"])]
    consts.update({p + "_w": w, p + "_ws": ws, p + "_wz": wz, p + "_b": bias,
                   p + "_bs": (np.float32(xs_val[x]) * ws).astype(np.float32),
                   p + "_ys": np.array(ys), p + "_yz": yz})


def qdq_ref(acc, bias, xs, ws, ys, yz, ydt, shape):
    want = requant(acc + bias.reshape(shape), ((xs * ws) / ys).reshape(shape), int(yz), ydt)
    return np.maximum(want, yz)


xs_val = {}
for ydt in (np.uint8, np.int8):
    tag = np.dtype(ydt).name
    yz = np.array(40 if ydt == np.uint8 else -30, ydt)
    # Gemm: (13, 67) x (67, 70), per-column scales, symmetric weights.
    x = edge_bytes((13, 67), np.uint8)
    xz, xs = np.array(131, np.uint8), np.float32(0.05)
    xs_val["x"] = xs
    w = edge_bytes((67, 70), np.int8)
    ws = (RNG.random(70).astype(np.float32) + 0.5) * np.float32(0.01)
    bias = RNG.integers(-4000, 4000, size=70).astype(np.int32)
    ys = np.float32(0.4)
    nodes, consts = [], {"xs": np.array(xs), "xz": xz}
    qdq_nodes("m", "x", "xs", "xz", w, ws, np.zeros(70, np.int8), bias, ys, yz, "Gemm", {},
              nodes, consts)
    acc = (x.astype(np.int64) - int(xz)) @ w.astype(np.int64)
    want = qdq_ref(acc, bias, xs, ws, ys, yz, ydt, (1, 70))
    g = helper.make_graph(nodes, "qdq_gemm_" + tag,
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_tensor_value_info("m_q", onnx_type(yz), None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    cases = [("qdq_gemm_relu_" + tag, g, x, want, "qmatmul", "m_q")]
    # Two convolutions: 3x3 (8 -> 24) then 1x1 (24 -> 70), each with its Relu.
    x = edge_bytes((1, 8, 7, 9), np.uint8)
    w1 = edge_bytes((24, 8, 3, 3), np.int8)
    ws1 = (RNG.random(24).astype(np.float32) + 0.5) * np.float32(0.01)
    b1 = RNG.integers(-4000, 4000, size=24).astype(np.int32)
    ys1, yz1 = np.float32(0.3), np.array(10 if ydt == np.uint8 else -50, ydt)
    w2 = edge_bytes((70, 24, 1, 1), np.int8)
    ws2 = (RNG.random(70).astype(np.float32) + 0.5) * np.float32(0.01)
    b2 = RNG.integers(-4000, 4000, size=70).astype(np.int32)
    xs_val["c1_q"] = ys1
    nodes, consts = [], {"xs": np.array(xs), "xz": xz}
    qdq_nodes("c1", "x", "xs", "xz", w1, ws1, np.zeros(24, np.int8), b1, ys1, yz1, "Conv",
              {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, nodes, consts)
    qdq_nodes("c2", "c1_q", "c1_ys", "c1_yz", w2, ws2, np.zeros(70, np.int8), b2, ys, yz, "Conv",
              {"kernel_shape": [1, 1]}, nodes, consts)
    y1 = qdq_ref(conv_ref(x, w1, xz, 0, 1, 1, 1), b1, xs, ws1, ys1, yz1, ydt, (1, 24, 1, 1))
    want = qdq_ref(conv_ref(y1, w2, yz1, 0, 1, 0, 1), b2, ys1, ws2, ys, yz, ydt, (1, 70, 1, 1))
    g = helper.make_graph(nodes, "qdq_conv_" + tag,
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_tensor_value_info("c2_q", onnx_type(yz), None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    cases.append(("qdq_conv_relu_" + tag, g, x, want, "nhwc=1", "c2_q"))
    for name, g, x, want, marker, out_name in cases:
        path = kiln_cli.write_model(WORK, name, g, [("", 13)], ir_version=7)
        src = subprocess.run([KILN, "source", "--graph", path], capture_output=True, text=True)
        if "relu=1" not in src.stdout or marker not in src.stdout:
            failures.append(f"{name}: want the Relu in an integer product ({marker}), the graph "
                            f"is: {src.stdout.strip()[-600:]} {src.stderr.strip()[-300:]}")
        for env in ({}, {"KILN_QGEMM": "c"}):
            r, out = run(path, {"x": x}, env)
            if r.returncode != 0:
                failures.append(f"{name} {env}: kiln failed: {r.stderr.strip()[-300:]}")
                continue
            got = np.load(os.path.join(out, out_name + ".npy"))
            if got.dtype != want.dtype or not np.array_equal(got, want):
                bad = np.argwhere(got != want) if got.shape == want.shape else got.shape
                failures.append(f"{name} {env}: differs from NumPy at {bad[:5]}")

# ---- max pools of bytes: QDQ's DequantizeLinear -> MaxPool -> QuantizeLinear, and QOperator's
# MaxPool on bytes -------------------------------------------------------------------------
# Between two integer convolutions (a quantized ResNet's stem) the pool takes the bytes as they
# are, channels-last (max_pool_nhwc); with `-nhwc` max_pool pools them channels-first. A
# QuantizeLinear of another scale is not the DequantizeLinear's inverse: that pool stays float,
# and so do the convolutions on either side (a region needs two).
def maxpool_ref(x, k, s, p, d=1, ceil=False):
    """Max over each window of x (N, C, H, W), padding never winning (ONNX's output sizes)."""
    def out(n):
        span = n + 2 * p - d * (k - 1) - 1
        o = (span + (s - 1 if ceil else 0)) // s + 1
        return o - 1 if ceil and (o - 1) * s >= n + p else o
    n_, c_, h, w = x.shape
    oh, ow = out(h), out(w)
    big = np.full((n_, c_, h + 2 * p + s * k + d * k, w + 2 * p + s * k + d * k),
                  np.iinfo(x.dtype).min, x.dtype)
    big[:, :, p:p + h, p:p + w] = x
    y = np.full((n_, c_, oh, ow), np.iinfo(x.dtype).min, x.dtype)
    for a in range(k):
        for b in range(k):
            tap = big[:, :, a * d:a * d + (oh - 1) * s + 1:s, b * d:b * d + (ow - 1) * s + 1:s]
            y = np.maximum(y, tap)
    return y


for ydt, (k, st, pad, dil, ceil), q_ratio in (
        (np.uint8, (3, 2, 1, 1, 0), 1), (np.int8, (3, 2, 0, 2, 1), 1),
        (np.uint8, (2, 2, 0, 1, 1), 1), (np.uint8, (3, 2, 1, 1, 0), 3)):
    tag = f"{np.dtype(ydt).name}_k{k}s{st}p{pad}d{dil}c{ceil}_q{q_ratio}"
    yz = np.array(40 if ydt == np.uint8 else -30, ydt)
    x = edge_bytes((2, 8, 11, 13), np.uint8)
    xz, xs = np.array(131, np.uint8), np.float32(0.05)
    xs_val["x"] = xs
    w1 = edge_bytes((70, 8, 3, 3), np.int8)
    ws1 = (RNG.random(70).astype(np.float32) + 0.5) * np.float32(0.01)
    b1 = RNG.integers(-4000, 4000, size=70).astype(np.int32)
    ys1, yz1 = np.float32(0.3), np.array(10 if ydt == np.uint8 else -50, ydt)
    w2 = edge_bytes((24, 70, 1, 1), np.int8)
    ws2 = (RNG.random(24).astype(np.float32) + 0.5) * np.float32(0.01)
    b2 = RNG.integers(-4000, 4000, size=24).astype(np.int32)
    ps = np.float32(ys1 * q_ratio)
    xs_val["c1_q"] = ys1
    xs_val["p_q"] = ps
    nodes, consts = [], {"xs": np.array(xs), "xz": xz, "p_ys": np.array(ps), "p_yz": yz1}
    qdq_nodes("c1", "x", "xs", "xz", w1, ws1, np.zeros(70, np.int8), b1, ys1, yz1, "Conv",
              {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, nodes, consts)
    nodes += [helper.make_node("DequantizeLinear", ["c1_q", "c1_ys", "c1_yz"], ["p_dx"]),
              helper.make_node("MaxPool", ["p_dx"], ["p_v"], kernel_shape=[k, k],
                               strides=[st, st], pads=[pad] * 4, dilations=[dil, dil],
                               ceil_mode=ceil),
              helper.make_node("QuantizeLinear", ["p_v", "p_ys", "p_yz"], ["p_q"])]
    qdq_nodes("c2", "p_q", "p_ys", "p_yz", w2, ws2, np.zeros(24, np.int8), b2, np.float32(0.4),
              yz, "Conv", {"kernel_shape": [1, 1]}, nodes, consts)
    y1 = qdq_ref(conv_ref(x, w1, xz, 0, 1, 1, 1), b1, xs, ws1, ys1, yz1, ydt, (1, 70, 1, 1))
    pooled = maxpool_ref(y1, k, st, pad, dil, bool(ceil))
    if q_ratio != 1:
        pooled = q8(dq(pooled, ys1, yz1), ps, yz1, ydt)
    want = qdq_ref(conv_ref(pooled, w2, yz1, 0, 1, 0, 1), b2, ps, ws2, np.float32(0.4), yz, ydt,
                   (1, 24, 1, 1))
    g = helper.make_graph(nodes, "qdq_pool_" + tag,
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                          [helper.make_tensor_value_info("c2_q", onnx_type(yz), None),
                           helper.make_tensor_value_info("p_q", onnx_type(yz), None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    path = kiln_cli.write_model(WORK, "qdq_pool_" + tag, g, [("", 13)], ir_version=7)
    src = subprocess.run([KILN, "source", "--graph", path], capture_output=True, text=True)
    fused = q_ratio == 1
    if ("max_pool_nhwc" in src.stdout) != fused or src.stdout.count("nhwc=1") != 2 * fused:
        failures.append(f"qdq pool {tag}: want {'a' if fused else 'no'} max_pool_nhwc between "
                        f"two {'channels-last' if fused else 'channels-first'} convolutions, "
                        f"the graph is: "
                        f"{src.stdout.strip()[-600:]} {src.stderr.strip()[-300:]}")
    for env in ({}, {"KILN_PASSES": "-nhwc"}):
        r, out = run(path, {"x": x}, env)
        label = f"qdq pool {tag} {env}"
        if r.returncode != 0:
            failures.append(f"{label}: kiln failed: {r.stderr.strip()[-300:]}")
            continue
        for name, ref in (("p_q", pooled), ("c2_q", want)):
            got = np.load(os.path.join(out, name + ".npy"))
            if got.dtype != ref.dtype or got.shape != ref.shape:
                failures.append(f"{label}: {name} is {got.dtype} {got.shape}, want "
                                f"{ref.dtype} {ref.shape}")
            elif not np.array_equal(got, ref):
                # A float pool rounds (q - z) * s / 3s; NumPy may round an edge the other way.
                off = np.max(np.abs(got.astype(int) - ref.astype(int)))
                if fused or off > 1 or name == "c2_q" and off > 8:
                    failures.append(f"{label}: {name} differs from NumPy at "
                                    f"{np.argwhere(got != ref)[:5]} (by up to {off})")

# ---- QDQ residual adds: DequantizeLinear (a), DequantizeLinear (b) -> Add (-> Relu) ->
# QuantizeLinear requantizes the bytes' sum in two multiply-adds, no division; within a step of
# the spec's round((dq(a) + dq(b)) / s) everywhere, and equal to it almost everywhere.
for dt, relu, shape_b in ((np.uint8, True, (2, 16, 5, 7)), (np.int8, False, (2, 16, 5, 7)),
                          (np.uint8, False, (1, 16, 1, 1))):
    tag = f"{np.dtype(dt).name}{'_relu' if relu else ''}_b{'x'.join(map(str, shape_b))}"
    a = edge_bytes((2, 16, 5, 7), dt)
    b = edge_bytes(shape_b, dt)
    za, zb = (np.array(v if dt == np.uint8 else v - 128, dt) for v in (131, 17))
    zy = np.array(60 if dt == np.uint8 else -20, dt)
    sa, sb, sy = np.float32(0.037), np.float32(0.011), np.float32(0.05)
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
             helper.make_node("Add", ["da", "db"], ["v"])]
    last = "v"
    if relu:
        nodes.append(helper.make_node("Relu", ["v"], ["r"]))
        last = "r"
    nodes.append(helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["y"]))
    consts = {"sa": np.array(sa), "za": za, "sb": np.array(sb), "zb": zb, "sy": np.array(sy),
              "zy": zy}
    g = helper.make_graph(nodes, "qdq_add_" + tag,
                          [helper.make_tensor_value_info("a", onnx_type(a), a.shape),
                           helper.make_tensor_value_info("b", onnx_type(b), b.shape)],
                          [helper.make_tensor_value_info("y", onnx_type(zy), None)],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    path = kiln_cli.write_model(WORK, "qdq_add_" + tag, g, [("", 13)], ir_version=7)
    v = dq(a, sa, za) + dq(b, sb, zb)
    want = q8(np.maximum(v, 0) if relu else v, sy, zy, dt)
    src = subprocess.run([KILN, "source", "--graph", path], capture_output=True, text=True)
    if src.returncode != 0 or "div(" in src.stdout or "sub(" in src.stdout:
        failures.append(f"qdq add {tag}: want the sum requantized without a subtraction or a "
                        f"division, the graph is: {src.stdout.strip()[-500:]}")
    r, out = run(path, {"a": a, "b": b})
    if r.returncode != 0:
        failures.append(f"qdq add {tag}: kiln failed: {r.stderr.strip()[-300:]}")
        continue
    got = np.load(os.path.join(out, "y.npy"))
    if got.dtype != want.dtype or got.shape != want.shape:
        failures.append(f"qdq add {tag}: got {got.dtype} {got.shape}, want {want.dtype} "
                        f"{want.shape}")
        continue
    off = np.abs(got.astype(int) - want.astype(int))
    if off.max() > 1 or np.count_nonzero(off) > want.size // 100:
        failures.append(f"qdq add {tag}: {np.count_nonzero(off)} of {want.size} differ from "
                        f"NumPy (by up to {off.max()}) at {np.argwhere(off > 0)[:5]}")

# QOperator's MaxPool on bytes, alone: channels-first, 1-D and 2-D, against NumPy.
for dt, shape, attrs in ((np.uint8, (2, 3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2],
                                                         pads=[1, 1, 1, 1])),
                         (np.int8, (1, 5, 7, 8), dict(kernel_shape=[2, 3], strides=[1, 2],
                                                      ceil_mode=1)),
                         (np.int8, (2, 4, 17), dict(kernel_shape=[4], strides=[3], pads=[2, 2]))):
    x = edge_bytes(shape, dt)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    path = model(node, {"x": x}, {}, [("y", onnx_type(x))],
                 f"qop_pool_{np.dtype(dt).name}_{len(shape) - 2}d")
    x4 = x if x.ndim == 4 else x[:, :, None, :]
    kh, kw = (attrs["kernel_shape"] * 2)[:2] if x.ndim == 4 else (1, attrs["kernel_shape"][0])
    sh, sw = (attrs["strides"] * 2)[:2] if x.ndim == 4 else (1, attrs["strides"][0])
    pp = attrs.get("pads", [0])[0]
    ceil = attrs.get("ceil_mode", 0)
    if x.ndim == 4 and kh == kw and sh == sw:
        want = maxpool_ref(x4, kh, sh, pp, 1, bool(ceil))
    else:
        # Windows of different sides: the maximum over taps, written out.
        def osz(n, k, s):
            span = n + 2 * pp - (k - 1) - 1
            o = (span + (s - 1 if ceil else 0)) // s + 1
            return o - 1 if ceil and (o - 1) * s >= n + pp else o
        n_, c_, h, w = x4.shape
        ph = 0 if x.ndim == 3 else pp
        oh, ow = osz(h, kh, sh) if x.ndim == 4 else 1, osz(w, kw, sw)
        want = np.full((n_, c_, oh, ow), np.iinfo(dt).min, dt)
        for i in range(oh):
            for j in range(ow):
                for a in range(kh):
                    for b in range(kw):
                        yy, xx = i * sh - ph + a, j * sw - pp + b
                        if 0 <= yy < h and 0 <= xx < w:
                            want[:, :, i, j] = np.maximum(want[:, :, i, j], x4[:, :, yy, xx])
        if x.ndim == 3:
            want = want[:, :, 0, :]
    check(f"qop max pool {np.dtype(dt).name} {x.ndim - 2}-D", path, {"x": x}, want)

# A byte MaxPool asked for its Indices too: both outputs (the flat index of each window's
# first maximum, ONNX's row-major order), against NumPy.
x = edge_bytes((1, 3, 5, 6), np.uint8)
node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2])
path = model(node, {"x": x}, {}, [("y", TensorProto.UINT8), ("i", TensorProto.INT64)],
             "qop_pool_indices")
want_y = np.zeros((1, 3, 2, 3), np.uint8)
want_i = np.zeros((1, 3, 2, 3), np.int64)
for c in range(3):
    for i in range(2):
        for j in range(3):
            win = x[0, c, 2 * i:2 * i + 2, 2 * j:2 * j + 2]
            a, b = np.unravel_index(np.argmax(win), win.shape)
            want_y[0, c, i, j] = win[a, b]
            want_i[0, c, i, j] = (c * 5 + 2 * i + a) * 6 + 2 * j + b
r, out = run(path, {"x": x})
if r.returncode != 0:
    failures.append("byte MaxPool with Indices: kiln failed: " + r.stderr.strip()[-300:])
else:
    for name, want in (("y", want_y), ("i", want_i)):
        got = np.load(os.path.join(out, name + ".npy"))
        if got.dtype != want.dtype or not np.array_equal(got, want):
            failures.append(f"byte MaxPool with Indices: {name} differs from NumPy: "
                            f"got {got.ravel()[:8]} want {want.ravel()[:8]}")

# ---- bad quantization parameters: clear errors naming the node and the input ----------------
a = np.zeros((2, 3), np.uint8)
bad_cases = [
    ("zero scale", "QuantizeLinear", {"s": np.array(np.float32(0))}, "scale"),
    ("negative scale", "QuantizeLinear", {"s": np.array(np.float32(-1))}, "scale"),
    ("NaN scale", "QuantizeLinear", {"s": np.array(np.float32("nan"))}, "scale"),
    ("infinite scale", "QuantizeLinear", {"s": np.array(np.float32("inf"))}, "scale"),
    ("per-axis length", "QuantizeLinear", {"s": np.ones(4, np.float32)}, "scale"),
    ("zero point type", "DequantizeLinear", {"s": np.array(np.float32(1)),
                                             "z": np.array(3, np.int8)}, "zero point"),
]
for label, op, consts, word in bad_cases:
    if op == "QuantizeLinear":
        node = helper.make_node(op, ["x", "s", "z"], ["y"], axis=1, name="bad_q")
        consts = dict(consts, z=np.array(1, np.uint8))
        x = np.zeros((2, 3), np.float32)
        outs = [("y", TensorProto.UINT8)]
    else:
        node = helper.make_node(op, ["x", "s", "z"], ["y"], name="bad_q")
        x = a
        outs = [("y", TensorProto.FLOAT)]
    path = model(node, {"x": x}, consts, outs, "bad_" + label.replace(" ", "_"))
    r, _ = run(path, {"x": x})
    msg = r.stderr
    if r.returncode == 0 or "bad_q" not in msg and "node 0" not in msg or word not in msg:
        failures.append(f"bad parameters ({label}): want an error naming the node and the "
                        f"{word}, got rc {r.returncode}: {msg.strip()[-300:]}")

# Y's zero point of the wrong type (int32): named, for QLinearMatMul and QGemm.
for op, ins, extra in (
        ("QLinearMatMul", ["a", "sa", "az", "b", "sb", "bz", "sy", "yz"], {}),
        ("QGemm", ["a", "sa", "az", "b", "sb", "bz", "", "sy", "yz"], {"domain": "com.microsoft"})):
    node = helper.make_node(op, ins, ["y"], name="bad_yz", **extra)
    consts = {"sa": np.array(np.float32(1)), "az": np.array(0, np.uint8),
              "b": np.ones((3, 3), np.int8), "sb": np.array(np.float32(1)),
              "bz": np.array(0, np.int8), "sy": np.array(np.float32(1)),
              "yz": np.array(0, np.int32)}
    x = np.zeros((2, 3), np.uint8)
    path = model(node, {"a": x}, consts, [("y", TensorProto.UINT8)], "bad_yz_" + op)
    r, _ = run(path, {"a": x})
    if r.returncode == 0 or "bad_yz" not in r.stderr or "Y's zero point" not in r.stderr:
        failures.append(f"{op} with an int32 Y zero point: want an error naming the node and "
                        f"Y's zero point, got rc {r.returncode}: {r.stderr.strip()[-300:]}")

kiln_cli.finish(failures,
                "quant_test: every case matches NumPy; bad parameters are refused by name")
