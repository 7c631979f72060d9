"""torch.compile(backend="kiln"): every ATen op kiln lowers against eager PyTorch, real
models end to end, and models with ops kiln lacks (partitioned, still correct)."""
import warnings

import pytest
import torch
import torch.nn.functional as F
import torchvision

import kiln  # registers the backend
from kiln import torch_backend

torch.backends.mha.set_fastpath_enabled(False)  # the fused MHA kernel hides the graph


def nasty(*shape, seed=0):
    """Values that break kernels: NaN, infinities, signed zeros and ties among normal ones."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    flat = x.view(-1)
    for i, v in enumerate([float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 0.5, -0.5]):
        if 3 * i + 1 < flat.numel():
            flat[3 * i + 1] = v
    return x


def check(fn, *inputs, rtol=1e-5, atol=1e-6, **kw):
    torch._dynamo.reset()
    with torch.no_grad():
        want = fn(*inputs)
        got = torch.compile(fn, backend="kiln", dynamic=False)(*inputs)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True, **kw)


x34 = nasty(3, 4)
pos = nasty(3, 4).abs() + 0.1
CASES = {
    "add": (lambda a, b: a + b * 2 - 1.5, (x34, nasty(4, seed=1))),
    "sub_alpha": (lambda a, b: torch.sub(a, b, alpha=3), (x34, nasty(3, 1, seed=2))),
    "mul_div": (lambda a, b: a * b / (b.abs() + 1), (x34, nasty(3, 4, seed=3))),
    "pow": (lambda a: a ** 2 + torch.pow(a.abs(), 0.5), (x34,)),
    "max_min": (lambda a, b: torch.maximum(a, b) - torch.minimum(a, b), (x34, nasty(3, 4, seed=4))),
    "compare": (lambda a, b: torch.where(a > b, a, b) + (a <= b).float() + (a == a).float()
                + (a != b).float() + (a >= 0).float() + (a < 0).float() + (a <= 0.5).float(), (x34, nasty(3, 4, seed=5))),
    "unary": (lambda a: torch.relu(a) + torch.tanh(a) + torch.sigmoid(a) + torch.erf(a)
              + torch.neg(a) + torch.abs(a) + torch.floor(a) + torch.ceil(a), (x34,)),
    "transcendental": (lambda a: torch.exp(a.clamp(-5, 5)) + torch.log(a) + torch.sqrt(a)
                       + torch.rsqrt(a) + torch.reciprocal(a) + torch.log1p(a) + torch.expm1(a.clamp(-5, 5)),
                       (pos,)),
    "trig": (lambda a: torch.sin(a) + torch.cos(a), (x34,)),
    # Exact GELU apart: eager PyTorch gives NaN at +inf where the limit (kiln's answer) is inf.
    "gelu": (lambda a: F.gelu(a), (torch.nan_to_num(x34, posinf=40.0, neginf=-40.0),)),
    "activations": (lambda a: F.gelu(a, approximate="tanh") + F.silu(a)
                    + F.hardtanh(a) + F.relu6(a) + F.hardswish(a) + F.hardsigmoid(a), (x34,)),
    "logical_not": (lambda a: torch.logical_not(a > 0).float(), (x34,)),
    "views": (lambda a: a.view(4, 3).permute(1, 0).reshape(12).unsqueeze(0).expand(2, 12)
              .squeeze(0).clone(), (x34,)),
    "cat_slice_select": (lambda a: torch.cat([a[:, 1:3], a[1:, ::2].sum(0, keepdim=True).expand(3, 2)], 1)
                         + a.select(1, 2).unsqueeze(1), (x34,)),
    "to_copy": (lambda a: (a > 0).to(torch.float32) + a.to(torch.float64).to(torch.float32), (x34,)),
    "matmuls": (lambda a, b, c: a @ b + torch.bmm(c, c.transpose(1, 2)).sum(0)[:3, :3].sum(),
                (nasty(3, 5), nasty(5, 3, seed=1), nasty(2, 3, 4, seed=2))),
    "matmul_3d": (lambda c, w: c @ w, (nasty(2, 3, 4), nasty(4, 5, seed=1))),
    "linear": (lambda a, w, b: F.linear(a, w, b), (nasty(6, 5), nasty(4, 5, seed=1), nasty(4, seed=2))),
    "reductions": (lambda a: a.mean(1) + a.sum(1) + a.amax(1) + a.amin(1) + a.mean() + a.sum(), (torch.randn(3, 4),)),
    "softmax": (lambda a: F.softmax(a, -1) + F.log_softmax(a, 0), (torch.randn(3, 4),)),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (4,), w, b, 1e-5), (torch.randn(3, 4), torch.randn(4), torch.randn(4))),
    "embedding": (lambda i, w: F.embedding(i, w), (torch.tensor([[0, 2], [4, 1]]), torch.randn(5, 3))),
    "pad": (lambda a: F.pad(a, (1, 2, 0, 1), value=0.5), (torch.randn(2, 3, 4),)),
    "conv": (lambda a, w, b: F.conv2d(a, w, b, stride=2, padding=1) + F.conv2d(a, w, None, dilation=2).mean(),
             (torch.randn(2, 3, 9, 9), torch.randn(4, 3, 3, 3), torch.randn(4))),
    "depthwise_conv": (lambda a, w: F.conv2d(a, w, padding=1, groups=3), (torch.randn(1, 3, 7, 7), torch.randn(3, 1, 3, 3))),
    "batch_norm": (lambda a, m, v, w, b: F.batch_norm(a, m, v, w, b, False, 0.1, 1e-5),
                   (torch.randn(2, 3, 4, 4), torch.randn(3), torch.rand(3) + 0.5, torch.randn(3), torch.randn(3))),
    "pools": (lambda a: F.max_pool2d(a, 3, 2, 1) .sum() + F.avg_pool2d(a, 2)
              .sum() + F.adaptive_avg_pool2d(a, 1).sum() + F.avg_pool2d(a, 3, 2, 1, count_include_pad=False).sum()
              + F.adaptive_avg_pool2d(a, 4).sum(), (torch.randn(2, 3, 8, 8),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_eager(name):
    fn, inputs = CASES[name]
    check(fn, *inputs, rtol=1e-4, atol=1e-5)


def test_every_lowering_ran():
    for name in sorted(CASES):  # in case this test runs alone
        fn, inputs = CASES[name]
        check(fn, *inputs, rtol=1e-4, atol=1e-5)
    # Overloads the cases cannot produce through dynamo's decompositions.
    unreachable = {torch.ops.aten.add.Scalar, torch.ops.aten.sub.Scalar, torch.ops.aten.mul.Scalar,
                   torch.ops.aten.div.Scalar, torch.ops.aten.pow.Tensor_Tensor,
                   torch.ops.aten.alias.default, torch.ops.aten.detach.default,
                   torch.ops.aten.matmul.default, torch.ops.aten.reshape.default,
                   torch.ops.aten._unsafe_view.default, torch.ops.aten.sum.default,
                   torch.ops.aten.squeeze.dim, torch.ops.aten.gt.Tensor,
                   torch.ops.aten.lt.Tensor, torch.ops.aten.ge.Tensor, torch.ops.aten.le.Tensor,
                   torch.ops.aten.eq.Scalar, torch.ops.aten.ne.Scalar, torch.ops.aten.clamp.default,
                   torch.ops.aten.silu.default, torch.ops.aten.hardswish.default,
                   torch.ops.aten.hardsigmoid.default, torch.ops.aten.gelu.default}
    missing = set(torch_backend.LOWERINGS) - torch_backend.LOWERED - unreachable
    assert not missing, f"lowerings no test exercised: {sorted(map(str, missing))}"


def seeded(model):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    for m in model.modules():  # batch norms that are not the identity
        if isinstance(m, torch.nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
    return model.eval()


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_torchvision_models_match_eager(name):
    torch.manual_seed(0)
    model = seeded(getattr(torchvision.models, name)())
    x = torch.randn(2, 3, 64, 64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every op lowered: no fallback warning
        with torch.no_grad():
            scale = float(model(x).abs().max())
        check(model, x, rtol=1e-3, atol=1e-3 * scale)


def test_transformer_encoder_matches_eager():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 10, 32)
    check(model, x, rtol=1e-4, atol=1e-4)


def test_unsupported_ops_run_in_pytorch_with_one_warning():
    def fn(a):
        return torch.cumsum(torch.relu(a), 1).sort(1).values * 2  # sort: not kiln's

    a = torch.randn(3, 5)
    with pytest.warns(UserWarning, match="these ops run in PyTorch: .*sort"):
        check(fn, a)


def test_training_graphs_compile_and_keep_gradients():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 6)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln")
    loss = compiled(x).square().sum()
    loss.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).square().sum().backward()
    for g, w in zip(grads, (p.grad for p in model.parameters())):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_dynamic_shapes_fall_back_cleanly():
    torch._dynamo.reset()
    fn = torch.compile(lambda a: torch.relu(a) * 2, backend="kiln", dynamic=True)
    for n in (3, 5, 8):
        a = torch.randn(n, 4)
        torch.testing.assert_close(fn(a), torch.relu(a) * 2)


def test_entry_point_names_the_backend():
    from importlib.metadata import entry_points
    names = {e.name: e.value for e in entry_points(group="torch_dynamo_backends")}
    assert names.get("kiln") == "kiln.torch_backend:kiln_backend"
