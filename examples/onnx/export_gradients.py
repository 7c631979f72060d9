#!/usr/bin/env python3
"""Writes PyTorch autograd's gradients for kiln's ONNX examples.

For each model in examples/onnx, loads the weights of model.onnx into the PyTorch module
export_models.py defines, runs it on x.npy and writes the gradient of y.sum() with respect to
every initializer that is a module parameter to expected/grad_<initializer name>.npy (the
names `kiln grad` uses). Needs torch and onnx: run it with the environment scripts/setup makes
(~/.cache/kiln-python/bin/python examples/onnx/export_gradients.py).
"""
import os
import re
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import export_models as em  # noqa: E402

MODELS = {"mlp": em.MLP, "lenet": em.LeNet, "resblock": em.ResidualBlock,
          "attention": em.SelfAttentionBlock}


def file_name(name):
    return "grad_" + re.sub(r"[^A-Za-z0-9_.]", "_", name) + ".npy"


def main():
    for name, cls in MODELS.items():
        d = os.path.join(HERE, name)
        model = cls().eval()
        inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(os.path.join(d, "model.onnx")).graph.initializer}
        state = model.state_dict()
        params = dict(model.named_parameters())
        # The exporter stores some Linear weights transposed under a new name: each maps to
        # the one parameter of the transposed shape that no initializer names.
        transposed = {}
        for k, v in inits.items():
            if k in state or v.ndim != 2:
                continue
            free = [p for p, t in params.items() if p not in inits and p not in transposed.values()
                    and tuple(t.shape) == v.shape[::-1]]
            if len(free) == 1:
                transposed[k] = free[0]
        loaded = {k: torch.from_numpy(np.array(v)) for k, v in inits.items() if k in state}
        loaded.update({p: torch.from_numpy(np.array(inits[k]).T.copy()) for k, p in transposed.items()})
        model.load_state_dict(loaded, strict=False)
        x = torch.from_numpy(np.load(os.path.join(d, "x.npy")))
        y = model(x)
        assert np.allclose(y.detach().numpy(), np.load(os.path.join(d, "expected", "y.npy")), atol=1e-5), name
        y.sum().backward()
        written = 0
        for k in inits:
            if k in params:
                g = params[k].grad.numpy()
            elif k in transposed:
                g = params[transposed[k]].grad.numpy().T
            else:
                continue
            np.save(os.path.join(d, "expected", file_name(k)), np.ascontiguousarray(g))
            written += 1
        print(f"{name}: {written} gradients ({len(inits) - written} initializers are not parameters)")


if __name__ == "__main__":
    main()
