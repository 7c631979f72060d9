#!/usr/bin/env python3
"""kiln's STFT and log-mel front-end against NumPy's FFT.

Each case is an ONNX model made here with Debian's onnx package and run by `kiln run`:
STFT with a constant Hann window folded into the DFT's matrix (Whisper's 400-point frames,
hop 160: not a power of two), a window given at run time, a complex signal two-sided, frames
of 4096 points (past the GEMM's limit: the dft op's FFT), and a log-mel spectrogram
(STFT, |X|^2, a MelWeightMatrix, log) against the same chain in NumPy. Then bad inputs
must fail naming what was wrong.

usage: signal_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(11)
failures = []


def save_model(nodes, inputs, consts, outputs, name, opset=17):
    g = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return kiln_cli.write_model(WORK, name, g, [("", opset)])


def run(path, inputs):
    return kiln_cli.run(KILN, path, inputs)


def check(name, path, inputs, want, rtol, atol):
    r, out = run(path, inputs)
    if r.returncode != 0:
        failures.append(name + ": kiln failed: " + r.stderr.strip()[-400:])
        return
    got = np.load(os.path.join(out, "y.npy"))
    if got.shape != want.shape:
        failures.append(f"{name}: shape {got.shape}, NumPy {want.shape}")
    elif not np.allclose(got, want, rtol=rtol, atol=atol):
        err = np.max(np.abs(got.astype(np.float64) - want))
        failures.append(f"{name}: max deviation {err:.3g} from NumPy (atol {atol:.3g})")


def expect_error(name, path, inputs, text):
    r, _ = run(path, inputs)
    if r.returncode == 0 or text not in r.stderr:
        failures.append(f"{name}: expected an error naming '{text}', got rc {r.returncode}: "
                        + r.stderr.strip()[-300:])


def frames(x, n, hop):
    count = (x.shape[1] - n) // hop + 1
    return np.stack([x[:, f * hop:f * hop + n] for f in range(count)], axis=1)


def stft_ref(x, n, hop, window, onesided=True):
    """x (batch, length) real or complex -> (batch, frames, bins, 2)."""
    spec = np.fft.fft(frames(x.astype(np.complex128), n, hop) * window, axis=-1)
    if onesided:
        spec = spec[..., :n // 2 + 1]
    return np.stack([spec.real, spec.imag], axis=-1)


def stft_model(name, n, hop, window=None, window_input=False, onesided=1):
    consts = {"step": np.array(hop, np.int64), "len": np.array(n, np.int64)}
    ins = ["x", "step", "w" if window is not None else "", "len"]
    if window is not None and not window_input:
        consts["w"] = window.astype(np.float32)
    node = helper.make_node("STFT", ins, ["y"], onesided=onesided)
    return node, consts


# Whisper's front-end shape: 400-point Hann frames every 160 samples, 2 seconds at 16 kHz.
n, hop = 400, 160
hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)
x = RNG.uniform(-1, 1, (2, 32000)).astype(np.float32)
node, consts = stft_model("whisper", n, hop, hann)
path = save_model([node], {"x": x[..., None]}, consts, ["y"], "stft_whisper")
# float32 sums over 400 products: a few eps of the sum of |x| per frame.
check("stft 400/160 constant Hann", path, {"x": x[..., None]}, stft_ref(x, n, hop, hann),
      1e-4, 400 * 8 * np.finfo(np.float32).eps)

# A window given at run time multiplies the frames before the matrix.
w = RNG.uniform(0, 1, 64).astype(np.float32)
x = RNG.uniform(-1, 1, (1, 1000)).astype(np.float32)
node, consts = stft_model("win_input", 64, 17, w, window_input=True)
path = save_model([node], {"x": x[..., None], "w": w}, consts, ["y"], "stft_window_input")
check("stft 64/17 window at run time", path, {"x": x[..., None], "w": w},
      stft_ref(x, 64, 17, w), 1e-4, 64 * 8 * np.finfo(np.float32).eps)

# A complex signal, two-sided.
xc = RNG.uniform(-1, 1, (2, 300, 2)).astype(np.float32)
node, consts = stft_model("complex", 48, 25, None, onesided=0)
path = save_model([node], {"x": xc}, consts, ["y"], "stft_complex")
check("stft 48/25 complex two-sided", path, {"x": xc},
      stft_ref(xc[..., 0] + 1j * xc[..., 1], 48, 25, np.ones(48), onesided=False),
      1e-4, 48 * 8 * np.finfo(np.float32).eps)

# 4096-point frames: past the GEMM's matrix limit, the dft op's radix-2 FFT.
x = RNG.uniform(-1, 1, (1, 12288)).astype(np.float32)
node, consts = stft_model("long", 4096, 2048, None)
path = save_model([node], {"x": x[..., None]}, consts, ["y"], "stft_long")
check("stft 4096/2048 (FFT)", path, {"x": x[..., None]}, stft_ref(x, 4096, 2048, np.ones(4096)),
      1e-4, 4096 * 8 * np.finfo(np.float32).eps)

# A log-mel spectrogram: STFT, power, 80 mel bands of a 400-point DFT at 16 kHz, log.
n, hop, mels = 400, 160, 80
x = RNG.uniform(-1, 1, (1, 16000)).astype(np.float32)
nodes = [
    helper.make_node("STFT", ["x", "step", "w", "len"], ["spec"]),
    helper.make_node("Mul", ["spec", "spec"], ["sq"]),
    helper.make_node("ReduceSum", ["sq", "last"], ["power"], keepdims=0),
    helper.make_node("MelWeightMatrix", ["mels", "dftlen", "rate", "lo", "hi"], ["melw"]),
    helper.make_node("MatMul", ["power", "melw"], ["mel"]),
    helper.make_node("Add", ["mel", "floor"], ["mel_f"]),
    helper.make_node("Log", ["mel_f"], ["y"]),
]
consts = {"step": np.array(hop, np.int64), "len": np.array(n, np.int64),
          "w": hann.astype(np.float32), "last": np.array([-1], np.int64),
          "mels": np.array(mels, np.int64), "dftlen": np.array(n, np.int64),
          "rate": np.array(16000, np.int64), "lo": np.array(0.0, np.float32),
          "hi": np.array(8000.0, np.float32), "floor": np.array(1e-6, np.float32)}
path = save_model(nodes, {"x": x[..., None]}, consts, ["y"], "log_mel")


def mel_matrix(bands, dft_length, rate, lo, hi):
    """ONNX's MelWeightMatrix, written out here from its definition."""
    bins = dft_length // 2 + 1
    mel = lambda hz: 2595 * np.log10(1 + hz / 700)
    pts = np.arange(bands + 2) * (mel(hi) - mel(lo)) / (bands + 2) + mel(lo)
    edges = np.floor((dft_length + 1) * (700 * (10 ** (pts / 2595) - 1)) / rate).astype(int)
    m = np.zeros((bins, bands))
    for b in range(bands):
        l, c, r = edges[b], edges[b + 1], edges[b + 2]
        if c == l:
            m[c, b] = 1
        else:
            m[l:c + 1, b] = (np.arange(l, c + 1) - l) / (c - l)
        if r > c:
            m[c:r, b] = (r - np.arange(c, r)) / (r - c)
    return m


spec = stft_ref(x, n, hop, hann)
power = (spec ** 2).sum(-1)
want = np.log(power @ mel_matrix(mels, n, 16000, 0.0, 8000.0) + 1e-6)
check("log-mel 80 bands", path, {"x": x[..., None]}, want, 1e-3, 1e-3)

# Bad inputs: frames longer than the signal, a window of the wrong length.
x = RNG.uniform(-1, 1, (1, 100)).astype(np.float32)
node, consts = stft_model("too_long", 128, 10, None)
path = save_model([node], {"x": x[..., None]}, consts, ["y"], "stft_too_long")
expect_error("frame longer than the signal", path, {"x": x[..., None]},
             "1 <= frame_length <= the signal's 100 points")
node, consts = stft_model("bad_window", 64, 10, np.ones(32))
path = save_model([node], {"x": x[..., None]}, consts, ["y"], "stft_bad_window")
expect_error("window of the wrong length", path, {"x": x[..., None]},
             "window has 32 points for frames of 64")

for f in failures:
    print("FAIL", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
