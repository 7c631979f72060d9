#!/usr/bin/env python3
"""Training-step time: kiln (forward, backward and Adam compiled into one module, the
parameters updated in place) against eager PyTorch and torch.compile (inductor), on the same
models, data, optimizer and threads (2), in one run.

- MLP: 784 -> 256 -> 128 -> 10 (ReLU), batch 64, cross-entropy.
- CNN: conv 1->8 3x3, ReLU, max-pool 2, conv 8->16 3x3, ReLU, max-pool 2, linear 256 -> 10
  on 1x16x16 images, batch 64 (the network of examples/train).
Each step time is the median over interleaved rounds (the tools take turns) of the median of
30 steps after warm-up. Compile time: kiln's training module on an empty cache (cold) and
again in a fresh process state from the cache (warm); torch.compile's first step.
Writes bench/results/train.md. Run with scripts/setup's environment:
    ~/.cache/kiln-python/bin/python bench/train/run.py
"""
import os
import platform
import sys
import statistics
import tempfile
import time

os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(prefix="kiln-train-cache-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor-cache-"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

import kiln  # noqa: E402
from kiln import _kiln  # noqa: E402
from kiln import graph as kg  # noqa: E402
from kiln import train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(2)
BATCH, LR, ROUNDS, STEPS = 64, 1e-3, 5, 30
# --smoke (ctest): one round of 2 steps, no torch.compile (its compile dominates), no results file.
SMOKE = "--smoke" in sys.argv[1:]
if SMOKE:
    ROUNDS, STEPS = 1, 2


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 128), nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(256, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.c1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.c2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def kiln_graph(name, model, x_shape):
    """The same network as a kiln graph; parameters are inputs named like the module's."""
    g = kg.Graph(name)
    x = g.input("x", "float32", list(x_shape))
    y = g.input("y", "float32", [BATCH, 10])
    params = {}
    for pname, p in model.named_parameters():
        shape = list(p.shape)
        if pname.endswith("weight") and p.ndim == 2:
            shape = shape[::-1]  # kiln's matmul takes (in, out)
        params[pname] = g.input(pname, "float32", shape)
    if name == "mlp":
        h = kg.relu(x @ params["fc1.weight"] + params["fc1.bias"])
        h = kg.relu(h @ params["fc2.weight"] + params["fc2.bias"])
        logits = h @ params["fc3.weight"] + params["fc3.bias"]
    else:
        pool = dict(kernel_shape=[2, 2], strides=[2, 2])
        h = kg.apply("conv", [x, params["c1.weight"], params["c1.bias"]], pads=[1, 1, 1, 1])
        h = kg.apply("max_pool", [kg.relu(h)], **pool)
        h = kg.apply("conv", [h, params["c2.weight"], params["c2.bias"]], pads=[1, 1, 1, 1])
        h = kg.apply("max_pool", [kg.relu(h)], **pool)
        logits = kg.flatten(h) @ params["fc.weight"] + params["fc.bias"]
    loss = -kg.mean(kg.sum(y * kg.log_softmax(logits), axes=[1]))
    start = {}
    for pname, p in model.named_parameters():
        v = p.detach().numpy()
        start[params[pname]] = v.T if (pname.endswith("weight") and p.ndim == 2) else v
    return g, loss, start


def median_step(fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(STEPS):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def bench(name, make, x_shape):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((BATCH, *x_shape[1:])).astype(np.float32)
    labels = rng.integers(0, 10, BATCH)
    ys = np.eye(10, dtype=np.float32)[labels]
    tx, tl = torch.from_numpy(xs), torch.from_numpy(labels)

    model = make()
    g, loss, start = kiln_graph(name, model, x_shape)
    _kiln.clear_compile_memo()
    t = time.perf_counter()
    trainer = train.Trainer(g, loss, start, f"adam:lr={LR}")
    cold = time.perf_counter() - t
    _kiln.clear_compile_memo()
    g2, loss2, start2 = kiln_graph(name, make(), x_shape)
    t = time.perf_counter()
    train.Trainer(g2, loss2, start2, f"adam:lr={LR}")
    warm = time.perf_counter() - t

    def torch_step(m, opt):
        def step():
            opt.zero_grad(set_to_none=True)
            out = nn.functional.cross_entropy(m(tx), tl)
            out.backward()
            opt.step()
            return out
        return step

    eager_model = make()
    eager = torch_step(eager_model, torch.optim.Adam(eager_model.parameters(), lr=LR))
    compiled, torch_compile_s = eager, float("nan")
    if not SMOKE:  # inductor's compile takes most of a minute on two cores
        comp_model = make()
        comp_opt = torch.optim.Adam(comp_model.parameters(), lr=LR)
        compiled = torch_step(torch.compile(comp_model), comp_opt)
        t = time.perf_counter()
        compiled()
        torch_compile_s = time.perf_counter() - t

    # The first losses agree: same weights, data and loss.
    k0 = trainer.step(x=xs, y=ys)
    e0 = nn.functional.cross_entropy(model(tx), tl).item()
    assert abs(k0 - e0) < 1e-4 * max(1, abs(e0)), (name, k0, e0)

    tools = {"kiln": lambda: trainer.step(x=xs, y=ys), "eager": eager, "torch.compile": compiled}
    rounds = {k: [] for k in tools}
    for _ in range(ROUNDS):
        for k, fn in tools.items():
            rounds[k].append(median_step(fn))
    med = {k: statistics.median(v) * 1e3 for k, v in rounds.items()}
    return dict(name=name, cold=cold, warm=warm, torch_compile=torch_compile_s, **med)


def main():
    rows = [bench("mlp", Mlp, (BATCH, 784)), bench("cnn", Cnn, (BATCH, 1, 16, 16))]
    lines = [
        "# Training steps: kiln vs PyTorch eager and torch.compile",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} logical CPUs; "
        f"PyTorch {torch.__version__}; 2 threads each. Adam (lr {LR}), batch {BATCH}, "
        "cross-entropy. Step time: median of "
        f"{ROUNDS} interleaved rounds of the median of {STEPS} steps. Regenerate with "
        "`~/.cache/kiln-python/bin/python bench/train/run.py`.",
        "",
        "| model | kiln ms/step | eager ms/step | torch.compile ms/step | kiln / eager | kiln / torch.compile "
        "| kiln compile, cold s | kiln compile, warm s | torch.compile first step s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['kiln']:.3f} | {r['eager']:.3f} | {r['torch.compile']:.3f} | "
            f"{r['kiln'] / r['eager']:.2f} | {r['kiln'] / r['torch.compile']:.2f} | {r['cold']:.2f} | "
            f"{r['warm']:.3f} | {r['torch_compile']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if not SMOKE:
        with open(os.path.join(ROOT, "bench", "results", "train.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
