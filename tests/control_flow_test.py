#!/usr/bin/env python3
"""ONNX Loop, Scan and If (on a condition computed at run time) against NumPy.

Each case is an ONNX model made here with Debian's onnx package and run by `kiln run`: a
while loop whose condition the body computes, a for loop whose condition stays true (it must
stop at exactly M), zero iterations, a carried value that grows each iteration, a reversed
scan over axis 1 of an RNN whose weight the body reads from the enclosing graph, opset 8's
batched Scan, and an If whose branches differ in shape. Then bad models must fail naming what
was wrong, never hang.

usage: control_flow_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(5)
failures = []
F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def save_model(name, nodes, inputs, outputs, consts=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(v, k) for k, v in dict(consts).items()])
    return kiln_cli.write_model(WORK, name, g, [("", opset)])


def run(path, inputs, env=None):
    return kiln_cli.run(KILN, path, inputs, env)


def check(name, path, inputs, want, rtol=1e-5, atol=1e-5):
    r, out = run(path, inputs)
    if r.returncode != 0:
        failures.append(name + ": kiln failed: " + r.stderr.strip()[-600:])
        return
    for k, w in want.items():
        got = np.load(os.path.join(out, k + ".npy"))
        if got.shape != w.shape:
            failures.append(f"{name}: {k} has shape {got.shape}, NumPy {w.shape}")
        elif got.dtype != w.dtype:
            failures.append(f"{name}: {k} is {got.dtype}, NumPy {w.dtype}")
        elif not np.allclose(got, w, rtol=rtol, atol=atol):
            err = np.max(np.abs(got.astype(np.float64) - w))
            failures.append(f"{name}: {k} deviates {err:.3g} from NumPy")


def expect_error(name, path, inputs, text, env=None):
    r, _ = run(path, inputs, env)
    if r.returncode == 0 or text not in r.stderr:
        failures.append(f"{name}: expected an error naming '{text}', got rc {r.returncode}: "
                        + r.stderr.strip()[-400:])


# While loop: x doubles until its sum passes the limit (an input the body reads from the
# enclosing graph); no trip count. Its condition is the body's own.
body = helper.make_graph(
    [helper.make_node("Mul", ["x_in", "two"], ["x_out"]),
     helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
     helper.make_node("Less", ["s", "limit"], ["cond_out"]),
     helper.make_node("Identity", ["x_out"], ["x_scan"])],
    "while_body",
    [vi("i", I64, []), vi("cond_in", BOOL, []), vi("x_in", F, [3])],
    [vi("cond_out", BOOL, []), vi("x_out", F, [3]), vi("x_scan", F, [3])],
    [numpy_helper.from_array(np.array(2, np.float32), "two")])
path = save_model("while", [
    helper.make_node("ReduceSum", ["x"], ["s0"], keepdims=0),
    helper.make_node("Less", ["s0", "limit"], ["go"]),
    helper.make_node("Loop", ["", "go", "x"], ["y", "ys"], body=body)],
    [vi("x", F, [3]), vi("limit", F, [])], [vi("y", F, [3]), vi("ys", F, None)])


def while_ref(x, limit):
    ys = []
    while x.sum() < limit:
        x = x * 2
        ys.append(x)
    return x, np.array(ys, np.float32).reshape(len(ys), 3)


for limit in (100.0, 0.5):  # 0.5: the condition is false before the first iteration
    x = np.array([0.5, 1.0, 1.5], np.float32)
    y, ys = while_ref(x, limit)
    check(f"while loop, limit {limit}", path, {"x": x, "limit": np.array(limit, np.float32)},
          {"y": y, "ys": ys})
expect_error("a condition that never turns false stops at the bound", path,
             {"x": np.zeros(3, np.float32), "limit": np.array(1, np.float32)},
             "still true after 100 iterations", {"KILN_MAX_LOOP_ITERATIONS": "100"})
expect_error("a bound that is not a positive integer", path,
             {"x": np.zeros(3, np.float32), "limit": np.array(1, np.float32)},
             "KILN_MAX_LOOP_ITERATIONS='ten' is not a positive integer",
             {"KILN_MAX_LOOP_ITERATIONS": "ten"})

# For loop: M from the inputs and a condition that stays true; y accumulates x[i] (a Gather by
# the iteration number) and grows a record of i (a carried value whose size changes).
body = helper.make_graph(
    [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
     helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
     helper.make_node("Add", ["y_in", "xi"], ["y_out"]),
     helper.make_node("Unsqueeze", ["i", "zero"], ["i1"]),
     helper.make_node("Concat", ["seen_in", "i1"], ["seen_out"], axis=0),
     helper.make_node("Identity", ["y_out"], ["y_scan"])],
    "for_body",
    [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F, [4]), vi("seen_in", I64, [None])],
    [vi("cond_out", BOOL, []), vi("y_out", F, [4]), vi("seen_out", I64, [None]),
     vi("y_scan", F, [4])],
    [numpy_helper.from_array(np.array([0], np.int64), "zero")])
path = save_model("for", [
    helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
    helper.make_node("Constant", [], ["none"],
                     value=numpy_helper.from_array(np.zeros(0, np.int64))),
    helper.make_node("Loop", ["m", "yes", "y0", "none"], ["y", "seen", "ys"], body=body)],
    [vi("m", I64, []), vi("y0", F, [4]), vi("x", F, [8, 4])],
    [vi("y", F, [4]), vi("seen", I64, None), vi("ys", F, None)])
x = RNG.standard_normal((8, 4)).astype(np.float32)
y0 = RNG.standard_normal(4).astype(np.float32)
for m in (5, 0):
    want_ys = (y0 + np.cumsum(x[:m], axis=0)).astype(np.float32).reshape(m, 4)
    check(f"for loop, M={m}", path, {"m": np.array(m, np.int64), "y0": y0, "x": x},
          {"y": want_ys[-1] if m else y0, "seen": np.arange(m, dtype=np.int64), "ys": want_ys})
expect_error("an iteration number past the data", path,
             {"m": np.array(9, np.int64), "y0": y0, "x": x}, "index 8 is out of range")

# Scan (opset 17): an RNN h' = tanh(h W + x_t) over axis 1 of x, reversed, its outputs
# stacked on axis 1; W is an initializer of the enclosing graph that the body reads.
W = (RNG.standard_normal((5, 5)) * 0.4).astype(np.float32)
body = helper.make_graph(
    [helper.make_node("MatMul", ["h_in", "W"], ["hw"]),
     helper.make_node("Add", ["hw", "x_t"], ["pre"]),
     helper.make_node("Tanh", ["pre"], ["h_out"]),
     helper.make_node("Identity", ["h_out"], ["h_t"])],
    "rnn_body", [vi("h_in", F, [2, 5]), vi("x_t", F, [2, 5])],
    [vi("h_out", F, [2, 5]), vi("h_t", F, [2, 5])])
path = save_model("rnn_scan", [
    helper.make_node("Scan", ["h0", "x"], ["h", "hs"], body=body, num_scan_inputs=1,
                     scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1])],
    [vi("h0", F, [2, 5]), vi("x", F, [2, None, 5])], [vi("h", F, [2, 5]), vi("hs", F, [2, None, 5])],
    {"W": W})
h0 = RNG.standard_normal((2, 5)).astype(np.float32)
x = RNG.standard_normal((2, 7, 5)).astype(np.float32)
h, hs = h0.astype(np.float64), []
for t in reversed(range(7)):
    h = np.tanh(h @ W + x[:, t])
    hs.append(h)
check("reversed scan over axis 1", path, {"h0": h0, "x": x},
      {"h": h.astype(np.float32), "hs": np.stack(hs, axis=1).astype(np.float32)})
check("a scan of zero steps", path, {"h0": h0, "x": np.zeros((2, 0, 5), np.float32)},
      {"h": h0, "hs": np.zeros((2, 0, 5), np.float32)})

# Scan inputs of different lengths, and a direction that is neither 0 nor 1.
pair_body = helper.make_graph(
    [helper.make_node("Add", ["s_in", "a_t"], ["s1"]), helper.make_node("Add", ["s1", "b_t"], ["s_out"])],
    "pair", [vi("s_in", F, [2]), vi("a_t", F, [2]), vi("b_t", F, [2])], [vi("s_out", F, [2])])
path = save_model("scan_lengths", [
    helper.make_node("Scan", ["s0", "a", "b"], ["s"], body=pair_body, num_scan_inputs=2)],
    [vi("s0", F, [2]), vi("a", F, [None, 2]), vi("b", F, [None, 2])], [vi("s", F, [2])])
expect_error("scan inputs of different lengths", path,
             {"s0": np.zeros(2, np.float32), "a": np.ones((3, 2), np.float32),
              "b": np.ones((4, 2), np.float32)},
             "scan input 1 has 4 steps, scan input 0 has 3")
path = save_model("scan_direction", [
    helper.make_node("Scan", ["s0", "a", "b"], ["s"], body=pair_body, num_scan_inputs=2,
                     scan_input_directions=[0, 2])],
    [vi("s0", F, [2]), vi("a", F, [3, 2]), vi("b", F, [3, 2])], [vi("s", F, [2])])
expect_error("a scan direction of 2", path,
             {"s0": np.zeros(2, np.float32), "a": np.ones((3, 2), np.float32),
              "b": np.ones((3, 2), np.float32)}, "a scan direction is 0 or 1, got 2")

# Opset 8's Scan: a batch axis on every input; each batch element scans on its own.
body8 = helper.make_graph(
    [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
     helper.make_node("Mul", ["s_out", "x_t"], ["p"])],
    "sum_body", [vi("s_in", F, [3]), vi("x_t", F, [3])], [vi("s_out", F, [3]), vi("p", F, [3])])
path = save_model("scan8", [
    helper.make_node("Scan", ["", "s0", "x"], ["s", "ps"], body=body8, num_scan_inputs=1,
                     directions=[1])],
    [vi("s0", F, [2, 3]), vi("x", F, [2, 4, 3])], [vi("s", F, [2, 3]), vi("ps", F, [2, 4, 3])],
    opset=8)
s0 = RNG.standard_normal((2, 3)).astype(np.float32)
x = RNG.standard_normal((2, 4, 3)).astype(np.float32)
s, ps = s0.copy(), []
for t in reversed(range(4)):
    s = s + x[:, t]
    ps.append(s * x[:, t])
check("opset 8 batched scan", path, {"s0": s0, "x": x}, {"s": s, "ps": np.stack(ps, axis=1)})

# If on a condition computed at run time; the branches give different shapes and read an
# initializer and an input of the enclosing graph.
then_g = helper.make_graph(
    [helper.make_node("Mul", ["x", "k"], ["r"])], "then", [], [vi("r", F, None)])
else_g = helper.make_graph(
    [helper.make_node("ReduceSum", ["x"], ["r"], keepdims=1, axes=[1])], "else", [],
    [vi("r", F, None)])
path = save_model("if_runtime", [
    helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
    helper.make_node("Greater", ["total", "zero"], ["c"]),
    helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g)],
    [vi("x", F, [2, 3])], [vi("r", F, None)],
    {"k": np.array(3, np.float32), "zero": np.array(0, np.float32)}, opset=11)
x = np.abs(RNG.standard_normal((2, 3))).astype(np.float32)
check("If, then branch", path, {"x": x}, {"r": x * 3})
check("If, else branch", path, {"x": -x}, {"r": (-x).sum(axis=1, keepdims=True)})
bad_else = helper.make_graph(
    [helper.make_node("Cast", ["x"], ["r"], to=I64)], "else", [], [vi("r", I64, None)])
path = save_model("if_types_differ", [
    helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
    helper.make_node("Greater", ["total", "zero"], ["c"]),
    helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=bad_else)],
    [vi("x", F, [2, 3])], [vi("r", F, None)],
    {"k": np.array(3, np.float32), "zero": np.array(0, np.float32)}, opset=11)
expect_error("branches of different types", path, {"x": x}, "else_branch output 0 is int64")

# Bad loops.
path = save_model("endless", [helper.make_node("Loop", ["", "", "x"], ["y"], body=helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Identity", ["v"], ["vo"])],
    "b", [vi("i", I64, []), vi("c", BOOL, []), vi("v", F, [2])],
    [vi("co", BOOL, []), vi("vo", F, [2])]))], [vi("x", F, [2])], [vi("y", F, [2])])
expect_error("a Loop with neither M nor cond", path, {"x": np.zeros(2, np.float32)},
             "neither a trip count M nor a condition")
grow = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]),
     helper.make_node("Concat", ["v", "v"], ["vo"], axis=0),
     helper.make_node("Identity", ["vo"], ["vs"])],
    "b", [vi("i", I64, []), vi("c", BOOL, []), vi("v", F, [None])],
    [vi("co", BOOL, []), vi("vo", F, [None]), vi("vs", F, [None])])
path = save_model("ragged_scan", [helper.make_node("Loop", ["m", "", "x"], ["y", "ys"], body=grow)],
                  [vi("m", I64, []), vi("x", F, [2])], [vi("y", F, None), vi("ys", F, None)])
expect_error("scan output slices that disagree", path,
             {"m": np.array(3, np.int64), "x": np.ones(2, np.float32)},
             "iteration 1 gives float32 (8,)")
rank_up = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]),
     helper.make_node("Unsqueeze", ["v", "zero"], ["vo"])],
    "b", [vi("i", I64, []), vi("c", BOOL, []), vi("v", F, [2])],
    [vi("co", BOOL, []), vi("vo", F, [1, 2])],
    [numpy_helper.from_array(np.array([0], np.int64), "zero")])
path = save_model("rank_change", [helper.make_node("Loop", ["m", "", "x"], ["y"], body=rank_up)],
                  [vi("m", I64, []), vi("x", F, [2])], [vi("y", F, None)])
expect_error("a carried value that changes rank", path,
             {"m": np.array(3, np.int64), "x": np.ones(2, np.float32)}, "changes rank")

for f in failures:
    print("FAIL", f)
print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
