"""Autodiff and training from Python: kiln.graph.grad against PyTorch autograd, and a
Trainer whose steps match torch.optim and update the numpy arrays in place."""
import numpy as np
import pytest
import torch

import kiln
from kiln import graph as kg
from kiln import train


def test_grad_matches_torch_autograd_with_broadcasting():
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 3)).astype(np.float64)
    wv = rng.standard_normal((3, 5)).astype(np.float64)
    bv = rng.standard_normal((5,)).astype(np.float64)
    g = kg.Graph("g")
    x, w, b = g.input("x", "float64", [4, 3]), g.input("w", "float64", [3, 5]), g.input("b", "float64", [5])
    cost = kg.sum(kg.log_softmax(kg.tanh(x @ w + b)) * kg.sigmoid(x @ w))
    gx, gw, gb = kg.grad(cost, [x, w, b])
    g.set_outputs([cost, gx, gw, gb])
    out = kiln.compile(g)(xv, wv, bv)
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (xv, wv, bv))
    tc = (torch.log_softmax(torch.tanh(tx @ tw + tb), -1) * torch.sigmoid(tx @ tw)).sum()
    tc.backward()
    for got, want in zip(out[1:], (tx.grad, tw.grad, tb.grad)):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-12, atol=1e-12)


def test_grad_through_an_integer_path_names_the_node():
    g = kg.Graph("g")
    x = g.input("x", "float32", [4])
    c = kg.sum(kg.cast(kg.apply("arg_max", [x], axis=0), "float32"))
    with pytest.raises(kiln.UserError, match="without a gradient"):
        kg.grad(c, [x])


@pytest.mark.parametrize("spec,make", [
    ("sgd:lr=0.1,momentum=0.9", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("adam:lr=0.01", lambda p: torch.optim.Adam(p, lr=0.01)),
])
def test_trainer_steps_match_torch_optim_in_place(spec, make):
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((3, 2)).astype(np.float64)
    xs = rng.standard_normal((8, 3)).astype(np.float64)
    ys = rng.standard_normal((8, 2)).astype(np.float64)
    g = kg.Graph("lin")
    x, y, w = g.input("x", "float64", [8, 3]), g.input("y", "float64", [8, 2]), g.input("w", "float64", [3, 2])
    d = x @ w - y
    t = train.Trainer(g, kg.mean(d * d), {w: w0}, spec)
    tw = torch.tensor(w0, requires_grad=True)
    opt = make([tw])
    held = t.parameter("w")
    for _ in range(5):
        loss = t.step(x=xs, y=ys)
        opt.zero_grad()
        tl = ((torch.tensor(xs) @ tw - torch.tensor(ys)) ** 2).mean()
        tl.backward()
        opt.step()
        assert loss == pytest.approx(tl.item(), rel=1e-12)
    np.testing.assert_allclose(held, tw.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert t.parameter("w") is held  # the same array, updated in place
