#!/usr/bin/env python3
"""kiln from Python: compile a model file, build a graph in code, and use kiln as a
torch.compile backend. Run after `pip install ./python` (see docs/python.md):

    python examples/python/mlp_and_torch.py
"""
import os
import time

import numpy as np

import kiln
from kiln import graph as kg

here = os.path.dirname(os.path.abspath(__file__))
mlp = os.path.join(here, "..", "mlp")

# 1. A model file: compiled once into the kernel cache, then called with numpy arrays.
f = kiln.compile(os.path.join(mlp, "mlp.json"))
x = np.load(os.path.join(mlp, "input.npy"))
(y,) = f(x)
print(f"mlp.json: {y} ({f.cache_status}), max error vs expected "
      f"{np.abs(np.asarray(y) - np.load(os.path.join(mlp, 'expected.npy'))).max():.2e}")

# 2. A graph built in code: None is a dimension known only at run time.
rng = np.random.default_rng(0)
g = kg.Graph("two_layer")
inp = g.input("x", "float32", [None, 16])
w1 = g.parameter(rng.standard_normal((16, 32)).astype(np.float32), "w1")
w2 = g.parameter(rng.standard_normal((32, 4)).astype(np.float32), "w2")
g.set_outputs([kg.softmax(kg.relu(inp @ w1) @ w2)])
two = kiln.compile(g)
probs = np.asarray(two(rng.standard_normal((3, 16)).astype(np.float32))[0])
print("two_layer rows sum to", probs.sum(1))
print("generated C:", len(kiln.source(g).splitlines()), "lines")

# 3. torch.compile(backend="kiln"), when PyTorch is installed.
try:
    import torch
    import torchvision
except ImportError:
    print("PyTorch is not installed: skipping torch.compile")
else:
    model = torchvision.models.resnet18().eval()
    img = torch.randn(1, 3, 112, 112)
    with torch.no_grad():
        start = time.perf_counter()
        compiled = torch.compile(model, backend="kiln")
        out = compiled(img)
        first = time.perf_counter() - start
        err = (out - model(img)).abs().max().item()
    print(f"resnet18 through torch.compile(backend='kiln'): first call {first:.2f} s, "
          f"max difference from eager {err:.1e}")

print("cache:", kiln.cache.stats()["entries"], "entries in", kiln.cache.root())
