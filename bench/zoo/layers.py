#!/usr/bin/env python3
"""Where a zoo model's time goes, by kind of layer: kiln against onnxruntime and OpenVINO,
same file, input and threads.

kiln: `kiln run --profile` (each step's ms per run; a step is named after the ONNX node it
came from). onnxruntime: its own per-node profile (SessionOptions.enable_profiling, the
*_kernel_time events). Both are grouped by kind: a Conv by its weight (pointwise 1x1,
depthwise, or direct), every other node by its ONNX op type. onnxruntime fuses activations
and residual adds into its Conv nodes and kiln into its conv steps as epilogues, so the
Conv kinds compare like with like; the small ops they fused away show on one side only.
OpenVINO: its per-node performance counters (PERF_COUNT), each node's real time; a node that
kept an ONNX node's name takes that node's kind, the rest are named by OpenVINO's node type.

The kinds are then gathered into layer families that name the same work on all three sides
(a convolution by its shape of weight: pointwise, depthwise k x k, grouped or direct; GEMMs;
attention; normalisation; elementwise; data movement; pooling), since each tool fuses and
names its nodes in its own way; --kinds prints the tools' own kinds instead.

The two profiles take --rounds turns (interleaved, so a noisy neighbour hits both alike) and
each kind's median round is shown. Usage (from the checkout, with the zoo
exported and build/release built):

  ~/.cache/kiln-python/bin/python bench/zoo/layers.py mobilenet_v2 [--repeat N] [--threads T]
  ~/.cache/kiln-python/bin/python bench/zoo/layers.py --zoo broad convnext_tiny
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
    """pointwise, depthwise k x k, grouped or direct, from a Conv's weight (M, C/group, k...)."""
    if len(weight_dims) >= 3 and all(k == 1 for k in weight_dims[2:]):
        return "Conv pointwise" if group == 1 else "Conv pointwise grouped"
    if group > 1 and weight_dims[1] == 1:
        return "Conv depthwise " + "x".join(map(str, weight_dims[2:]))
    if group > 1:
        return "Conv grouped"
    return "Conv direct"


# Layer families: each tool's op or node type -> the work it does. kiln and onnxruntime speak
# ONNX op types (onnxruntime also its fused contrib ops); OpenVINO its own node types.
FAMILIES = {
    "GEMM (MatMul, Gemm)": {"MatMul", "Gemm", "FusedMatMul", "FullyConnected", "MatMulNBits",
                            "FusedGemm", "Einsum"},
    "attention": {"Attention", "MultiHeadAttention", "ScaledDotProductAttention"},
    "normalisation": {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                      "SkipSimplifiedLayerNormalization", "BatchNormalization", "MVN", "RMS",
                      "GroupNormalization", "InstanceNormalization", "NormalizeL2",
                      "ReduceMean", "ReduceSumSquare", "ReduceL2", "Reduce"},
    "softmax": {"Softmax", "LogSoftmax"},
    "elementwise": {"Add", "Sub", "Mul", "Div", "Relu", "Sigmoid", "Tanh", "Erf", "Gelu",
                    "BiasGelu", "FastGelu", "QuickGelu", "Pow", "Sqrt", "Exp", "Clip", "HardSwish",
                    "HardSigmoid", "Neg", "Where", "Equal", "Not", "Cast", "Max", "Min",
                    "Reciprocal", "Abs", "Softplus", "Mish", "Eltwise", "Subgraph", "Math",
                    "Convert", "PRelu", "LeakyRelu", "Elu", "BiasAdd", "SkipAdd"},
    "data movement": {"Transpose", "Reshape", "Concat", "Concatenation", "Split", "Slice",
                      "StridedSlice", "Gather", "Pad", "Flatten", "Squeeze", "Unsqueeze",
                      "Expand", "Tile", "Reorder", "ReorderInput", "ReorderOutput", "Broadcast",
                      "Identity", "DepthToSpace", "SpaceToDepth", "ShapeOf", "Shape",
                      "Range", "ConstantOfShape", "Roll", "Interpolate", "Resize",
                      "ShuffleChannels", "Select", "GatherElements", "Unfold", "Col2Im"},
    "pooling": {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Pooling",
                "AdaptivePooling", "NchwcMaxPool", "NchwcAveragePool"},
}
# By lower case too: a kiln step that no ONNX node names carries kiln's own op name ("mul").
FAMILY_OF = {name: fam for fam, ops in FAMILIES.items() for op in ops for name in (op, op.lower())}


def family(kind):
    if kind.startswith("Conv") or kind in ("Convolution", "GroupConvolution", "FusedConv"):
        return kind if kind.startswith("Conv ") else "Conv (unmatched)"
    return FAMILY_OF.get(kind, "other: " + kind)


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


def openvino_times(model_path, input_path, repeat, threads, per_node):
    """kind -> ms per run from OpenVINO's performance counters, or None without OpenVINO."""
    try:
        import openvino as ov
    except ImportError:
        return None
    model = onnx.load(model_path)
    by_name, by_output = node_kinds(model, per_node)
    compiled = ov.Core().compile_model(model_path, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
        "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "PERF_COUNT": True})
    request = compiled.create_infer_request()
    x = np.load(input_path)
    request.infer({0: x})  # warm-up
    times = collections.defaultdict(float)
    for _ in range(repeat):
        request.infer({0: x})
        # The counters hold the last inference only.
        for p in request.profiling_info:
            if p.status != p.Status.EXECUTED or p.node_type in ("Parameter", "Result", "Input",
                                                                "Output", "Constant"):
                continue
            # A node keeps its ONNX node's name, or that name with a suffix of the step that
            # made it (a convolution whose bias became an add: "<name>/WithoutBiases"); a
            # convolution that fused what follows it is traced back to its weight.
            name = p.node_name
            if name not in by_name and "/" in name:
                name = name.rsplit("/", 1)[0]
            if p.node_type in ("Convolution", "GroupConvolution"):
                kind = by_name.get(name, "")
                if not kind.startswith("Conv") or kind not in by_output.values():
                    kind = by_output.get(name) or "Conv (unmatched)"
            else:
                kind = by_name.get(name) or p.node_type
            times[kind] += p.real_time.total_seconds() * 1e3 / repeat
    return times




def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--nodes", action="store_true", help="one row per convolution, not per kind")
    ap.add_argument("--kinds", action="store_true",
                    help="each tool's own kinds, not the layer families")
    ap.add_argument("--zoo", choices=("tuned", "broad"), default="tuned",
                    help="which zoo's data folder (bench/data/zoo or bench/data/broad)")
    ap.add_argument("--data", help="the models' folder (default: the zoo's)")
    ap.add_argument("--no-openvino", action="store_true", help="skip OpenVINO")
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: SqueezeNet (unless a model is named) exported afresh, one round of 2 runs")
    args = ap.parse_args()
    if args.smoke:
        args.model = args.model or "squeezenet"
        args.rounds, args.repeat = 1, 2
        args.data = export.smoke_folder([args.model])
    if not args.model:
        ap.error("name a zoo model")
    if not args.data:
        args.data = os.path.join(ROOT, "bench", "data", "zoo" if args.zoo == "tuned" else "broad")
    model_path = os.path.join(args.data, args.model + ".onnx")
    input_path = os.path.join(args.data, args.model + ".input.npy")
    kiln_rounds, walls, ort_rounds, ov_rounds = [], [], [], []
    with_ov = not args.no_openvino
    for _ in range(max(1, args.rounds)):
        k, w = kiln_times(model_path, input_path, args.repeat, args.threads, args.nodes)
        kiln_rounds.append(k)
        walls.append(w)
        ort_rounds.append(ort_times(model_path, input_path, args.repeat, args.threads, args.nodes))
        if with_ov:
            v = openvino_times(model_path, input_path, args.repeat, args.threads, args.nodes)
            if v is None:
                print("OpenVINO is not installed: no OpenVINO column", flush=True)
                with_ov = False
            else:
                ov_rounds.append(v)

    def median_by_kind(rounds):
        if not args.kinds and not args.nodes:  # gathered into families first
            rounds = [fold(r) for r in rounds]
        kinds = set().union(*rounds)
        return {k: float(np.median([r.get(k, 0.0) for r in rounds])) for k in kinds}

    def fold(times):
        out = collections.defaultdict(float)
        for kind, ms in times.items():
            out[family(kind)] += ms
        return out

    tools = [("kiln", median_by_kind(kiln_rounds)), ("ort", median_by_kind(ort_rounds))]
    if with_ov:
        tools.append(("OpenVINO", median_by_kind(ov_rounds)))
    print(f"{args.model}: {args.threads} threads, {args.rounds} rounds of {args.repeat} runs; kiln "
          f"{float(np.median(walls)):.2f} ms per run (wall); sums of steps or nodes: "
          + ", ".join(f"{name} {sum(t.values()):.2f} ms" for name, t in tools))
    kinds = set().union(*(t for _, t in tools))
    wid = max([40] + [len(k) for k in kinds])
    head = f"{'kind' if args.kinds or args.nodes else 'layer family':{wid}s}"
    head += "".join(f" {name + ' ms':>12s}" for name, _ in tools)
    head += "".join(f" {'kiln/' + name:>13s}" for name, _ in tools[1:])
    print(head)
    for kind in sorted(kinds, key=lambda k: -max(t.get(k, 0) for _, t in tools)):
        vals = [t.get(kind, 0.0) for _, t in tools]
        line = f"{kind:{wid}s}" + "".join(f" {v:12.3f}" for v in vals)
        for v in vals[1:]:
            line += f" {vals[0] / v:13.2f}" if vals[0] and v else f" {'-':>13s}"
        print(line)


if __name__ == "__main__":
    main()
