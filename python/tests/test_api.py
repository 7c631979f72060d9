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
