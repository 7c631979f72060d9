"""What the Python tests that run ONNX models through `kiln run` share: writing a model made
with Debian's onnx package, and running it on NumPy inputs."""
import os
import subprocess
import sys

import numpy as np
from onnx import helper


def write_model(work, name, graph, opsets, ir_version=8):
    """WORK/NAME.onnx from a GraphProto; opsets: (domain, version) pairs."""
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = ir_version
    path = os.path.join(work, name + ".onnx")
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def run(kiln, path, inputs, env=None, timeout=300):
    """`kiln run PATH` on `inputs` (name -> array, each saved beside the model): the finished
    process and the folder holding one NAME.npy per output."""
    out = path[:-5] + "_out"
    args = [kiln, "run", path, "--no-generic-start", "-o", out]
    for k, v in inputs.items():
        f = path[:-5] + "_" + k + ".npy"
        np.save(f, v)
        args += ["--input", k + "=" + f]
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    return r, out


def finish(failures, passed):
    """Prints the failures and exits 1, or prints `passed`."""
    if failures:
        print(f"{len(failures)} failures:")
        for f in failures:
            print("  " + f)
        sys.exit(1)
    print(passed)
