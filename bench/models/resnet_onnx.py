#!/usr/bin/python3
"""Writes a ResNet-18 or ResNet-50 (torchvision's architectures) as an ONNX model with seeded
random weights.

No PyTorch needed: the graph is built with the onnx library (Debian's python3-onnx), the
weights with numpy. The layout is what a PyTorch export of torchvision.models.resnet18 (or
resnet50) in eval mode gives: Conv (no bias) + BatchNormalization + Relu, a 3x3 MaxPool after
the stem, four stages of BasicBlocks (18: two per stage) or Bottlenecks (50: 3, 4, 6, 3; the
stride on the 3x3 conv), a 1x1 Conv + BatchNormalization downsample where the shape changes,
GlobalAveragePool, Flatten and Gemm to 1000 classes. Opset 13.

Usage: bench/models/resnet_onnx.py OUT.onnx [--depth 18|50] [--batch N]
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.n = 0

    def name(self, stem):
        self.n += 1
        return f"{stem}_{self.n}"

    def weight(self, stem, array):
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), n))
        return n

    def conv(self, x, cin, cout, k, stride, pad):
        fan_in = cin * k * k
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin, k, k))
        y = self.name("conv")
        self.nodes.append(helper.make_node(
            "Conv", [x, self.weight("conv.w", w)], [y], kernel_shape=[k, k],
            strides=[stride, stride], pads=[pad] * 4))
        return y

    def bn(self, x, c):
        scale = self.weight("bn.scale", self.rng.uniform(0.5, 1.5, c))
        bias = self.weight("bn.bias", self.rng.normal(0, 0.1, c))
        mean = self.weight("bn.mean", self.rng.normal(0, 0.1, c))
        var = self.weight("bn.var", self.rng.uniform(0.5, 1.5, c))
        y = self.name("bn")
        self.nodes.append(helper.make_node(
            "BatchNormalization", [x, scale, bias, mean, var], [y], epsilon=1e-5))
        return y

    def op(self, kind, inputs, **attrs):
        y = self.name(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [y], **attrs))
        return y

    def block(self, x, cin, cout, stride):
        y = self.op("Relu", [self.bn(self.conv(x, cin, cout, 3, stride, 1), cout)])
        y = self.bn(self.conv(y, cout, cout, 3, 1, 1), cout)
        skip = x
        if stride != 1 or cin != cout:
            skip = self.bn(self.conv(x, cin, cout, 1, stride, 0), cout)
        return self.op("Relu", [self.op("Add", [y, skip])])


    def bottleneck(self, x, cin, width, stride):
        cout = 4 * width
        y = self.op("Relu", [self.bn(self.conv(x, cin, width, 1, 1, 0), width)])
        y = self.op("Relu", [self.bn(self.conv(y, width, width, 3, stride, 1), width)])
        y = self.bn(self.conv(y, width, cout, 1, 1, 0), cout)
        skip = x
        if stride != 1 or cin != cout:
            skip = self.bn(self.conv(x, cin, cout, 1, stride, 0), cout)
        return self.op("Relu", [self.op("Add", [y, skip])])


def resnet(depth, batch, seed=0):
    b = Builder(seed)
    x = b.op("Relu", [b.bn(b.conv("input", 3, 64, 7, 2, 3), 64)])
    x = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
    for (width, stride), n in zip([(64, 1), (128, 2), (256, 2), (512, 2)], blocks):
        for i in range(n):
            s = stride if i == 0 else 1
            if depth == 18:
                x = b.block(x, cin, width, s)
                cin = width
            else:
                x = b.bottleneck(x, cin, width, s)
                cin = 4 * width
    x = b.op("Flatten", [b.op("GlobalAveragePool", [x])], axis=1)
    w = b.weight("fc.w", b.rng.normal(0, 0.01, (1000, cin)))
    bias = b.weight("fc.b", np.zeros(1000))
    b.nodes.append(helper.make_node("Gemm", [x, w, bias], ["logits"], transB=1))
    graph = helper.make_graph(
        b.nodes, f"resnet{depth}",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, 1000])],
        initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="kiln bench/models")
    onnx.checker.check_model(model)
    return model


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--depth", type=int, choices=[18, 50], default=18)
    p.add_argument("--batch", type=int, default=1)
    a = p.parse_args()
    onnx.save(resnet(a.depth, a.batch), a.out)


if __name__ == "__main__":
    main()
