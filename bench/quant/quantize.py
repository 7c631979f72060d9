#!/usr/bin/env python3
"""Quantizes zoo models with onnxruntime's own tools, as a user would, into bench/data/quant/
(or OUT): for each CNN, NAME.qdq.onnx and NAME.qop.onnx from quantize_static (QDQ and
QOperator formats, uint8 activations, int8 weights per channel, calibrated with MinMax on 8
seeded inputs); for each transformer
encoder, NAME.dyn.onnx from quantize_dynamic (MatMulInteger with DynamicQuantizeLinear,
int8 weights). Beside each: NAME.input.npy (the float model's seeded input) and
NAME.float.onnx (a link to the float model), so bench/quant/run.py can compare kiln int8,
kiln float32 and onnxruntime on the same file.

The float models come from the zoos (bench/zoo/export.py, bench/zoo/broad.py), exported
there first when missing. Needs the torch environment (scripts/setup makes it).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(ROOT, "bench", "data")

# name: (zoo folder, zoo script, kind)
MODELS = {
    "resnet18": ("zoo", "export.py", "static"),
    "resnet50": ("broad", "broad.py", "static"),
    "mobilenet_v2": ("zoo", "export.py", "static"),
    "efficientnet_b0": ("zoo", "export.py", "static"),
    "bert_mini": ("broad", "broad.py", "dynamic"),
    "bert": ("broad", "broad.py", "dynamic"),
    # Not profiled or tuned on when the int8 paths were sped up: a check that the figures
    # hold beyond the models that drove the work.
    "deit_tiny": ("broad", "broad.py", "dynamic"),
    "gpt2": ("broad", "broad.py", "dynamic"),
    "llama": ("broad", "broad.py", "dynamic"),
}


class Reader(CalibrationDataReader):
    """Eight seeded inputs shaped like the model's sample input (images ~ N(0, 1); token ids
    drawn from the sample's own range)."""

    def __init__(self, model_path, sample):
        m = onnx.load(model_path, load_external_data=False)
        init = {i.name for i in m.graph.initializer}
        self.name = [i.name for i in m.graph.input if i.name not in init][0]
        rng = np.random.default_rng(1234)
        if sample.dtype.kind == "f":
            self.batches = [rng.standard_normal(sample.shape).astype(sample.dtype) for _ in range(8)]
        else:
            hi = int(sample.max()) + 1
            self.batches = [rng.integers(0, hi, size=sample.shape).astype(sample.dtype)
                            for _ in range(8)]
        self.i = 0

    def get_next(self):
        if self.i >= len(self.batches):
            return None
        self.i += 1
        return {self.name: self.batches[self.i - 1]}


def float_model(name, zoo, script):
    path = os.path.join(DATA, zoo, name + ".onnx")
    if not os.path.exists(path):
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "zoo", script), name],
                       check=True)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", default=list(MODELS))
    ap.add_argument("--out", default=os.path.join(DATA, "quant"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.models:
        zoo, script, kind = MODELS[name]
        src = float_model(name, zoo, script)
        sample = np.load(os.path.join(DATA, zoo, name + ".input.npy"))
        np.save(os.path.join(args.out, name + ".input.npy"), sample)
        link = os.path.join(args.out, name + ".float.onnx")
        if os.path.lexists(link):
            os.remove(link)
        os.symlink(os.path.relpath(src, args.out), link)
        pre = os.path.join(args.out, name + ".pre.onnx")
        quant_pre_process(src, pre, skip_symbolic_shape=True)
        if kind == "static":
            for fmt, suffix in ((QuantFormat.QDQ, ".qdq.onnx"), (QuantFormat.QOperator, ".qop.onnx")):
                out = os.path.join(args.out, name + suffix)
                quantize_static(pre, out, Reader(pre, sample), quant_format=fmt,
                                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                                per_channel=True)
                print(f"{name}: {os.path.basename(out)} ({os.path.getsize(out) / 1e6:.1f} MB)")
        else:
            out = os.path.join(args.out, name + ".dyn.onnx")
            quantize_dynamic(pre, out, weight_type=QuantType.QInt8)
            print(f"{name}: {os.path.basename(out)} ({os.path.getsize(out) / 1e6:.1f} MB)")
        os.remove(pre)


if __name__ == "__main__":
    main()
