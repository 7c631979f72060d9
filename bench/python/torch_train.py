#!/usr/bin/env python3
"""One training step through torch.compile: eager PyTorch vs backend="inductor" vs "kiln".

A torchvision ResNet-18 (batch 8, 3x64x64, training batch norm and max pooling) and a
transformer encoder layer (width 256, 4 heads, batch 8, sequence 64). A step is forward, a
mean-square loss and backward (gradients only, no optimizer, the same for all three). For
each: the first step (compile) from empty caches, the steady-state step time (median of the
rounds' medians, rounds interleaved), the largest gradient error against eager relative to
that gradient's largest magnitude, and what kiln made of the forward and backward graphs.

    ~/.cache/kiln-python/bin/python bench/python/torch_train.py [--rounds R] [--repeat N]
Writes bench/results/torch_train.md; --smoke (ctest): a small CNN, kiln and eager, no file.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("KILN_CACHE_DIR", tempfile.mkdtemp(prefix="kiln-bench-cache-"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cache-"))

import torch  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import cpu_name, median_ms  # noqa: E402

import kiln  # noqa: E402,F401
from kiln import torch_backend  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def models(smoke):
    if smoke:
        return {"small_cnn": (lambda: torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(8 * 8 * 8, 4)),
            lambda: torch.randn(4, 3, 16, 16))}
    return {
        "resnet18": (lambda: torchvision.models.resnet18(num_classes=10),
                     lambda: torch.randn(8, 3, 64, 64)),
        "transformer_layer": (lambda: torch.nn.TransformerEncoderLayer(
            256, 4, 1024, dropout=0.0, batch_first=True), lambda: torch.randn(8, 64, 256)),
    }


def step(fn, params, x):
    for p in params:
        p.grad = None
    fn(x).square().mean().backward()


def measure(name, make, make_input, backends, rounds, repeat):
    torch.manual_seed(0)
    x = make_input()
    nets = {}
    for k in ["eager"] + backends:
        torch.manual_seed(0)
        nets[k] = make().train()
    row = {"model": name}
    fns = {"eager": nets["eager"]}
    # The reference: the step in float64. A deep network's float32 gradients are this far
    # from it in eager PyTorch too (ResNet-18's first convolution: 2e-2 of the largest).
    torch.manual_seed(0)
    exact = make().train().double()
    step(exact, list(exact.parameters()), x.double())
    want = [p.grad for p in exact.parameters()]
    scale = max(float(w.abs().max()) for w in want) or 1.0

    def error(net):
        return max(float((p.grad.double() - w).abs().max()) / scale
                   for p, w in zip(net.parameters(), want))

    step(nets["eager"], list(nets["eager"].parameters()), x)
    row["eager_err"] = error(nets["eager"])
    for k in backends:
        torch._dynamo.reset()
        compiled = torch.compile(nets[k], backend=k)
        reports = len(torch_backend.REPORTS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            step(compiled, list(nets[k].parameters()), x)
            row[k + "_first_s"] = time.perf_counter() - t
        # Against the largest gradient of all: a bias before a batch norm has a gradient of
        # rounding noise only (the norm removes the mean), which no relative error measures.
        row[k + "_err"] = error(nets[k])
        if k == "kiln":
            new = torch_backend.REPORTS[reports:]
            row["kiln_graphs"] = [r["kiln_graphs"] for r in new]
            row["pytorch_ops"] = sorted({op for r in new for op in r["pytorch_ops"]})
        fns[k] = compiled
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            params = list(nets[k].parameters())
            times[k].append(median_ms(lambda: step(fn, params, x), repeat))
    for k, ts in times.items():
        row[k + "_ms"] = statistics.median(ts)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "torch_train.md"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    backends = ["kiln"] if args.smoke else ["inductor", "kiln"]
    rounds, repeat = (1, 2) if args.smoke else (args.rounds, args.repeat)
    lines = ["| model | eager ms | " + " | ".join(f"{b} ms" for b in backends) + " | kiln / eager"
             + (" | kiln / Inductor | Inductor first s" if not args.smoke else "")
             + " | kiln first s | grad err eager | grad err kiln | kiln graphs (fwd, bwd) |"
             " ops left to PyTorch |",
             "|" + "---|" * (9 + (2 if not args.smoke else 0) + len(backends) - 1)]
    for name, (make, make_input) in models(args.smoke).items():
        r = measure(name, make, make_input, backends, rounds, repeat)
        print(r, flush=True)
        if r["kiln_err"] > max(10 * r["eager_err"], 1e-3):
            print(f"{name}: kiln's gradients are off by {r['kiln_err']:.1e} (eager float32: "
                  f"{r['eager_err']:.1e})", file=sys.stderr)
            sys.exit(1)
        cells = [name, f"{r['eager_ms']:.1f}"] + [f"{r[b + '_ms']:.1f}" for b in backends]
        cells.append(f"{r['kiln_ms'] / r['eager_ms']:.2f}")
        if not args.smoke:
            cells += [f"{r['kiln_ms'] / r['inductor_ms']:.2f}", f"{r['inductor_first_s']:.1f}"]
        cells += [f"{r['kiln_first_s']:.2f}", f"{r['eager_err']:.1e}", f"{r['kiln_err']:.1e}",
                  ", ".join(map(str, r["kiln_graphs"])), ", ".join(r["pytorch_ops"]) or "–"]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    if not args.smoke:
        with open(args.results, "w") as f:
            f.write("# torch.compile training step: eager vs Inductor vs kiln\n\n"
                    f"PyTorch {torch.__version__}, 2 threads, {cpu_name()}; forward, loss and backward "
                    f"(no optimizer), {args.rounds} interleaved rounds of {args.repeat} steps. "
                    "Regenerate with `~/.cache/kiln-python/bin/python bench/python/torch_train.py`."
                    "\n\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
