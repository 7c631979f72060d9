#!/usr/bin/env python3
"""Control flow as a step planned with the module against one sized by its run, and onnxruntime.

Two recurrences, each written twice: an RNN h' = tanh(h W + x_t) over a sequence as a Scan,
and the same as a Loop whose per-iteration outputs are the states. With every shape known when
the model loads (the sequence length, or M a constant), kiln runs the node as a step of the
model's module, on the run's planned buffers; with the length an input (a dynamic axis, or M
given at run time), the node is a step sized by its run: the executor plans the steps after it
from the shapes its outputs came out with (memoized per shape). Each is
called in-process through kiln.compile (2 threads), rounds interleaved with onnxruntime on the
same file; each round is the median of --repeat calls after a warm-up. Outputs are checked
against NumPy. Writes bench/results/control_flow.md.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
from peers import machine, median_ms  # noqa: E402

import kiln  # noqa: E402

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
H, B = 64, 4


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save(path, nodes, inputs, outputs, consts):
    g = helper.make_graph(nodes, os.path.basename(path), inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def cell(h_in, x_in, h_out):
    return [helper.make_node("MatMul", [h_in, "W"], ["hw"]),
            helper.make_node("Add", ["hw", x_in], ["pre"]),
            helper.make_node("Tanh", ["pre"], [h_out])]


def scan_model(path, steps, static):
    body = helper.make_graph(
        cell("h_in", "x_t", "h_out") + [helper.make_node("Identity", ["h_out"], ["h_t"])],
        "rnn", [vi("h_in", F, [B, H]), vi("x_t", F, [B, H])],
        [vi("h_out", F, [B, H]), vi("h_t", F, [B, H])])
    t = steps if static else None
    save(path, [helper.make_node("Scan", ["h0", "x"], ["h", "hs"], body=body, num_scan_inputs=1),
                helper.make_node("ReduceSum", ["hs", "ax0"], ["total"], keepdims=0)],
         [vi("h0", F, [B, H]), vi("x", F, [t, B, H])], [vi("h", F, [B, H]), vi("total", F, [B, H])],
         {"W": W, "ax0": np.array([0], np.int64)})


def loop_model(path, steps, static):
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Gather", ["x", "i"], ["x_t"], axis=0)] + cell("h_in", "x_t", "h_out") +
        [helper.make_node("Identity", ["h_out"], ["h_t"])],
        "rnn", [vi("i", I64, []), vi("cond_in", BOOL, []), vi("h_in", F, [B, H])],
        [vi("cond_out", BOOL, []), vi("h_out", F, [B, H]), vi("h_t", F, [B, H])])
    inputs = [vi("h0", F, [B, H]), vi("x", F, [steps, B, H])]
    consts = {"W": W, "yes": np.array(True), "ax0": np.array([0], np.int64)}
    if static:
        consts["m"] = np.array(steps, np.int64)
    else:
        inputs.append(vi("m", I64, []))
    save(path, [helper.make_node("Loop", ["m", "yes", "h0"], ["h", "hs"], body=body),
                helper.make_node("ReduceSum", ["hs", "ax0"], ["total"], keepdims=0)],
         inputs, [vi("h", F, [B, H]), vi("total", F, [B, H])], consts)


def reference(h0, x):
    h, total = h0.astype(np.float64), np.zeros_like(h0, np.float64)
    for t in range(x.shape[0]):
        h = np.tanh(h @ W + x[t])
        total += h
    return h, total


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "control_flow.md"))
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    global W
    W = (rng.standard_normal((H, H)) * 0.15).astype(np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32)
    x = rng.standard_normal((args.steps, B, H)).astype(np.float32)
    want_h, want_total = reference(h0, x)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind, make in (("Scan", scan_model), ("Loop", loop_model)):
            paths = {}
            for static in (True, False):
                paths[static] = os.path.join(tmp, f"{kind}_{'static' if static else 'dynamic'}.onnx")
                make(paths[static], args.steps, static)
            feeds = {True: {"h0": h0, "x": x}, False: {"h0": h0, "x": x}}
            if kind == "Loop":
                feeds[False]["m"] = np.array(args.steps, np.int64)
            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            so.inter_op_num_threads = 1
            sess = ort.InferenceSession(paths[True], so, providers=["CPUExecutionProvider"])
            fns = {s: kiln.compile(paths[s]) for s in (True, False)}
            for s in (True, False):
                h, total = fns[s](**feeds[s])
                err = max(np.abs(np.asarray(h) - want_h).max(),
                          np.abs(np.asarray(total) - want_total).max())
                if err > 1e-4:
                    raise SystemExit(f"{kind} ({'static step' if s else 'sized step'}) deviates {err:.3g}")
            times = {"step": [], "sized": [], "ort": []}
            for _ in range(args.rounds):
                times["step"].append(median_ms(lambda: fns[True](**feeds[True]), args.repeat))
                times["sized"].append(median_ms(lambda: fns[False](**feeds[False]), args.repeat))
                times["ort"].append(median_ms(lambda: sess.run(None, feeds[True]), args.repeat))
            med = {k: statistics.median(v) for k, v in times.items()}
            rows.append((kind, med, statistics.median(
                [a / b for a, b in zip(times["step"], times["ort"])])))
            print(f"{kind}: static step {med['step']:.3f} ms, sized step {med['sized']:.3f} ms, "
                  f"onnxruntime {med['ort']:.3f} ms", flush=True)
    lines = ["# Control flow: a step planned with the module, one sized by its run, and onnxruntime", "",
             f"Machine: {machine()}.", "",
             f"`bench/control_flow/run.py --steps {args.steps} --rounds {args.rounds} --repeat "
             f"{args.repeat}`: an RNN of hidden size {H} and batch {B} over {args.steps} steps, "
             "as a Scan and as a Loop, the per-step states summed after the node. In-process "
             "calls (kiln.compile, onnxruntime's InferenceSession, 2 threads), rounds "
             "interleaved; each time is the median over rounds of each round's median.", "",
             "| node | kiln, static step (ms) | kiln, sized step (ms) | onnxruntime (ms) | static / sized "
             "| step / onnxruntime |", "|---|---|---|---|---|---|"]
    for kind, med, ratio in rows:
        lines.append(f"| {kind} | {med['step']:.3f} | {med['sized']:.3f} | {med['ort']:.3f} | "
                     f"{med['step'] / med['sized']:.2f} | {ratio:.2f} |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
