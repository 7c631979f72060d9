"""kiln.compile, kiln.source, kiln.cache, the graph builder and errors, against numpy."""
import os
import threading

import numpy as np
import pytest

import kiln
from kiln import graph as kg


def test_compile_a_model_file_matches_its_expected_output(examples):
    d = os.path.join(examples, "mlp")
    f = kiln.compile(os.path.join(d, "mlp.json"))
    x = np.load(os.path.join(d, "input.npy"))
    (y,) = f(x)
    np.testing.assert_allclose(np.asarray(y), np.load(os.path.join(d, "expected.npy")),
                               rtol=1e-5, atol=1e-6)
    (by_name,) = f(**{f.input_names[0]: x})
    np.testing.assert_array_equal(np.asarray(by_name), np.asarray(y))
    assert f.cache_status in ("miss", "hit", "memo")
    again = kiln.compile(os.path.join(d, "mlp.json"))
    assert again.cache_status in ("hit", "memo") and again.key == f.key


def test_graph_builder_against_numpy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((5, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    g = kg.Graph("mlp")
    x = g.input("x", "float32", [None, 5])
    h = kg.relu(x @ g.parameter(w, "w") + g.constant(b))
    g.set_outputs([kg.softmax(h), kg.sum(h, [1], keepdims=True), 1.0 - h / 2.0])
    f = kiln.compile(g)
    for n in (1, 4, 7):  # one module for every batch size
        a = rng.standard_normal((n, 5)).astype(np.float32)
        a[0, 0] = np.nan if n == 7 else a[0, 0]
        soft, total, lin = (np.asarray(t) for t in f(a))
        ref = np.maximum(a @ w + b, 0)
        e = np.exp(ref - ref.max(1, keepdims=True))
        np.testing.assert_allclose(soft, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total, ref.sum(1, keepdims=True), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(lin, 1.0 - ref / 2.0, rtol=1e-6)
    assert "kiln" in repr(g) and x.shape == (None, 5) and h.dtype == "float32"


def test_precision_bf16_rounds_the_weight_products():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((96, 40)).astype(np.float32)
    a = rng.standard_normal((5, 96)).astype(np.float32)
    g = kg.Graph("bf16")
    x = g.input("x", "float32", [5, 96])
    g.set_outputs([x @ g.parameter(w, "w")])

    def bf16(v):  # to nearest, ties to even (no NaN here)
        u = v.view(np.uint32).astype(np.uint64)
        return ((((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16) & 0xFFFFFFFF).astype(
            np.uint32).view(np.float32)

    want = bf16(a).astype(np.float64) @ bf16(w).astype(np.float64)
    (y,) = kiln.compile(g, precision="bf16")(a)
    np.testing.assert_allclose(np.asarray(y), want, rtol=1e-5, atol=1e-5)
    (y32,) = kiln.compile(g, precision="f32")(a)
    assert np.abs(np.asarray(y32) - want).max() > 1e-3  # float32 is another product
    assert "kiln_gemm_packed_bf16(" in kiln.source(g, precision="bf16")
    with pytest.raises(Exception, match="bf16"):
        kiln.compile(g, precision="bf12")


def test_apply_reaches_any_op_by_name():
    g = kg.Graph("t")
    x = g.input("x", "float32", [2, 3])
    g.set_outputs([kg.apply("transpose", [x], perm=[1, 0]), kg.apply("cumsum", [x], axis=1)])
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t, c = kiln.compile(g)(a)
    np.testing.assert_array_equal(np.asarray(t), a.T)
    np.testing.assert_array_equal(np.asarray(c), np.cumsum(a, 1))


def test_source_is_the_generated_c(examples):
    src = kiln.source(os.path.join(examples, "mlp", "mlp.json"))
    assert "kiln_thunk" in src or "void" in src
    g = kg.Graph("s")
    x = g.input("x", "float32", [4])
    g.set_outputs([kg.exp(x)])
    assert "exp" in kiln.source(g)


def test_errors_carry_kilns_message_and_hierarchy(tmp_path):
    g = kg.Graph("e")
    x = g.input("x", "float32", [2, 3])
    other = kg.Graph("other")
    with pytest.raises(kiln.UserError, match="matmul"):  # raised where it was made
        other.input("a", "float32", [2, 3]) @ other.input("w", "float32", [4, 5])
    with pytest.raises(kiln.UserError, match="unknown dtype 'float31'"):
        g.input("y", "float31", [1])
    g.set_outputs([kg.relu(x)])
    f = kiln.compile(g)
    with pytest.raises(kiln.UserError, match="input 'x'"):
        f(np.ones((2, 4), np.float32))
    with pytest.raises(kiln.UserError, match="cannot open|does not exist|no such"):
        kiln.compile(str(tmp_path / "missing.onnx"))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage")
    with pytest.raises(kiln.Error, match="bad.onnx"):
        kiln.compile(str(bad))
    assert issubclass(kiln.UnsupportedError, kiln.UserError)
    assert issubclass(kiln.UserError, kiln.Error) and issubclass(kiln.Error, RuntimeError)


def test_calls_release_the_gil():
    g = kg.Graph("big")
    x = g.input("x", "float32", [512, 512])
    y = x
    for _ in range(8):
        y = kg.tanh(y @ x)
    g.set_outputs([y])
    f = kiln.compile(g)
    a = np.full((512, 512), 0.001, np.float32)
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)

    t = threading.Thread(target=count)
    t.start()
    try:
        for _ in range(3):
            f(a)
    finally:
        stop.set()
        t.join()
    assert len(ticks) > 100  # the counting thread ran while kiln computed


def test_cache_functions(tmp_path):
    g = kg.Graph("c")
    x = g.input("x", "float32", [3])
    g.set_outputs([kg.sigmoid(x)])
    kiln.compile(g)(np.zeros(3, np.float32))
    s = kiln.cache.stats()
    assert s["entries"] >= 1 and s["bytes"] > 0
    rows = kiln.cache.ls()
    assert any(r["family"] != "kernel" for r in rows)
    v = kiln.cache.verify()
    assert v["bad"] == [] and v["good"] >= 1
    r = kiln.cache.gc(max_size=1 << 40)
    assert r["removed"] == 0
    assert kiln.cache.root() == os.environ["KILN_CACHE_DIR"]


def test_every_scalar_table_op_has_a_builder_that_builds_it():
    """kiln.graph's builders come from the scalar-op table: each entry has one, and it makes a
    node of that op (checked by running it against numpy for a few)."""
    from kiln._kiln import scalar_ops
    g = kg.Graph("table")
    x = g.input("x", "float32", [3])
    n = g.input("n", "int64", [3])  # the integer-only ops (shifts, unsigned orders) take these
    integer_only = {"shift_left", "shift_right", "minimum_u", "maximum_u", "mod_u"}
    made = {}
    for name, arity, params in scalar_ops():
        if name == "cast":
            made[name] = kg.cast(x, "int32")
            continue
        builder = getattr(kg, name, None)
        assert builder is not None, f"scalar op {name} has no builder in kiln.graph"
        assert name in kg.__all__
        flag = kg.gt(x, x)  # the boolean ops take booleans; where takes one condition
        if name.startswith("logical_"):
            ins = [flag] * arity
        elif name == "where":
            ins = [flag, x, x]
        elif name in integer_only:
            ins = [n] * arity
        else:
            ins = [x] * arity
        made[name] = builder(*ins)
    g.set_outputs([made["sinh"], made["leaky_relu"], made["clip"], made["fmod"],
                   made["shift_right"]])
    f = kiln.compile(g)
    a = np.array([-2.0, 0.5, 3.0], np.float32)
    b = np.array([-8, 5, 70], np.int64)  # a right shift by itself: logical, 0 past 63
    sinh, leaky, clip, fm, shifted = (np.asarray(t) for t in f(a, b))
    np.testing.assert_array_equal(shifted, [0, 0, 0])  # by -8 and by 70: 0; 5 >> 5 is 0
    g2 = kg.Graph("shift")
    m, by = g2.input("m", "int64", [3]), g2.input("by", "int64", [3])
    g2.set_outputs([kg.shift_right(m, by)])
    got = np.asarray(kiln.compile(g2)(np.array([-8, 1024, 7]), np.array([60, 3, 64]))[0])
    np.testing.assert_array_equal(got, [15, 128, 0])  # the bits as unsigned: (2^64 - 8) >> 60
    np.testing.assert_allclose(sinh, np.sinh(a), rtol=1e-6)
    np.testing.assert_allclose(leaky, np.where(a < 0, 0.01 * a, a), rtol=1e-6)
    np.testing.assert_array_equal(clip, a)  # clip(x, x, x) is x
    np.testing.assert_array_equal(fm, np.fmod(a, a))
    # Params by position or by name, checked.
    np.testing.assert_allclose(np.asarray(kiln.compile(_one(kg.leaky_relu, 0.2))(a)[0]),
                               np.where(a < 0, 0.2 * a, a), rtol=1e-6)
    with pytest.raises(TypeError):
        kg.leaky_relu(x, 0.2, alpha=0.3)
    with pytest.raises(TypeError):
        kg.elu(x, beta=1.0)


def _one(builder, *params):
    g = kg.Graph("one")
    x = g.input("x", "float32", [3])
    g.set_outputs([builder(x, *params)])
    return g


def _elman(g, steps, go_backwards=False):
    xs = g.input("xs", "float64", [steps, 2, 3])
    h0 = g.input("h0", "float64", [2, 4])
    wx = g.input("wx", "float64", [3, 4])
    wh = g.input("wh", "float64", [4, 4])
    states, outs = kg.scan(lambda t, x, h: [kg.tanh(x[0] @ wx + h[0] @ wh)] * 2,
                           sequences=[xs], outputs_info=[h0], go_backwards=go_backwards)
    return (xs, h0, wx, wh), states[0], outs[0]


def test_scan_is_the_recurrence_and_its_grad_is_bptt():
    rng = np.random.default_rng(3)
    vals = [rng.uniform(-1, 1, s) for s in [(5, 2, 3), (2, 4), (3, 4), (4, 4)]]
    for back in (False, True):
        g = kg.Graph("rnn")
        ins, last, seq = _elman(g, 5, back)
        g.set_outputs([last, seq])
        got_last, got_seq = (np.asarray(t) for t in kiln.compile(g)(*vals))
        h, ref = vals[1], []
        for t in (range(4, -1, -1) if back else range(5)):
            h = np.tanh(vals[0][t] @ vals[2] + h @ vals[3])
            ref.append(h)
        np.testing.assert_allclose(got_seq, np.stack(ref), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got_last, h, rtol=1e-12, atol=1e-12)

    # d sum(w * seq) / d (xs, h0, wx, wh) against central differences of the forward graph.
    weights = rng.uniform(-1, 1, (5, 2, 4))
    g = kg.Graph("rnn_fwd")
    ins, _, seq = _elman(g, 5)
    g.set_outputs([kg.sum(seq * g.constant(weights))])
    fwd = kiln.compile(g)
    g2 = kg.Graph("rnn_grad")
    ins2, _, seq2 = _elman(g2, 5)
    g2.set_outputs(kg.grad(kg.sum(seq2 * g2.constant(weights)), list(ins2)))
    grads = [np.asarray(t) for t in kiln.compile(g2)(*vals)]
    eps = 1e-6
    for i, v in enumerate(vals):
        for j in rng.choice(v.size, size=min(v.size, 6), replace=False):
            up = [x.copy() for x in vals]
            down = [x.copy() for x in vals]
            up[i].flat[j] += eps
            down[i].flat[j] -= eps
            fd = (float(np.asarray(fwd(*up)[0])) - float(np.asarray(fwd(*down)[0]))) / (2 * eps)
            assert abs(grads[i].flat[j] - fd) <= 1e-6 * max(1.0, abs(fd)), (i, j, fd)


def test_cond_selects_at_run_time_and_prunes_a_known_branch():
    g = kg.Graph("cond")
    x = g.input("x", "float32", [3])
    p = g.input("p", "float32", [])
    (y,) = kg.cond(kg.gt(p, g.constant(np.float32(0))), lambda: x * 3.0, lambda: [x - 1.0])
    g.set_outputs([y])
    f = kiln.compile(g)
    xv = np.array([1, -2, 0.5], np.float32)
    np.testing.assert_array_equal(np.asarray(f(xv, np.float32(2))[0]), xv * 3)
    np.testing.assert_array_equal(np.asarray(f(xv, np.float32(-2))[0]), xv - 1)
    with pytest.raises(kiln.Error, match="returned a str"):
        kg.cond(kg.gt(p, g.constant(np.float32(0))), lambda: "x", lambda: x)


def test_sequences_and_optionals_go_in_as_lists_and_none(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    F = TensorProto.FLOAT
    seq = helper.make_tensor_sequence_value_info
    g = helper.make_graph(
        [helper.make_node("SequenceInsert", ["s", "t"], ["q"]),
         helper.make_node("ConcatFromSequence", ["q"], ["y"], axis=0),
         helper.make_node("OptionalHasElement", ["o"], ["has"])], "seq",
        [seq("s", F, ["n"]), helper.make_tensor_value_info("t", F, [2]),
         helper.make_value_info("o", helper.make_optional_type_proto(
             helper.make_tensor_type_proto(F, [2])))],
        [seq("q", F, None), helper.make_tensor_value_info("y", F, None),
         helper.make_tensor_value_info("has", TensorProto.BOOL, [])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path = str(tmp_path / "seq.onnx")
    onnx.save(m, path)
    f = kiln.compile(path)
    a, b = np.array([1, 2, 3], np.float32), np.array([4], np.float32)
    t = np.array([5, 6], np.float32)
    q, y, has = f([a, b], t, None)
    assert isinstance(q, list) and len(q) == 3
    np.testing.assert_array_equal(np.asarray(q[2]), t)
    np.testing.assert_array_equal(np.asarray(y), np.concatenate([a, b, t]))
    assert not bool(np.asarray(has))
    q, y, has = f([], t, t)  # an empty sequence, a present optional: another model
    assert len(q) == 1 and bool(np.asarray(has))
    np.testing.assert_array_equal(np.asarray(y), t)
    with pytest.raises(kiln.UserError, match="input 't' is a tensor, given a list"):
        f([a], [t], None)
    with pytest.raises(kiln.UserError, match="input 't' is a tensor, given None"):
        f([a], None, None)
