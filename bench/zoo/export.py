#!/usr/bin/env python3
"""Exports the model zoo that kiln's compile and run benchmarks measure: real architectures
from torchvision plus a ViT and a GPT-style decoder, with seeded random weights, as ONNX files
(opset 17, fixed shapes) in bench/data/zoo/ (or OUT).

Needs PyTorch and torchvision (PyPI), which kiln itself does not: keep them in a virtual
environment outside the checkout, e.g.
    bash scripts/setup    # PyTorch in ~/.cache/kiln-python ($KILN_TORCH_VENV)
    ~/.cache/kiln-python/bin/python bench/zoo/export.py

Each model is written as NAME.onnx with NAME.input.npy (a seeded input) and
NAME.expected.npy (PyTorch's output for it), so a runner can cross-check without torch.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torchvision


class DecoderBlock(nn.Module):
    """Pre-norm GPT block: causal self-attention and a GELU MLP, both residual."""

    def __init__(self, d, heads, t):
        super().__init__()
        # The causal mask as a constant (exported as an initializer, as deployment exports
        # precompute it), not a Trilu computed per call.
        self.register_buffer("mask", torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1))
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.reshape(b, t, h, d // h).transpose(1, 2)
        k = k.reshape(b, t, h, d // h).transpose(1, 2)
        v = v.reshape(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(self.mask[:t, :t], float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab=1000, d=256, heads=4, layers=4, t=128):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, t, d) * 0.02)
        self.blocks = nn.Sequential(*[DecoderBlock(d, heads, t) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, ids):
        x = self.tok(ids) + self.pos[:, : ids.shape[1]]
        return self.head(self.ln(self.blocks(x)))


class Recurrent(nn.Module):
    """A sequence classifier: two bidirectional recurrent layers (LSTM or GRU) and a
    per-step linear head, batch first."""

    def __init__(self, cell, features=32, hidden=64):
        super().__init__()
        self.rnn = cell(features, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, 10)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y)


class Masked(nn.Module):
    """Keeps the tokens whose gate score is positive and classifies them, as detection and
    routing heads do (x[mask]: NonZero and GatherND in the export, a count known only when
    the model runs)."""

    def __init__(self, features=32, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.GELU(),
                                  nn.Linear(hidden, hidden))
        self.gate = nn.Linear(hidden, 1)
        self.head = nn.Linear(hidden, 10)

    def forward(self, x):
        h = self.body(x)
        return self.head(h[self.gate(h).squeeze(-1) > 0])


def vit_small():
    # A ViT-S/16-like encoder at 224x224 (torchvision's VisionTransformer, smaller widths).
    return torchvision.models.VisionTransformer(
        image_size=224, patch_size=16, num_layers=6, num_heads=6, hidden_dim=384, mlp_dim=1536,
        num_classes=1000)


def image(batch):
    return lambda: torch.randn(batch, 3, 224, 224)


# name -> (constructor, input maker, input name)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(), image(1), "input"),
    "resnet18_b8": (lambda: torchvision.models.resnet18(), image(8), "input"),
    "resnet34": (lambda: torchvision.models.resnet34(), image(1), "input"),
    "mobilenet_v2": (lambda: torchvision.models.mobilenet_v2(), image(1), "input"),
    "efficientnet_b0": (lambda: torchvision.models.efficientnet_b0(), image(1), "input"),
    "shufflenet_v2": (lambda: torchvision.models.shufflenet_v2_x1_0(), image(1), "input"),
    "squeezenet": (lambda: torchvision.models.squeezenet1_1(), image(1), "input"),
    "mnasnet": (lambda: torchvision.models.mnasnet1_0(), image(1), "input"),
    "vit_small": (vit_small, image(1), "input"),
    "gpt_decoder": (lambda: Gpt(), lambda: torch.randint(0, 1000, (1, 128)), "ids"),
    "lstm": (lambda: Recurrent(nn.LSTM), lambda: torch.randn(1, 50, 32), "x"),
    "gru": (lambda: Recurrent(nn.GRU), lambda: torch.randn(1, 50, 32), "x"),
    "masked": (lambda: Masked(), lambda: torch.randn(1, 50, 32), "x"),
}
# The speed comparison (run.py) covers these; the sequence and masked models are checked for
# dynamic axes (dynamic.py) and timed only when named.
ZOO = [name for name in MODELS if name not in ("lstm", "gru", "masked")]


def randomize_batchnorm(model, gen):
    # Fresh batch norms are the identity; real ones are not, and folding them must be right.
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            with torch.no_grad():
                m.running_mean.copy_(torch.randn(m.num_features, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=gen) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=gen) * 0.1)


def randomize_zero_layers(model, gen):
    # torchvision zero-initialises some layers (the ViT's head): an all-zero output would make
    # the cross-check against PyTorch vacuous.
    for m in model.modules():
        if isinstance(m, nn.Linear) and not m.weight.any():
            with torch.no_grad():
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.02)


def build(name):
    """The seeded PyTorch model and input behind NAME.onnx (the runner rebuilds them to time
    PyTorch on the same weights)."""
    make, make_input, _ = MODELS[name]
    return seeded(make, make_input)


def seeded(make, make_input):
    """A model built under the zoo's seeds (batch norms and zero layers randomised) and its
    input."""
    torch.manual_seed(0)
    model = make().eval()
    randomize_batchnorm(model, torch.Generator().manual_seed(1))
    randomize_zero_layers(model, torch.Generator().manual_seed(2))
    return model, make_input()


def write(name, out, model, x, input_name, dynamic_axes=None):
    """NAME.onnx (opset 17; the input's dynamic axes, if any, and the output's first axis
    follow them), NAME.input.npy and PyTorch's output as NAME.expected.npy."""
    # nn.MultiheadAttention's inference fast path (eval, no grad) is one native op that the
    # exporter has no rule for (the ViT failed on aten::_native_multi_head_attention).
    torch.backends.mha.set_fastpath_enabled(False)
    with torch.no_grad():
        y = model(x)
        path = os.path.join(out, name + ".onnx")
        axes = {input_name: dynamic_axes, "output": {0: "batch"}} if dynamic_axes else None
        torch.onnx.export(model, (x,), path, input_names=[input_name], output_names=["output"],
                          opset_version=17, dynamo=False, do_constant_folding=True,
                          dynamic_axes=axes)
    np.save(os.path.join(out, name + ".input.npy"), x.numpy())
    np.save(os.path.join(out, name + ".expected.npy"), y.numpy())
    print(f"{name:22s} {os.path.getsize(path) / 1e6:7.1f} MB  input {tuple(x.shape)}", flush=True)


def export(name, out):
    model, x = build(name)
    write(name, out, model, x, MODELS[name][2])


def zoo_build(models, name):
    """The seeded PyTorch model and input behind NAME.onnx of a zoo whose MODELS map names to
    (constructor, input maker, input name, dynamic axes or None)."""
    make, make_input, _, _ = models[name]
    return seeded(make, make_input)


def zoo_main(models, folder, doc):
    """The command line of a zoo module (broad.py, coverage_zoo.py): export its models, or the
    named ones, or only those missing, into bench/data/FOLDER (or --out)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "data", folder))
    ap.add_argument("--missing", action="store_true", help="only the models not exported yet")
    ap.add_argument("models", nargs="*", help=f"default: all ({', '.join(models)})")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(2)
    for name in a.models or models:
        if name not in models:
            sys.exit(f"unknown model '{name}' (known: {', '.join(models)})")
        if a.missing and os.path.exists(os.path.join(a.out, name + ".expected.npy")):
            continue
        _, _, input_name, axes = models[name]
        model, x = zoo_build(models, name)
        write(name, a.out, model, x, input_name, axes)


def smoke_folder(models):
    """The named models exported afresh into a temporary folder (the benchmarks' --smoke runs,
    which must not depend on, nor overwrite, bench/data/zoo)."""
    import atexit
    import shutil
    import subprocess
    import tempfile
    out = tempfile.mkdtemp(prefix="kiln-zoo-smoke-")
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    subprocess.run([sys.executable, os.path.abspath(__file__), "--out", out] + list(models),
                   check=True, stdout=subprocess.DEVNULL)
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "data", "zoo"))
    ap.add_argument("models", nargs="*", help=f"default: all ({', '.join(MODELS)})")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(2)
    for name in a.models or ZOO:
        if name not in MODELS:
            sys.exit(f"unknown model '{name}' (known: {', '.join(MODELS)})")
        export(name, a.out)


if __name__ == "__main__":
    main()
