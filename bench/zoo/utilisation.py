#!/usr/bin/env python3
"""How busy kiln keeps the cores on each zoo model: `kiln run --profile` counts each thread's
time inside thunk calls and split parts against the wall time of the runs (two cores: 200%
in all at most). Prints a markdown table (bench/results/profile.md keeps the last one).

Usage (from the checkout, with the zoo exported and build/release built):

  ~/.cache/kiln-python/bin/python bench/zoo/utilisation.py [--repeat N] [MODEL...]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export  # noqa: E402  (the zoo's model names)


def busy(kiln, path, inp, repeat):
    name = onnx.load(path, load_external_data=False).graph.input[0].name
    with tempfile.TemporaryDirectory() as out:
        r = subprocess.run([kiln, "run", path, "--input", f"{name}={inp}", "--output-dir", out,
                            "--profile", "--repeat", str(repeat)],
                           capture_output=True, text=True, check=True)
    text = r.stdout + r.stderr
    wall = re.search(r"profile: \d+ runs, ([\d.]+) ms per run \(wall\)", text)
    threads = re.search(r"threads busy in thunks \(share of wall time\): (.*)", text)
    if not wall or not threads:
        raise SystemExit(f"{path}: no profile summary in kiln's output:\n{text[:2000]}")
    shares = [int(s.rstrip("%")) for s in threads.group(1).split()]
    return float(wall.group(1)), shares




def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data", "zoo"))
    ap.add_argument("--kiln", default=os.path.join(ROOT, "build", "release", "cli", "kiln"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: SqueezeNet (unless models are named) exported afresh, 2 runs")
    ap.add_argument("models", nargs="*", help=f"default: {', '.join(export.ZOO)}")
    args = ap.parse_args()
    if args.smoke:
        args.models = args.models or ["squeezenet"]
        args.repeat = 2
        args.data = export.smoke_folder(args.models)
    print("| model | wall per run | threads busy | total of 200% |")
    print("|---|---|---|---|")
    for m in args.models or export.ZOO:
        wall, shares = busy(args.kiln, os.path.join(args.data, m + ".onnx"),
                            os.path.join(args.data, m + ".input.npy"), args.repeat)
        print(f"| {m} | {wall:.2f} ms | {' '.join(f'{s}%' for s in shares)} | {sum(shares)}% |",
              flush=True)


if __name__ == "__main__":
    main()
