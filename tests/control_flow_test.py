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
import shutil
import subprocess
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
body_while = body = helper.make_graph(
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
x_if = x = np.abs(RNG.standard_normal((2, 3))).astype(np.float32)
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

# Control flow whose output shapes are known when the model loads runs as a step of the
# module (a host_call node the executor runs between the others, on the run's buffers), not
# between stages: `kiln run --profile` lists it among the module's steps.
def check_step(name, path, inputs, want, steps=1, env=None, pushed=False, rtol=1e-5, atol=1e-5,
               extra=()):
    out = path[:-5] + "_out"
    args = [KILN, "run", path, "--no-generic-start", "-o", out, "--profile", "--repeat", "2",
            *extra]
    for k, v in inputs.items():
        f = path[:-5] + "_" + k + ".npy"
        np.save(f, v)
        args += ["--input", k + "=" + f]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, **(env or {})))
    text = r.stdout + r.stderr
    if r.returncode != 0:
        failures.append(name + ": kiln failed: " + r.stderr.strip()[-600:])
        return
    if text.count("(host_call)") != steps:
        failures.append(f"{name}: expected {steps} host_call steps in the profile, got:\n{text}")
    if pushed and "steps pushed one by one" not in text:
        failures.append(f"{name}: expected the run's steps pushed to the engine, got:\n{text}")
    for k, w in want.items():
        got = np.load(os.path.join(out, k + ".npy"))
        if got.shape != w.shape or not np.allclose(got, w, rtol=rtol, atol=atol):
            failures.append(f"{name}: {k} is {got.dtype} {got.shape}, NumPy {w.shape}: "
                            f"deviates {np.max(np.abs(got - w)) if got.shape == w.shape else '-'}")


# A static Scan between two ops of the module (its input computed by the module, its output
# read by it): the RNN above over axis 1 of a (2, 7, 5) tensor, reversed.
path = save_model("step_scan", [
    helper.make_node("Relu", ["x0"], ["x"]),
    helper.make_node("Scan", ["h0", "x"], ["h", "hs"], body=body, num_scan_inputs=1,
                     scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[1]),
    helper.make_node("Sigmoid", ["hs"], ["y"])],
    [vi("h0", F, [2, 5]), vi("x0", F, [2, 7, 5])], [vi("h", F, [2, 5]), vi("y", F, [2, 7, 5])],
    {"W": W})
h0 = RNG.standard_normal((2, 5)).astype(np.float32)
x0 = RNG.standard_normal((2, 7, 5)).astype(np.float32)
h, hs = h0.astype(np.float64), []
for t in reversed(range(7)):
    h = np.tanh(h @ W + np.maximum(x0[:, t], 0))
    hs.append(h)
check_step("a static Scan as a step", path, {"h0": h0, "x0": x0},
           {"h": h.astype(np.float32), "y": (1 / (1 + np.exp(-np.stack(hs, axis=1)))).astype(np.float32)})

# The same on an empty cache with the generic tier answering while the modules compile (the
# default): the host call's bodies compile in the background too, and the model's modules
# must not keep them (or their compile threads) alive past the model: exiting while a
# body's compile thread still ran freed the process's module memo under it.
for attempt in range(3):
    cache = os.path.join(WORK, f"generic-cache-{attempt}")
    shutil.rmtree(cache, ignore_errors=True)
    out = os.path.join(WORK, "step_scan_generic")
    args = [KILN, "run", path, "-o", out]
    for k, v in {"h0": h0, "x0": x0}.items():
        args += ["--input", f"{k}={path[:-5]}_{k}.npy"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, KILN_CACHE_DIR=cache))
    if r.returncode != 0:
        failures.append(f"a static Scan on an empty cache, generic start, try {attempt}: rc "
                        f"{r.returncode}: {r.stderr.strip()[-400:]}")
    elif not np.allclose(np.load(os.path.join(out, "h.npy")), h, rtol=1e-5, atol=1e-5):
        failures.append(f"a static Scan on an empty cache, generic start, try {attempt}: h differs")

# A while loop of static shapes (its condition the body's, a bound M from the inputs) whose
# body holds a static Scan: a host call inside a host call. Each iteration adds the running
# sums of x's rows to v and doubles it; it stops when v's sum passes the limit, or at M.
inner = helper.make_graph(
    [helper.make_node("Add", ["acc_in", "row"], ["acc_out"]),
     helper.make_node("Identity", ["acc_out"], ["acc_t"])],
    "inner", [vi("acc_in", F, [3]), vi("row", F, [3])], [vi("acc_out", F, [3]), vi("acc_t", F, [3])])
loop_body = helper.make_graph(
    [helper.make_node("Scan", ["v_in", "x"], ["summed", "partial"], body=inner, num_scan_inputs=1),
     helper.make_node("Mul", ["summed", "two"], ["v_out"]),
     helper.make_node("ReduceSum", ["v_out"], ["s"], keepdims=0),
     helper.make_node("Less", ["s", "limit"], ["cond_out"])],
    "outer", [vi("i", I64, []), vi("cond_in", BOOL, []), vi("v_in", F, [3])],
    [vi("cond_out", BOOL, []), vi("v_out", F, [3])],
    [numpy_helper.from_array(np.array(2, np.float32), "two")])
path = save_model("step_nested", [
    helper.make_node("Loop", ["m", "", "v0"], ["v"], body=loop_body),
    helper.make_node("Neg", ["v"], ["y"])],
    [vi("m", I64, []), vi("v0", F, [3]), vi("x", F, [4, 3]), vi("limit", F, [])],
    [vi("y", F, [3])])
x = np.abs(RNG.standard_normal((4, 3))).astype(np.float32)
v0 = np.array([0.1, 0.2, 0.3], np.float32)


def nested_ref(m, limit):
    v = v0.astype(np.float64)
    for _ in range(m):
        v = (v + x.sum(axis=0)) * 2
        if not v.sum() < limit:
            break
    return (-v).astype(np.float32)


for m, limit in ((10, 200.0), (3, 1e9), (0, 1e9)):  # the condition ends it; M ends it; none
    check_step(f"a Loop holding a Scan, M={m}, limit {limit}", path,
               {"m": np.array(m, np.int64), "v0": v0, "x": x, "limit": np.array(limit, np.float32)},
               {"y": nested_ref(m, limit)})

# A for loop as exporters write `for i in range(n)`: M known when the model loads, a true
# condition the body passes through. Its per-iteration outputs then have a static length (M)
# and it runs as a step too; with M = 0 they are empty.
for_body = helper.make_graph(
    [helper.make_node("Identity", ["cond_in"], ["cond_mid"]),
     helper.make_node("Identity", ["cond_mid"], ["cond_out"]),
     helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
     helper.make_node("Add", ["y_in", "xi"], ["y_out"]),
     helper.make_node("Mul", ["y_out", "y_out"], ["y_scan"])],
    "for_body", [vi("i", I64, []), vi("cond_in", BOOL, []), vi("y_in", F, [4])],
    [vi("cond_out", BOOL, []), vi("y_out", F, [4]), vi("y_scan", F, [4])])
x = RNG.standard_normal((8, 4)).astype(np.float32)
y0 = RNG.standard_normal(4).astype(np.float32)
for m in (5, 0):
    path = save_model(f"step_for_{m}", [
        helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("Loop", ["m", "yes", "y0"], ["y", "ys"], body=for_body),
        helper.make_node("Abs", ["ys"], ["ys_abs"])],
        [vi("y0", F, [4]), vi("x", F, [8, 4])], [vi("y", F, [4]), vi("ys_abs", F, [m, 4])],
        {"m": np.array(m, np.int64)})
    sums = (y0 + np.cumsum(x[:m], axis=0)).reshape(m, 4)
    check_step(f"a for loop of {m} iterations as a step", path, {"y0": y0, "x": x},
               {"y": sums[-1] if m else y0, "ys_abs": np.abs(sums * sums).astype(np.float32)})

# An error in a body run as a step names the node, the body and what was wrong: M = 9
# iterations over 8 rows.
path = save_model("step_for_9", [
    helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
    helper.make_node("Loop", ["m", "yes", "y0"], ["y", "ys"], body=for_body)],
    [vi("y0", F, [4]), vi("x", F, [8, 4])], [vi("y", F, [4]), vi("ys", F, [9, 4])],
    {"m": np.array(9, np.int64)})
for text in ("Loop giving 'y'", "index 8 is out of range"):
    expect_error(f"a for loop past its data as a step names '{text}'", path, {"y0": y0, "x": x},
                 text)

# Two Ifs on one run-time condition in parallel branches, each branch itself two parallel
# running sums (steps that do not split, large enough that the engine runs the steps of the
# model and of each branch one by one): a body run from inside a pushed step runs its steps
# on that thread instead of waiting for the workers.
def two_sums(name, axis_p, axis_q, combine):
    return helper.make_graph(
        [helper.make_node("CumSum", ["p", axis_p], ["pa"]),
         helper.make_node("CumSum", ["q", axis_q], ["qb"]),
         helper.make_node(combine, ["pa", "qb"], ["r"])], name, [], [vi("r", F, [256, 512])])


path = save_model("step_parallel", [
    helper.make_node("ReduceSum", ["p"], ["sp"], keepdims=0),
    helper.make_node("Greater", ["sp", "zero"], ["c"]),
    helper.make_node("If", ["c"], ["r1"], then_branch=two_sums("t1", "one", "nil", "Add"),
                     else_branch=two_sums("e1", "nil", "one", "Sub")),
    helper.make_node("If", ["c"], ["r2"], then_branch=two_sums("t2", "nil", "nil", "Mul"),
                     else_branch=two_sums("e2", "one", "one", "Add")),
    helper.make_node("Sub", ["r1", "r2"], ["y"])],
    [vi("p", F, [256, 512]), vi("q", F, [256, 512])], [vi("y", F, [256, 512])],
    {"zero": np.array(0, np.float32), "nil": np.array(0, np.int64),
     "one": np.array(1, np.int64)})
p = RNG.standard_normal((256, 512)).astype(np.float32) * 0.1
q = RNG.standard_normal((256, 512)).astype(np.float32) * 0.1
for sign in (1, -1):
    pp = np.abs(p) * sign
    cp = [np.cumsum(pp.astype(np.float64), axis=a) for a in (0, 1)]
    cq = [np.cumsum(q.astype(np.float64), axis=a) for a in (0, 1)]
    if sign > 0:
        want = (cp[1] + cq[0]) - cp[0] * cq[0]
    else:
        want = (cp[0] - cq[1]) - (cp[1] + cq[1])
    check_step(f"two Ifs in parallel branches, condition {sign > 0}", path, {"p": pp, "q": q},
               {"y": want.astype(np.float32)}, steps=2, pushed=True, rtol=1e-4, atol=1e-4)

# A run-time error in a step's body names the node and stops the run: a Loop with no M whose
# condition never turns false.
forever = helper.make_graph(
    [helper.make_node("Identity", ["c"], ["co"]), helper.make_node("Add", ["v", "v"], ["vo"])],
    "b", [vi("i", I64, []), vi("c", BOOL, []), vi("v", F, [2])],
    [vi("co", BOOL, []), vi("vo", F, [2])])
path = save_model("step_forever", [
    helper.make_node("Constant", [], ["yes"], value=numpy_helper.from_array(np.array(True))),
    helper.make_node("Loop", ["", "yes", "x"], ["y"], body=forever)],
    [vi("x", F, [2])], [vi("y", F, [2])])
expect_error("an endless Loop as a step stops at the bound", path, {"x": np.ones(2, np.float32)},
             "Loop giving 'y'", {"KILN_MAX_LOOP_ITERATIONS": "40"})
expect_error("an endless Loop as a step says why", path, {"x": np.ones(2, np.float32)},
             "still true after 40 iterations", {"KILN_MAX_LOOP_ITERATIONS": "40"})

# Control flow whose output sizes come from run-time values runs as a step too: the executor
# plans the steps after it from the sizes it came out with. A while loop's scan output (its
# length the trip count, zero included) feeds a Softmax and a ReduceSum; a temporary computed
# before the loop (x's running sums) is read after it, so the loop's run must not take its bytes.
WHILE_THEN_OPS = ([
    helper.make_node("CumSum", ["x", "axis0"], ["run"]),
    helper.make_node("ReduceSum", ["x"], ["s0"], keepdims=0),
    helper.make_node("Less", ["s0", "limit"], ["go"]),
    helper.make_node("Loop", ["", "go", "x"], ["y", "ys"], body=body_while),
    helper.make_node("Softmax", ["ys"], ["p"], axis=1),
    helper.make_node("ReduceSum", ["ys"], ["col"], axes=[0], keepdims=0),
    helper.make_node("Add", ["col", "run"], ["z"])],
    [vi("x", F, [3]), vi("limit", F, [])], [vi("p", F, None), vi("z", F, [3])],
    {"axis0": np.array(0, np.int64)}, 11)
path = save_model("step_while_then_ops", *WHILE_THEN_OPS)
x = np.array([0.5, 1.0, 1.5], np.float32)
for limit in (100.0, 0.5, 7.0, 1000.0, 0.5):  # 0.5: no iteration, ys of shape (0, 3)
    _, ys = while_ref(x, limit)
    e = np.exp(ys - ys.max(axis=1, keepdims=True)) if len(ys) else ys
    check_step(f"a while loop as a step, then ops on its output (limit {limit})", path,
               {"x": x, "limit": np.array(limit, np.float32)},
               {"p": (e / e.sum(axis=1, keepdims=True)).astype(np.float32) if len(ys) else ys,
                "z": (ys.sum(axis=0) + np.cumsum(x)).astype(np.float32)})

# An If whose branches give different shapes, then ops on its output: as a step, the shapes
# after it are the taken branch's.
path = save_model("step_if_then_ops", [
    helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
    helper.make_node("Greater", ["total", "zero"], ["c"]),
    helper.make_node("If", ["c"], ["r"], then_branch=then_g, else_branch=else_g),
    helper.make_node("Exp", ["r"], ["e"]),
    helper.make_node("ReduceSum", ["e"], ["y"], keepdims=0)],
    [vi("x", F, [2, 3])], [vi("e", F, None), vi("y", F, [])],
    {"k": np.array(3, np.float32), "zero": np.array(0, np.float32)}, opset=11)
for xv in (x_if, -x_if, x_if):
    r_ref = xv * 3 if xv.sum() > 0 else xv.sum(axis=1, keepdims=True)
    check_step(f"an If as a step, then ops on its output (sum {xv.sum():.2f})", path, {"x": xv},
               {"e": np.exp(r_ref), "y": np.array(np.exp(r_ref).sum(), np.float32)})

# The same two models placed on the CUDA backend (its emulator here): the nodes around the
# host_call run on the device, with copies to and from the host at its edges. An input that a
# device node reads first and the host_call after must not get a second, clashing host copy.
CUDA = {"KILN_CUDA_DEVICE": "emulator"}
for limit in (100.0, 0.5):
    _, ys = while_ref(x, limit)
    e = np.exp(ys - ys.max(axis=1, keepdims=True)) if len(ys) else ys
    check_step(f"a while loop as a step, then ops, on CUDA (limit {limit})",
               save_model("step_while_then_ops", *WHILE_THEN_OPS),
               {"x": x, "limit": np.array(limit, np.float32)},
               {"p": (e / e.sum(axis=1, keepdims=True)).astype(np.float32) if len(ys) else ys,
                "z": (ys.sum(axis=0) + np.cumsum(x)).astype(np.float32)},
               env=CUDA, extra=("--device", "cuda"))
for xv in (x_if, -x_if):
    r_ref = xv * 3 if xv.sum() > 0 else xv.sum(axis=1, keepdims=True)
    check_step(f"an If as a step, then ops, on CUDA (sum {xv.sum():.2f})", path, {"x": xv},
               {"e": np.exp(r_ref), "y": np.array(np.exp(r_ref).sum(), np.float32)},
               env=CUDA, extra=("--device", "cuda"))

# `kiln source` and `kiln compile` see such models as one module, their control flow a
# host_call node bound when the module loads; a model that runs in stages (a NonZero of a
# run-time tensor) has no one module and is refused naming why.
for cmd in ("source", "compile"):
    for model in ("step_scan", "step_while_then_ops"):
        r = subprocess.run([KILN, cmd, os.path.join(WORK, model + ".onnx")], capture_output=True,
                           text=True, timeout=300)
        want = ["host_call", "op_bind(ctx, \"kiln-host-call "] if cmd == "source" else ["key "]
        if r.returncode != 0 or any(w not in r.stdout for w in want):
            failures.append(f"kiln {cmd} of {model}: rc {r.returncode}, expected {want} in: "
                            + (r.stdout + r.stderr)[-600:])
    r = subprocess.run([KILN, cmd, save_model("staged_nonzero", [
        helper.make_node("NonZero", ["x"], ["i"])], [vi("x", F, [4])], [vi("i", I64, None)])],
        capture_output=True, text=True, timeout=300)
    if r.returncode == 0 or "NonZero of 'x'" not in r.stderr:
        failures.append(f"kiln {cmd} of a staged NonZero: expected a refusal naming it, got "
                        f"rc {r.returncode}: " + r.stderr[-400:])

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
