#!/usr/bin/env python3
"""Where a zoo model's time goes, by kind of layer: kiln against onnxruntime, same file,
input and threads.

kiln: `kiln run --profile` (each step's ms per run; a step is named after the ONNX node it
came from). onnxruntime: its own per-node profile (SessionOptions.enable_profiling, the
*_kernel_time events). Both are grouped by kind: a Conv by its weight (pointwise 1x1,
depthwise, or direct), every other node by its ONNX op type. onnxruntime fuses activations
and residual adds into its Conv nodes and kiln into its conv steps as epilogues, so the
Conv kinds compare like with like; the small ops they fused away show on one side only.

The two profiles take --rounds turns (interleaved, so a noisy neighbour hits both alike) and
each kind's median round is shown. Usage (from the checkout, with the zoo
exported and build/release built):

  ~/.cache/kiln-python/bin/python bench/zoo/layers.py mobilenet_v2 [--repeat N] [--threads T]
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import export  # noqa: E402  (smoke runs export their model)


def conv_kind(weight_dims, group):
    """pointwise, depthwise or direct, from a Conv's weight (M, C/group, k...)."""
    if len(weight_dims) >= 3 and all(k == 1 for k in weight_dims[2:]):
        return "Conv pointwise"
    if group > 1 and weight_dims[1] == 1:
        return "Conv depthwise"
    return "Conv direct"


def node_kinds(model, per_node=False):
    """ONNX node name -> kind, and output name -> the kind of the Conv behind it, through the
    activations and adds a peer fuses into the Conv (onnxruntime names a fused node after
    its last output), else that output's own kind."""
    init = {t.name: list(t.dims) for t in model.graph.initializer}
    by_name, producer = {}, {}
    for n in model.graph.node:
        kind = n.op_type
        if n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in init:
            group = next((a.i for a in n.attribute if a.name == "group"), 1)
            kind = conv_kind(init[n.input[1]], group)
            if per_node:  # one row per convolution: its name and weight shape
                kind = f"{n.name} {'x'.join(map(str, init[n.input[1]]))}"
        by_name[n.name] = kind
        for o in n.output:
            producer[o] = n

    def conv_behind(output, depth=3):
        n = producer.get(output)
        if n is None:
            return None
        if n.op_type == "Conv":
            return by_name[n.name]
        if depth == 0:
            return None
        for i in n.input:
            kind = conv_behind(i, depth - 1)
            if kind:
                return kind
        return None

    by_output = {o: conv_behind(o) for o in producer}
    return by_name, by_output


def kiln_times(model_path, input_path, repeat, threads, per_node):
    """kind -> ms per run from kiln's profile."""
    model = onnx.load(model_path)
    by_name, _ = node_kinds(model, per_node)
    # The graph's one input that is not an initializer (gpt_decoder's is `ids`).
    init = {t.name for t in model.graph.initializer}
    feed = next(i.name for i in model.graph.input if i.name not in init)
    env = dict(os.environ, KILN_ENGINE_WORKERS=str(threads))
    with tempfile.TemporaryDirectory() as out:
        text = subprocess.run(
            [os.path.join(ROOT, "build", "release", "cli", "kiln"), "run", model_path, "--input",
             feed + "=" + input_path, "--output-dir", out, "--profile", "--repeat", str(repeat)],
            check=True, capture_output=True, text=True, env=env).stdout
    times = collections.defaultdict(float)
    wall = None
    for line in text.splitlines():
        m = re.match(r"profile: .*?([\d.]+) ms per run \(wall\)", line)
        if m:
            wall = float(m.group(1))
        m = re.match(r"\s*([\d.]+)\s+[\d.]+%.*node \d+ '(.*)' \((\w+)\)\s*$", line)
        if m:
            times[by_name.get(m.group(2), m.group(3))] += float(m.group(1))
    return times, wall


def ort_times(model_path, input_path, repeat, threads, per_node):
    """kind -> ms per run from onnxruntime's profile."""
    model = onnx.load(model_path)
    by_name, by_output = node_kinds(model, per_node)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
        feed = {sess.get_inputs()[0].name: np.load(input_path)}
        sess.run(None, feed)  # warm-up, left out below by counting runs
        for _ in range(repeat):
            sess.run(None, feed)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    times = collections.defaultdict(float)
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        name = e["name"][: -len("_kernel_time")]
        op = e["args"].get("op_name", "?")
        if op in ("Conv", "FusedConv"):
            kind = by_name.get(name, "")
            if kind not in by_output.values():
                kind = by_output.get(re.sub(r"_nchwc$", "", name)) or "Conv (unmatched)"
        else:
            kind = op  # the peer's op type (a fused or layout node keeps its own)
        times[kind] += e["dur"] / 1000.0 / (repeat + 1)
    return times




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nodes", action="store_true", help="one row per convolution, not per kind")
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "data", "zoo"))
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: SqueezeNet (unless a model is named) exported afresh, one round of 2 runs")
    args = ap.parse_args()
    if args.smoke:
        args.model = args.model or "squeezenet"
        args.rounds, args.repeat = 1, 2
        args.data = export.smoke_folder([args.model])
    if not args.model:
        ap.error("name a zoo model")
    model_path = os.path.join(args.data, args.model + ".onnx")
    input_path = os.path.join(args.data, args.model + ".input.npy")
    kiln_rounds, walls, peer_rounds = [], [], []
    for _ in range(max(1, args.rounds)):
        k, w = kiln_times(model_path, input_path, args.repeat, args.threads, args.nodes)
        kiln_rounds.append(k)
        walls.append(w)
        peer_rounds.append(ort_times(model_path, input_path, args.repeat, args.threads, args.nodes))

    def median_by_kind(rounds):
        kinds = set().union(*rounds)
        return {k: float(np.median([r.get(k, 0.0) for r in rounds])) for k in kinds}

    kiln, peer = median_by_kind(kiln_rounds), median_by_kind(peer_rounds)
    print(f"{args.model}: {args.threads} threads, {args.rounds} rounds of {args.repeat} runs; kiln "
          f"{float(np.median(walls)):.2f} ms per run (wall), steps {sum(kiln.values()):.2f} ms; "
          f"onnxruntime nodes {sum(peer.values()):.2f} ms")
    kinds = set(kiln) | set(peer)
    wid = max([40] + [len(k) for k in kinds])
    print(f"{'kind':{wid}s} {'kiln ms':>9s} {'ort ms':>9s} {'kiln/ort':>9s}")
    for kind in sorted(kinds, key=lambda k: -max(kiln.get(k, 0), peer.get(k, 0))):
        k, o = kiln.get(kind, 0.0), peer.get(kind, 0.0)
        ratio = f"{k / o:9.2f}" if k and o else f"{'-':>9s}"
        print(f"{kind:{wid}s} {k:9.3f} {o:9.3f} {ratio}")


if __name__ == "__main__":
    main()
