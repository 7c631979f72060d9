#!/usr/bin/env python3
"""ONNX sequences and optionals through `kiln run`, against NumPy list arithmetic.

kiln follows a sequence at load time (its elements are tensors of the graph), so each case
checks what that bookkeeping must get right: SplitToSequence with no split (keepdims 0 and
1), a scalar split leaving a shorter last part and a list of sizes; ConcatFromSequence along
an existing and a new (negative) axis; SequenceErase, SequenceInsert and SequenceAt at negative
positions, SequenceLength; a sequence given as a graph input element by element, at two
lengths (one model each) and through SequenceMap; a sequence output written element by
element; a Loop carrying a sequence (unrolled) with a scan output; an Optional built,
tested and unwrapped. Then the errors: a position outside the sequence, a Loop whose
condition is computed at run time, an empty optional unwrapped, a sequence of mixed element
types, an If on a run-time condition giving a sequence, each naming what was wrong.

usage: sequence_test.py KILN_BINARY WORKDIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kiln_cli  # noqa: E402

KILN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
RNG = np.random.default_rng(17)
F = TensorProto.FLOAT
failures = []


def seq_info(name, dims):
    return helper.make_tensor_sequence_value_info(name, F, dims)


def model(name, nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return kiln_cli.write_model(WORK, name, g, [("", opset)])


def ints(name, values):
    values = np.asarray(values, np.int64)
    return helper.make_tensor(name, TensorProto.INT64, values.shape, values.reshape(-1).tolist())


def expect(name, path, inputs, want):
    """Runs the model; `want` maps output file stems to arrays."""
    r, out = kiln_cli.run(KILN, path, inputs)
    if r.returncode != 0:
        failures.append(f"{name}: kiln run failed: {r.stderr.strip()[-600:]}")
        return
    for stem, ref in want.items():
        f = os.path.join(out, stem + ".npy")
        if not os.path.exists(f):
            failures.append(f"{name}: no output {stem}.npy (have {sorted(os.listdir(out))})")
            continue
        got = np.load(f)
        same = got.shape == ref.shape and got.dtype == ref.dtype and np.array_equal(
            got, ref, equal_nan=got.dtype.kind == "f") and np.array_equal(np.signbit(got),
                                                                          np.signbit(ref))
        if not same:
            failures.append(f"{name}: {stem} is {got.dtype}{got.shape} {got.ravel()[:6]}, "
                            f"expected {ref.dtype}{ref.shape} {ref.ravel()[:6]}")
    extra = set(os.listdir(out)) - {s + ".npy" for s in want}
    if extra:
        failures.append(f"{name}: unexpected outputs {sorted(extra)}")


def expect_error(name, path, inputs, *needles):
    r, _ = kiln_cli.run(KILN, path, inputs)
    if r.returncode == 0:
        failures.append(f"{name}: kiln run succeeded; expected an error naming {needles}")
        return
    for n in needles:
        if n not in r.stderr:
            failures.append(f"{name}: the error does not name {n!r}: {r.stderr.strip()[-400:]}")


x = RNG.standard_normal((5, 3)).astype(np.float32)
x[1, 2], x[3, 0] = -0.0, np.nan
y_info = helper.make_tensor_value_info("y", F, None)

# SplitToSequence, then ConcatFromSequence: each split and axis against NumPy.
for label, split, attrs, cat_attrs, ref in [
    ("ones_keepdims0_stack", None, {"keepdims": 0}, {"axis": -1, "new_axis": 1},
     np.stack(list(x), axis=-1)),
    ("ones_keepdims1_concat", None, {}, {"axis": 1}, np.concatenate(list(x[:, None, :]), 1)),
    ("scalar_split", ints("s", 2), {"axis": 0}, {"axis": 1},
     None),  # the last part is shorter: concatenated along axis 1 is a shape error
]:
    ins = ["x"] + (["s"] if split is not None else [])
    path = model("split_" + label,
                 [helper.make_node("SplitToSequence", ins, ["q"], **attrs),
                  helper.make_node("ConcatFromSequence", ["q"], ["y"], **cat_attrs)],
                 [helper.make_tensor_value_info("x", F, [5, 3])], [y_info],
                 [split] if split is not None else [])
    if ref is None:
        expect_error(label, path, {"x": x}, "ConcatFromSequence")
    else:
        expect(label, path, {"x": x}, {"y": ref.astype(np.float32)})

# A scalar split with a shorter last part, returned as a sequence output (one file per element).
path = model("split_out",
             [helper.make_node("SplitToSequence", ["x", "s"], ["parts"], axis=0)],
             [helper.make_tensor_value_info("x", F, [5, 3])], [seq_info("parts", None)],
             [ints("s", 2)])
expect("split_out", path, {"x": x},
       {"parts_0_": x[0:2], "parts_1_": x[2:4], "parts_2_": x[4:5]})

# Sizes along axis 1, as a sequence output.
path = model("split_sizes",
             [helper.make_node("SplitToSequence", ["x", "s"], ["parts"], axis=-1)],
             [helper.make_tensor_value_info("x", F, [5, 3])], [seq_info("parts", None)],
             [ints("s", [1, 2])])
expect("split_sizes", path, {"x": x}, {"parts_0_": x[:, :1], "parts_1_": x[:, 1:]})

# Erase at -2, insert at the front, read the last, count: list arithmetic.
t = RNG.standard_normal((3,)).astype(np.float32)
path = model("edit",
             [helper.make_node("SplitToSequence", ["x"], ["q0"], keepdims=0),
              helper.make_node("SequenceErase", ["q0", "m2"], ["q1"]),
              helper.make_node("SequenceInsert", ["q1", "t", "zero"], ["q2"]),
              helper.make_node("SequenceAt", ["q2", "m1"], ["last"]),
              helper.make_node("SequenceAt", ["q2", "zero"], ["first"]),
              helper.make_node("SequenceLength", ["q2"], ["n"]),
              helper.make_node("SequenceErase", ["q2"], ["q3"]),
              helper.make_node("ConcatFromSequence", ["q3"], ["rest"], axis=0, new_axis=1)],
             [helper.make_tensor_value_info("x", F, [5, 3]),
              helper.make_tensor_value_info("t", F, [3])],
             [helper.make_tensor_value_info(o, TensorProto.INT64 if o == "n" else F, None)
              for o in ["last", "first", "n", "rest"]],
             [ints("m2", -2), ints("m1", -1), ints("zero", 0)])
rows = list(x)
del rows[-2]
rows.insert(0, t)
expect("edit", path, {"x": x, "t": t},
       {"last": rows[-1], "first": rows[0], "n": np.array(len(rows), np.int64),
        "rest": np.stack(rows[:-1])})

# A sequence graph input (element by element), mapped and concatenated: lengths 1 and 3.
body = helper.make_graph([helper.make_node("Mul", ["e", "w"], ["o"])], "body",
                         [helper.make_tensor_value_info("e", F, ["n"]),
                          helper.make_tensor_value_info("w", F, ["n"])],
                         [helper.make_tensor_value_info("o", F, ["n"])])
path = model("map_in",
             [helper.make_node("SequenceMap", ["s", "w"], ["m"], body=body),
              helper.make_node("ConcatFromSequence", ["m"], ["y"], axis=0)],
             [seq_info("s", ["n"]), helper.make_tensor_value_info("w", F, [4])], [y_info])
w = RNG.standard_normal(4).astype(np.float32)
for count in (1, 3):
    elems = [RNG.standard_normal(4).astype(np.float32) for _ in range(count)]
    inputs = {f"s[{i}]": e for i, e in enumerate(elems)}
    inputs["w"] = w
    expect(f"map_in_{count}", path, inputs, {"y": np.concatenate([e * w for e in elems])})

# A Loop carrying a sequence (unrolled at load time), with a scan output.
loop_body = helper.make_graph(
    [helper.make_node("Identity", ["c_in"], ["c_out"]),
     helper.make_node("Cast", ["i"], ["fi"], to=F),
     helper.make_node("Mul", ["row", "fi"], ["scaled"]),
     helper.make_node("SequenceInsert", ["acc_in", "scaled"], ["acc_out"]),
     helper.make_node("Add", ["scaled", "one"], ["scan"])], "loop_body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
     seq_info("acc_in", None)],
    [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), seq_info("acc_out", None),
     helper.make_tensor_value_info("scan", F, None)])
path = model("loop_seq",
             [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
              helper.make_node("Loop", ["trip", "", "empty"], ["acc", "scans"], body=loop_body),
              helper.make_node("ConcatFromSequence", ["acc"], ["y"], axis=0, new_axis=1)],
             [helper.make_tensor_value_info("row", F, [3])],
             [y_info, helper.make_tensor_value_info("scans", F, None)],
             [ints("trip", 4), helper.make_tensor("one", F, [], [1.0])])
row = RNG.standard_normal(3).astype(np.float32)
stacked = np.stack([row * np.float32(i) for i in range(4)])
expect("loop_seq", path, {"row": row}, {"y": stacked, "scans": stacked + np.float32(1)})

# An Optional of a tensor: present, tested, unwrapped.
path = model("optional",
             [helper.make_node("Optional", ["row"], ["o"]),
              helper.make_node("OptionalHasElement", ["o"], ["has"]),
              helper.make_node("OptionalGetElement", ["o"], ["y"])],
             [helper.make_tensor_value_info("row", F, [3])],
             [y_info, helper.make_tensor_value_info("has", TensorProto.BOOL, None)], opset=15)
expect("optional", path, {"row": row}, {"y": row, "has": np.array(True)})

# Errors name what was wrong.
path = model("bad_position",
             [helper.make_node("SplitToSequence", ["x"], ["q"], keepdims=0),
              helper.make_node("SequenceAt", ["q", "p"], ["y"], name="pick")],
             [helper.make_tensor_value_info("x", F, [5, 3])], [y_info], [ints("p", 5)])
expect_error("bad_position", path, {"x": x}, "'pick'", "position 5", "5 elements")
cond_body = helper.make_graph(
    [helper.make_node("ReduceMax", ["row"], ["m"], keepdims=0),
     helper.make_node("Greater", ["m", "zero_f"], ["c_out"]),
     helper.make_node("SequenceInsert", ["acc_in", "row"], ["acc_out"])], "cond_body",
    [helper.make_tensor_value_info("i", TensorProto.INT64, []),
     helper.make_tensor_value_info("c_in", TensorProto.BOOL, []), seq_info("acc_in", None)],
    [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), seq_info("acc_out", None)])
path = model("runtime_cond",
             [helper.make_node("SequenceEmpty", [], ["empty"], dtype=F),
              helper.make_node("Loop", ["trip", "", "empty"], ["acc"], body=cond_body,
                               name="grow"),
              helper.make_node("ConcatFromSequence", ["acc"], ["y"], axis=0)],
             [helper.make_tensor_value_info("row", F, [3])], [y_info],
             [ints("trip", 4), helper.make_tensor("zero_f", F, [], [0.0])])
expect_error("runtime_cond", path, {"row": row}, "'grow'", "computed at run time",
             "unrolled")
none_type = helper.make_tensor_type_proto(F, [3])  # the type of what it would hold
path = model("empty_optional",
             [helper.make_node("Optional", [], ["o"], type=none_type),
              helper.make_node("OptionalGetElement", ["o"], ["y"], name="unwrap")],
             [helper.make_tensor_value_info("row", F, [3])], [y_info])
expect_error("empty_optional", path, {"row": row}, "'unwrap'", "'o' is empty")
path = model("mixed_types",
             [helper.make_node("Cast", ["row"], ["r64"], to=TensorProto.INT64),
              helper.make_node("SequenceConstruct", ["row", "r64"], ["q"], name="build"),
              helper.make_node("ConcatFromSequence", ["q"], ["y"], axis=0)],
             [helper.make_tensor_value_info("row", F, [3])], [y_info])
expect_error("mixed_types", path, {"row": row}, "'build'", "int64", "float32")

# An If whose condition is computed at run time cannot give a sequence: refused, naming it.
then_g = helper.make_graph([helper.make_node("SequenceConstruct", ["row"], ["s1"])], "then", [],
                           [seq_info("s1", None)])
else_g = helper.make_graph([helper.make_node("SequenceConstruct", ["row", "row"], ["s2"])],
                           "else", [], [seq_info("s2", None)])
path = model("runtime_if_seq",
             [helper.make_node("ReduceSum", ["row"], ["t"], keepdims=0),
              helper.make_node("Greater", ["t", "zero_f"], ["c"]),
              helper.make_node("If", ["c"], ["q"], then_branch=then_g, else_branch=else_g,
                               name="choose"),
              helper.make_node("ConcatFromSequence", ["q"], ["y"], axis=0)],
             [helper.make_tensor_value_info("row", F, [3])], [y_info],
             [helper.make_tensor("zero_f", F, [], [0.0])])
expect_error("runtime_if_seq", path, {"row": row}, "'choose'", "output 's1' is a sequence",
             "'c' is computed at run time")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("sequence_test: all cases passed")
