#!/usr/bin/env python3
"""onnxruntime's start on one ONNX file, for bench/start_bench: session creation (file to
callable) and the first run, timed in this fresh process; prints "session=MS first=MS".
Usage (through bench/with-torch): ort_start.py MODEL.onnx [INPUT.npy]"""
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    model = sys.argv[1]
    opts = ort.SessionOptions()
    # onnxruntime's defaults (all graph optimisations, a thread per core), as a user gets them.
    t = time.perf_counter()
    session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    created = (time.perf_counter() - t) * 1e3
    first = -1.0
    if len(sys.argv) > 2:
        x = np.load(sys.argv[2])
        name = session.get_inputs()[0].name
        t = time.perf_counter()
        session.run(None, {name: x})
        first = (time.perf_counter() - t) * 1e3
    print(f"session={created:.3f} first={first:.3f}")


if __name__ == "__main__":
    main()
