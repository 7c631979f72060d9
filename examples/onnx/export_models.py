#!/usr/bin/python3
"""Exports the small PyTorch models kiln's ONNX tests and benchmarks use.

For each model, writes examples/onnx/<name>/model.onnx, one input per graph input
(<input name>.npy) and PyTorch's output (expected/<output name>.npy). Needs PyTorch
(Debian's python3-torch or PyPI's torch). Run: /usr/bin/python3 examples/onnx/export_models.py
"""
import os

import numpy as np
import torch
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.Tanh(),
                                 nn.Linear(128, 10))

    def forward(self, x):
        return torch.softmax(self.net(x), dim=-1)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = nn.functional.avg_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class ResidualBlock(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.down = nn.Conv2d(c, 2 * c, 1, stride=2)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = torch.relu(x + y)
        return torch.mean(self.down(y), dim=(2, 3))


class SelfAttentionBlock(nn.Module):
    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q = q.reshape(b, t, self.heads, self.dh).transpose(1, 2)
        k = k.reshape(b, t, self.heads, self.dh).transpose(1, 2)
        v = v.reshape(b, t, self.heads, self.dh).transpose(1, 2)
        att = torch.softmax(q @ k.transpose(-2, -1) / self.dh ** 0.5, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


def randomize_batch_norm(model, rng):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.from_numpy(rng.normal(0, 0.5, m.num_features).astype(np.float32)))
            m.running_var.copy_(torch.from_numpy(rng.uniform(0.5, 2.0, m.num_features).astype(np.float32)))
            m.weight.data.copy_(torch.from_numpy(rng.uniform(0.5, 1.5, m.num_features).astype(np.float32)))
            m.bias.data.copy_(torch.from_numpy(rng.normal(0, 0.2, m.num_features).astype(np.float32)))


def export(name, model, example, dynamic_batch, keep_batch_norm=False):
    out_dir = os.path.join(HERE, name)
    os.makedirs(os.path.join(out_dir, "expected"), exist_ok=True)
    model.eval()
    axes = {"x": {0: "batch"}, "y": {0: "batch"}} if dynamic_batch else None
    torch.onnx.export(model, (example,), os.path.join(out_dir, "model.onnx"), input_names=["x"],
                      output_names=["y"], dynamic_axes=axes, opset_version=17,
                      # Folding would merge BatchNormalization into the convolution.
                      do_constant_folding=not keep_batch_norm,
                      training=torch.onnx.TrainingMode.PRESERVE if keep_batch_norm else torch.onnx.TrainingMode.EVAL)
    with torch.no_grad():
        y = model(example).numpy()
    np.save(os.path.join(out_dir, "x.npy"), example.numpy())
    np.save(os.path.join(out_dir, "expected", "y.npy"), y)
    print(f"{name}: input {tuple(example.shape)} -> output {y.shape}")


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    export("mlp", MLP(), torch.randn(4, 784), dynamic_batch=True)
    export("lenet", LeNet(), torch.randn(2, 1, 28, 28), dynamic_batch=True)
    res = ResidualBlock()
    randomize_batch_norm(res, rng)
    export("resblock", res, torch.randn(2, 16, 12, 12), dynamic_batch=True, keep_batch_norm=True)
    export("attention", SelfAttentionBlock(), torch.randn(2, 8, 32), dynamic_batch=False)


if __name__ == "__main__":
    main()
