#!/usr/bin/python3
"""Writes the MLP example's weights, a sample input and NumPy's output for it.

784 -> 256 -> 128 -> 10 with ReLU and a softmax. Deterministic (seeded), so the
checked-in files can be regenerated exactly: /usr/bin/python3 examples/mlp/make_mlp.py
"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(20261121)


def layer(n_in, n_out):
    # He initialisation keeps activations in a sensible range through the ReLUs.
    w = (rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)).astype(np.float32)
    b = (rng.standard_normal(n_out) * 0.01).astype(np.float32)
    return w, b


w1, b1 = layer(784, 256)
w2, b2 = layer(256, 128)
w3, b3 = layer(128, 10)
x = rng.random((4, 784), dtype=np.float32)


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


h1 = np.maximum(x @ w1 + b1, 0)
h2 = np.maximum(h1 @ w2 + b2, 0)
y = softmax(h2 @ w3 + b3).astype(np.float32)

for name, arr in dict(w1=w1, b1=b1, w2=w2, b2=b2, w3=w3, b3=b3, input=x, expected=y).items():
    np.save(os.path.join(here, name + ".npy"), arr)
print("wrote", here)
