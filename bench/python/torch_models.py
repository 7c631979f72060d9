#!/usr/bin/env python3
"""torch.compile on real models: eager PyTorch vs backend="inductor" vs backend="kiln".

timm resnet50, convnext_tiny, deit_tiny_patch16_224 and mobilevit_xs, and HuggingFace
transformers BertModel, GPT2Model and a LlamaModel-style decoder (configs and seeded random
weights from bench/zoo/broad.py; nothing is downloaded), inference (torch.no_grad), 2 threads,
the library's default attention (scaled_dot_product_attention). For each model: the first call
of each compiler (dynamo, lowering and compile, each from an empty cache), the steady-state
time (median of the rounds' medians, rounds interleaved: eager, inductor, kiln, eager, ...),
the largest error against eager relative to eager's largest magnitude, and what kiln made of
the graph (kiln graphs, frozen weights, ops left to PyTorch). "kiln dynamic" is the same model
compiled with symbolic sizes (dynamic=True for the transformers, a batch marked dynamic for
the CNNs), timed at the same size.

    bench/python/run-models [--rounds R] [--repeat N] [--no-inductor] [--results FILE] [MODEL...]
Writes bench/results/torch_compile.md (or FILE). --smoke (ctest): one small model, kiln and
eager only, no results file.
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-bench-cache-"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cache-"))

import torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "zoo"))
import broad  # noqa: E402

SMOKE = "--smoke" in sys.argv[1:]
import export  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cpu_name, median_ms  # noqa: E402

import kiln  # noqa: E402,F401  (registers the backend)
from kiln import torch_backend  # noqa: E402

LLAMA = dict(broad.LLAMA)
MODELS = {
    "resnet50": (broad.timm_model("resnet50"), broad.image(1)),
    "convnext_tiny": (broad.timm_model("convnext_tiny"), broad.image(1)),
    "deit_tiny": (broad.timm_model("deit_tiny_patch16_224"), broad.image(1)),
    "mobilevit_xs": (broad.timm_model("mobilevit_xs"), broad.image(1, 256)),
    "bert": (broad.hf_model("bert", attention=None, **broad.BERT), broad.tokens(1, 128, 30522)),
    "gpt2": (broad.hf_model("gpt2_model", attention=None, **broad.GPT2),
             broad.tokens(1, 128, 50257)),
    "llama": (broad.hf_model("llama_model", attention=None, **LLAMA), broad.tokens(1, 128, 32000)),
}
SMOKE_MODELS = {
    "bert_mini": (broad.hf_model("bert", attention=None, **broad.BERT_MINI),
                  broad.tokens(1, 16, 30522)),
}


def rel_error(got, want):
    scale = float(want.abs().max())
    return float((got - want).abs().max()) / (scale or 1.0)


def first_call(model, x, backend):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    reports = len(torch_backend.REPORTS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        out = compiled(x)
        seconds = time.perf_counter() - t
    return compiled, out, seconds, torch_backend.REPORTS[reports:]


def measure(name, make, make_input, backends, rounds, repeat):
    model, x = export.seeded(make, make_input)
    row = {"model": name}
    with torch.no_grad():
        want = model(x)
        fns = {"eager": model}
        for backend in backends:
            compiled, out, seconds, reports = first_call(model, x, backend)
            fns[backend] = compiled
            row[backend + "_first_s"] = seconds
            row[backend + "_err"] = rel_error(out, want)
            if backend == "kiln":
                row["kiln_graphs"] = sum(r["kiln_graphs"] for r in reports)
                row["frozen"] = sum(r["frozen"] for r in reports)
                row["pytorch_ops"] = sorted({op for r in reports for op in r["pytorch_ops"]})
        if "kiln" in backends and not SMOKE:
            # The same model with symbolic sizes: batch and sequence of a transformer, the
            # batch of a CNN (kiln's convolutions need static channels and spatial sizes).
            torch._dynamo.reset()
            if x.dtype == torch.int64:
                dynamic = torch.compile(model, backend="kiln", dynamic=True)
            else:
                dynamic = torch.compile(model, backend="kiln")
                torch._dynamo.mark_dynamic(x, 0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                row["kiln_dynamic_err"] = rel_error(dynamic(x), want)
            fns["kiln_dynamic"] = dynamic
        for fn in fns.values():
            fn(x)  # warm
        times = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                times[k].append(median_ms(lambda: fn(x), repeat))
        for k, ts in times.items():
            row[k + "_ms"] = statistics.median(ts)
    return row


def geomean(values):
    values = [v for v in values if v and not math.isnan(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table(rows, backends):
    inductor = "inductor" in backends
    head = ["model", "eager ms"] + (["Inductor ms"] if inductor else []) + [
        "kiln ms", "kiln dynamic ms", "kiln / eager"] + (["kiln / Inductor"] if inductor else []) + (
        ["Inductor first s"] if inductor else []) + ["kiln first s"] + (
        ["first-call ratio"] if inductor else []) + [
        "kiln max rel err", "kiln graphs", "frozen weights", "ops left to PyTorch"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], f"{r['eager_ms']:.2f}"]
        if inductor:
            cells.append(f"{r['inductor_ms']:.2f}")
        cells += [f"{r['kiln_ms']:.2f}", f"{r.get('kiln_dynamic_ms', float('nan')):.2f}",
                  f"{r['kiln_ms'] / r['eager_ms']:.2f}"]
        if inductor:
            cells.append(f"{r['kiln_ms'] / r['inductor_ms']:.2f}")
            cells.append(f"{r['inductor_first_s']:.1f}")
        cells.append(f"{r['kiln_first_s']:.2f}")
        if inductor:
            cells.append(f"{r['inductor_first_s'] / r['kiln_first_s']:.1f}x")
        cells += [f"{r['kiln_err']:.1e}", str(r["kiln_graphs"]), str(r["frozen"]),
                  ", ".join(r["pytorch_ops"]) or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    means = [f"eager {geomean(r['kiln_ms'] / r['eager_ms'] for r in rows):.2f}"]
    if inductor:
        means.append(f"Inductor {geomean(r['kiln_ms'] / r['inductor_ms'] for r in rows):.2f}")
        means.append("first call: Inductor's / kiln's "
                     f"{geomean(r['inductor_first_s'] / r['kiln_first_s'] for r in rows):.1f}x")
    lines += ["", "Geometric mean of kiln's steady-state time over " + ", ".join(means) + "."]
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results",
                                                      "torch_compile.md"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    models = SMOKE_MODELS if args.smoke else MODELS
    names = args.models or list(models)
    unknown = [n for n in names if n not in models]
    if unknown:
        ap.error(f"unknown models {unknown} (known: {', '.join(models)})")
    backends = ["kiln"] if args.smoke or args.no_inductor else ["inductor", "kiln"]
    rounds, repeat = (1, 3) if args.smoke else (args.rounds, args.repeat)
    rows = []
    for name in names:
        row = measure(name, *models[name], backends, rounds, repeat)
        rows.append(row)
        print(f"{name}: eager {row['eager_ms']:.2f} ms, kiln {row['kiln_ms']:.2f} ms"
              + (f", inductor {row['inductor_ms']:.2f} ms" if "inductor" in row else "")
              + f"; kiln first call {row['kiln_first_s']:.2f} s, error {row['kiln_err']:.1e}, "
              f"{row['kiln_graphs']} kiln graph(s), left to PyTorch: {row['pytorch_ops']}",
              flush=True)
        if max(row["kiln_err"], row.get("kiln_dynamic_err", 0.0)) > 1e-4:
            print(f"{name}: kiln's output is off by {row['kiln_err']:.1e} of eager's",
                  file=sys.stderr)
            sys.exit(1)
    lines = table(rows, backends)
    print("\n".join(lines))
    if not args.smoke:
        cpu = cpu_name()
        with open(args.results, "w") as f:
            f.write("# torch.compile: eager vs Inductor vs kiln on real models\n\n"
                    f"PyTorch {torch.__version__}, {args.threads} threads, {cpu}; inference "
                    f"(no_grad), {args.rounds} interleaved rounds of {args.repeat} calls. "
                    "Regenerate with `bench/python/run-models`.\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
