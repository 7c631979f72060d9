"""CUDA tensors through kiln's CUDA backend: DLPack device pointers in and out, runs on the
caller's stream, and torch.compile graphs of device tensors compiled with device inputs and
outputs. Without a GPU the backend runs on kiln's emulator, where CPU tensors stand in for
device memory (conftest picks it); on a GPU the same tests use CUDA tensors."""
import os

import numpy as np
import pytest
import torch

import kiln
from kiln import _kiln
from kiln import graph as kg
from kiln import torch_backend as tb

GPU = torch.cuda.is_available() and not _kiln.cuda_emulated()
DEVICE = "cuda" if GPU else "cpu"  # where the tests' PyTorch tensors live
# On the emulator the backend is asked for kiln's CUDA backend; CUDA tensors go there anyway.
OPTIONS = {} if GPU else {"device": "cuda"}


def nasty(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    flat[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
    return x


def test_device_io_functions_take_and_give_device_tensors():
    g = kg.Graph("cuda_io_scale")
    x = g.input("x", "float32", [3, 37])  # past a warp and a vector width
    g.set_outputs([x * 2.0 + 1.0, x * 2.0])
    f = kiln.compile(g, device="cuda", device_io=True)
    assert f.device_io
    a = nasty((3, 37), 1).to(DEVICE)
    y, z = f(a)
    assert y.__dlpack_device__() == ((2, 0) if GPU else (1, 0))
    got = torch.from_dlpack(y)
    assert got.device.type == DEVICE
    torch.testing.assert_close(got, a * 2.0 + 1.0, equal_nan=True)
    doubled = torch.from_dlpack(z)
    torch.testing.assert_close(doubled, a * 2.0, equal_nan=True)
    assert torch.signbit(doubled[0, 3]).item(), "-0.0 stays negative"
    # A device result fed to a function on the host is refused by name, not read as host memory.
    with pytest.raises(kiln.UserError, match="input 'x': expected a host tensor, got a device"):
        kiln.compile(g)(z)
    with pytest.raises(kiln.UserError, match="device_io=True needs a device"):
        kiln.compile(g, device_io=True)


def test_a_run_goes_on_the_callers_stream():
    g = kg.Graph("cuda_on_stream")
    x = g.input("x", "float32", [64, 65])
    g.set_outputs([kg.softmax(x, -1)])
    f = kiln.compile(g, device="cuda", device_io=True)
    a = torch.randn(64, 65, device=DEVICE)
    want = torch.softmax(a, -1)
    if GPU:
        # A large product PyTorch enqueues on its stream writes the input: kiln's run on that
        # stream reads it only after, with no host wait in between.
        s = torch.cuda.Stream()
        big = torch.randn(4096, 4096, device="cuda")
        with torch.cuda.stream(s):
            for _ in range(4):
                big = big @ big / 64.0
            b = a + big[:64, :65] * 0.0
            (y,) = f.run([b], stream=s.cuda_stream)
        s.synchronize()
        torch.testing.assert_close(torch.from_dlpack(y), want)
        return
    s = kiln.cuda_stream()
    before = s.launches
    (y,) = f.run([a], stream=s.handle)
    assert s.launches > before, "the run's kernels went onto the caller's stream"
    torch.testing.assert_close(torch.from_dlpack(y), want)
    after = s.launches
    (y2,) = f(a)  # without a stream: kiln's own
    assert s.launches == after
    torch.testing.assert_close(torch.from_dlpack(y2), want)
    with pytest.raises(kiln.UserError, match="0x3039 is not a live stream of the emulator"):
        f.run([a], stream=0x3039)
    with pytest.raises(kiln.UserError, match="runs on the CPU"):
        kiln.compile(g).run([a], stream=s.handle)


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


def test_torch_compile_runs_device_graphs_on_kilns_cuda_backend():
    torch.manual_seed(0)
    m = SmallCnn().eval().to(DEVICE)
    with torch.no_grad():
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
        x = torch.randn(2, 3, 9, 11, device=DEVICE)
        c = torch.compile(m, backend="kiln", options=OPTIONS)
        y = c(x)
        report = tb.REPORTS[-1]
        assert report["device"] == "cuda device_io"
        assert report["kiln_graphs"] == 1 and report["pytorch_ops"] == []
        assert report["frozen"] > 0, "weights enter as kiln weights on the device path too"
        assert y.device.type == DEVICE
        torch.testing.assert_close(y, m(x), rtol=1e-4, atol=1e-5)
        sub = report["subgraphs"][0]()
        assert os.path.exists(os.path.join(os.path.dirname(sub.fn.source_path), "kernels.cu"))
        # A weight changed in place is prepared again (uploaded anew), never used stale.
        m.conv.weight.mul_(-2.0)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-5)


class AttentionBlock(torch.nn.Module):
    def __init__(self, width=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.norm(x + self.out(a.transpose(1, 2).reshape(b, n, w)))


def test_torch_compile_dynamic_shapes_on_the_cuda_backend():
    torch.manual_seed(1)
    layer = AttentionBlock().eval().to(DEVICE)
    with torch.no_grad():
        c = torch.compile(layer, backend="kiln", options=OPTIONS, dynamic=True)
        seen = None
        for n in (3, 5, 9):
            x = torch.randn(2, n, 16, device=DEVICE)
            torch.testing.assert_close(c(x), layer(x), rtol=1e-4, atol=1e-5)
            if seen is None:
                seen = len(tb.REPORTS)
                report = tb.REPORTS[-1]
                assert report["dynamic"] and report["device"] == "cuda device_io"
                assert report["kiln_graphs"] == 1 and report["pytorch_ops"] == []
        assert len(tb.REPORTS) == seen, "one kiln module served every length"


def test_the_backend_names_a_bad_option():
    m = torch.nn.Linear(3, 2)
    with pytest.raises(Exception, match="unknown options \\['devices'\\]"):
        torch.compile(m, backend="kiln", options={"devices": "cuda"})(torch.randn(1, 3))
    with pytest.raises(Exception, match="device must be 'cpu' or 'cuda', got 'tpu'"):
        torch.compile(m, backend="kiln", options={"device": "tpu"})(torch.randn(1, 3))
