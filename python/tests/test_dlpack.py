"""Arrays in and out of kiln share memory: numpy <-> kiln <-> PyTorch, views included, each
DLPack deleter called exactly once."""
import gc
import json
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln import _kiln
from kiln import graph as kg


def doubled(shape, dtype="float32"):
    g = kg.Graph("double")
    x = g.input("x", dtype, shape)
    g.set_outputs([x * 2.0])
    return kiln.compile(g)


@pytest.mark.parametrize("view", ["plain", "transposed", "offset", "strided", "reversed",
                                  "broadcast"])
def test_numpy_views_enter_without_a_copy(view):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    a = {"plain": base, "transposed": base.T, "offset": base[2:5, 3:],
         "strided": base[1::2, ::3], "reversed": base[::-1, ::-2],
         "broadcast": np.broadcast_to(base[0], (4, 10))}[view]
    t = kiln.as_tensor(a)
    back = np.asarray(t)
    assert back.shape == a.shape
    np.testing.assert_array_equal(back, a)
    assert np.shares_memory(back, base)  # the same bytes, no copy on either side
    (y,) = doubled(list(a.shape))(a)
    np.testing.assert_array_equal(np.asarray(y), a * 2)


def test_torch_views_enter_without_a_copy_and_results_share_memory():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    a = base.t()[1:, ::2]  # transposed, offset, strided
    t = kiln.as_tensor(a)
    shared = torch.from_dlpack(t)
    assert shared.data_ptr() == a.data_ptr() and shared.stride() == a.stride()
    (y,) = doubled(list(a.shape))(a)
    ty, ny = torch.from_dlpack(y), np.asarray(y)
    torch.testing.assert_close(ty, a * 2)
    ty[0, 0] = -7.0  # one buffer behind all three views
    assert ny[0, 0] == -7.0 and np.asarray(y)[0, 0] == -7.0


def test_strides_are_always_filled_and_both_capsule_kinds_work():
    (y,) = doubled([2, 3])(np.ones((2, 3), np.float32))
    assert y.strides == (3, 1)
    legacy = torch.utils.dlpack.from_dlpack(y.__dlpack__())
    versioned = torch.from_dlpack(y)
    assert legacy.stride() == (3, 1) and versioned.stride() == (3, 1)
    assert y.__dlpack_device__() == (1, 0)


def test_every_export_deleter_runs_exactly_once():
    gc.collect()
    start = _kiln._live_exports()
    (y,) = doubled([3])(np.ones(3, np.float32))
    unused = y.__dlpack__()  # never consumed: the capsule's destructor deletes it
    consumed = torch.from_dlpack(y)  # consumed: torch calls the deleter when done
    viewed = np.asarray(y)
    assert _kiln._live_exports() >= start + 2
    del unused, consumed, viewed, y
    gc.collect()
    assert _kiln._live_exports() == start  # none leaked; a double free would crash here


def test_producers_memory_is_released_once_kiln_is_done():
    f = doubled([5])
    a = torch.ones(5)
    arr = np.ones(5, np.float32)
    before_t, before_a = sys.getrefcount(a), sys.getrefcount(arr)
    for _ in range(3):
        (y,) = f(a)
        (z,) = f(arr)
        del y, z
    gc.collect()
    # The DLPack capsule and buffer views kiln took are all released (a leak keeps a ref).
    assert sys.getrefcount(a) == before_t and sys.getrefcount(arr) == before_a


def test_read_only_inputs_and_outputs():
    a = np.arange(4, dtype=np.float32)
    a.setflags(write=False)
    (y,) = doubled([4])(a)  # kiln never writes its inputs
    np.testing.assert_array_equal(np.asarray(y), a * 2)
    y.set_read_only()
    assert y.read_only
    with pytest.raises(BufferError):
        y.__dlpack__()  # a legacy capsule cannot say read-only
    capsule = y.__dlpack__(max_version=(1, 0))
    del capsule
    if tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 1):
        assert not np.from_dlpack(y).flags.writeable


def test_dtypes_round_trip():
    for dtype, np_dtype in [("float64", np.float64), ("int64", np.int64), ("int32", np.int32),
                            ("uint8", np.uint8), ("bool", np.bool_), ("float16", np.float16)]:
        a = (np.arange(6) % 3).astype(np_dtype).reshape(2, 3)
        t = kiln.as_tensor(a)
        assert t.dtype == dtype
        np.testing.assert_array_equal(np.asarray(t), a)


def test_unsupported_inputs_are_clear_errors():
    with pytest.raises(kiln.UserError, match=r"expected an array \(numpy, a PyTorch tensor"):
        kiln.as_tensor("not an array")
    with pytest.raises(kiln.UserError, match="no kiln dtype"):
        kiln.as_tensor(np.ones(3, np.complex64))


def test_outputs_are_the_callers_never_an_input_or_a_weight(tmp_path):
    # A graph whose outputs are a weight, an input and one value twice: writing to any
    # output must leave the caller's input, the model's weight and the other outputs alone.
    np.save(tmp_path / "w.npy", np.array([1, 2, 3, 4], np.float32))
    (tmp_path / "m.json").write_text(json.dumps({
        "format": "kiln-graph", "version": 1, "name": "alias",
        "inputs": [{"name": "x", "dtype": "float32", "shape": [4]}],
        "parameters": [{"name": "w", "file": "w.npy"}],
        "nodes": [{"op": "relu", "inputs": ["x"], "outputs": ["y"]}],
        "outputs": ["w", "x", "y", "y"]}))
    f = kiln.compile(str(tmp_path / "m.json"))
    x = np.array([-1, 2, -3, 4], np.float32)
    outs = [np.from_dlpack(o) for o in f(x)]
    for k, o in enumerate(outs):
        o[0] = 100 + k
    assert x.tolist() == [-1, 2, -3, 4]
    assert outs[3][0] == 103 and outs[2][0] == 102
    assert np.from_dlpack(f(x)[0]).tolist() == [1, 2, 3, 4]
