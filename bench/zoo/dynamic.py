#!/usr/bin/env python3
"""Models exported with dynamic axes: one compiled kiln module for every size.

Exports ResNet-18 and the ViT (dynamic batch), the GPT-style decoder, the LSTM and GRU
sequence models and a masked token classifier (x[mask], NonZero) (dynamic batch and sequence) from the seeded zoo models (export.build) the way deployment exports are made,
torch.onnx.export(..., dynamic_axes=...), into bench/data/zoo/NAME.dynamic.onnx. Then, with a
fresh kernel cache, runs each at three sizes through `kiln run -v` and checks that:
  - every output matches PyTorch on the same input (relative tolerance 1e-3);
  - the first size compiles the module (cache miss) and the others load that same module
    (cache hits), i.e. the module holds the shape rules, not the sizes.
Prints a table (also written to bench/results/dynamic.md) and exits 1 on any failure.
Run through bench/zoo/dynamic (which sets up PyTorch), or with the PyTorch venv's python.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export  # noqa: E402

KILN = os.path.join(ROOT, "build", "release", "cli", "kiln")
OUT = os.path.join(ROOT, "bench", "data", "zoo")
# name -> (dynamic axes of the input, input sizes to run)
CASES = {
    "resnet18": ({0: "batch"}, [(1, 3, 224, 224), (2, 3, 224, 224), (5, 3, 224, 224)]),
    "vit_small": ({0: "batch"}, [(1, 3, 224, 224), (2, 3, 224, 224), (3, 3, 224, 224)]),
    "gpt_decoder": ({0: "batch", 1: "sequence"}, [(1, 128), (3, 50), (2, 7)]),
    "lstm": ({0: "batch", 1: "sequence"}, [(1, 50, 32), (4, 9, 32), (2, 1, 32)]),
    "gru": ({0: "batch", 1: "sequence"}, [(1, 50, 32), (4, 9, 32), (2, 1, 32)]),
    # The output's first axis is the count of kept tokens, known only when the model runs.
    "masked": ({0: "batch", 1: "sequence"}, [(1, 50, 32), (4, 9, 32), (2, 1, 32)]),
}


def make_input(name, shape, seed):
    rng = np.random.default_rng(seed)
    if name == "gpt_decoder":
        return rng.integers(0, 1000, shape).astype(np.int64)
    return rng.standard_normal(shape).astype(np.float32)


def main():
    # --smoke (ctest): the LSTM alone, into a temporary folder, and no results file.
    smoke = "--smoke" in sys.argv[1:]
    names = [a for a in sys.argv[1:] if a != "--smoke"] or (["lstm"] if smoke else list(CASES))
    out_dir = tempfile.mkdtemp(prefix="kiln-dynamic-smoke-") if smoke else OUT
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(2)
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, "cache"))
        for name in names:
            axes, sizes = CASES[name]
            model, x = export.build(name)
            inp = export.MODELS[name][2]
            path = os.path.join(out_dir, name + ".dynamic.onnx")
            torch.onnx.export(model, (x,), path, input_names=[inp], output_names=["output"],
                              opset_version=17, dynamo=False, do_constant_folding=True,
                              dynamic_axes={inp: axes, "output": {0: "batch"}})
            for k, shape in enumerate(sizes):
                xs = make_input(name, shape, k)
                with torch.no_grad():
                    want = model(torch.from_numpy(xs)).numpy()
                np.save(os.path.join(tmp, "x.npy"), xs)
                r = subprocess.run([KILN, "run", "-v", path, "--input", f"{inp}={tmp}/x.npy",
                                    "--output-dir", os.path.join(tmp, "out")],
                                   capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    rows.append((name, shape, "error", r.stderr.strip().splitlines()[-1], ""))
                    failed = True
                    continue
                got = np.load(os.path.join(tmp, "out", "output.npy"))
                # A staged model (masked) reports its prefix module's cache too.
                cache = "miss" if "cache miss" in r.stderr else "hit"
                err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12))
                ok = got.shape == want.shape and err <= 1e-3 and cache == ("miss" if k == 0 else "hit")
                failed = failed or not ok
                rows.append((name, shape, "ok" if ok else "FAIL", f"{err:.1e}", cache))
    lines = ["# Models exported with dynamic axes", "",
             "Each model is exported once with `dynamic_axes` and run at three sizes through "
             "`kiln run -v` with a fresh kernel cache: the first size compiles the module, the "
             "others load the same module (cache hit). Max error is relative to PyTorch's largest "
             "output. Regenerate with `bench/zoo/dynamic`.", "",
             "| model | input shape | result | max rel. error | kernel cache |",
             "|---|---|---|---|---|"]
    for name, shape, res, err, cache in rows:
        lines.append(f"| {name} | {tuple(shape)} | {res} | {err} | {cache} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not smoke:
        with open(os.path.join(ROOT, "bench", "results", "dynamic.md"), "w") as f:
            f.write(text)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
