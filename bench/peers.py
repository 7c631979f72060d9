#!/usr/bin/env python3
"""kiln side by side with PyTensor, numpy, onnxruntime and PyTorch, on the same graphs and data.

Run through bench/peers (which builds kiln and sets up the virtual environment). It prints,
in one run, and writes to bench/results/peers.md:

- compile time, cold (graph -> callable with an empty cache, fresh process) and warm (fresh
  process, populated cache), of kiln and PyTensor's C backend (linker "cvm" and "c"), for
  an MLP and a 30-op elementwise graph;
- run time of kiln, numpy, PyTensor, onnxruntime, PyTorch eager and torch.compile for the
  30-op elementwise chain on 4M floats, softmax over rows, MLP and CNN inference;
- the STREAM-style triad bandwidth beside kiln's elementwise bandwidth.

Every graph is an ONNX file (kiln and onnxruntime load it) plus the same computation in
numpy, PyTensor and PyTorch; outputs are cross-checked before anything is timed.
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_CHAIN = 4 * 1024 * 1024

# The 30-op chain: (op, operand) applied to the running value v; operands are the inputs
# "a", "b" or a float32 constant. Every op keeps the values finite (log after +1 of a
# positive value, sqrt after abs).
CHAIN = [("mul", 0.5), ("add", "b"), ("tanh", None), ("mul", "a"), ("sub", 0.25), ("neg", None),
         ("exp", None), ("add", 1.0), ("log", None), ("mul", "b"), ("sigmoid", None), ("mul", 2.0),
         ("sub", "a"), ("abs", None), ("sqrt", None), ("add", "b"), ("relu", None), ("mul", 0.3),
         ("tanh", None), ("add", "a"), ("mul", "b"), ("sigmoid", None), ("sub", 0.5), ("mul", 3.0),
         ("exp", None), ("add", "a"), ("abs", None), ("add", 1.0), ("log", None), ("mul", "a")]
assert len(CHAIN) == 30


def chain_apply(lib, a, b, scalar):
    """The chain with any array library: lib maps op names to functions."""
    v = a
    for op, arg in CHAIN:
        if arg is None:
            v = lib[op](v)
        else:
            w = a if arg == "a" else b if arg == "b" else scalar(arg)
            v = lib[op](v, w)
    return v


def chain_onnx(path):
    nodes, inits, v = [], [], "a"
    onnx_op = {"mul": "Mul", "add": "Add", "sub": "Sub", "tanh": "Tanh", "neg": "Neg", "exp": "Exp",
               "log": "Log", "sigmoid": "Sigmoid", "abs": "Abs", "sqrt": "Sqrt", "relu": "Relu"}
    for i, (op, arg) in enumerate(CHAIN):
        ins = [v]
        if arg is not None:
            if isinstance(arg, float):
                name = f"c{i}"
                inits.append(numpy_helper.from_array(np.array(arg, dtype=np.float32), name))
                ins.append(name)
            else:
                ins.append(arg)
        out = "y" if i == len(CHAIN) - 1 else f"t{i}"
        nodes.append(helper.make_node(onnx_op[op], ins, [out]))
        v = out
    vec = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"])
    graph = helper.make_graph(nodes, "chain30", [vec("a"), vec("b")], [vec("y")], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def softmax_onnx(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", 1024])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", 1024])
    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "softmax", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def mlp_weights():
    m = onnx.load(os.path.join(ROOT, "examples", "onnx", "mlp", "model.onnx"))
    w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    # Gemm with transB=1: y = x W^T + b; layers relu, tanh, softmax (export_models.MLP).
    return [(w[f"net.{k}.weight"].T.copy(), w[f"net.{k}.bias"]) for k in (0, 2, 4)]


# ---- PyTensor -----------------------------------------------------------------------------

def pytensor_graph(workload, linker):
    import pytensor
    import pytensor.tensor as pt

    def softmax(z):
        if linker != "c":
            return pt.special.softmax(z, axis=-1)
        # The "c" linker needs C code for every op, which PyTensor's Softmax lacks.
        e = pt.exp(z - pt.max(z, axis=-1, keepdims=True))
        return e / pt.sum(e, axis=-1, keepdims=True)

    if workload == "chain":
        a, b = pt.vector("a", dtype="float32"), pt.vector("b", dtype="float32")
        lib = {"mul": lambda x, y: x * y, "add": lambda x, y: x + y, "sub": lambda x, y: x - y,
               "tanh": pt.tanh, "neg": lambda x: -x, "exp": pt.exp, "log": pt.log,
               "sigmoid": pt.sigmoid, "abs": pt.abs, "sqrt": pt.sqrt, "relu": lambda x: pt.maximum(x, 0)}
        return [a, b], chain_apply(lib, a, b, lambda c: np.float32(c))
    if workload == "softmax":
        x = pt.matrix("x", dtype="float32")
        return [x], softmax(x)
    if workload == "mlp":
        x = pt.matrix("x", dtype="float32")
        (w0, b0), (w1, b1), (w2, b2) = [(pytensor.shared(w), pytensor.shared(b)) for w, b in mlp_weights()]
        h = pt.maximum(x @ w0 + b0, 0)
        h = pt.tanh(h @ w1 + b1)
        return [x], softmax(h @ w2 + b2)
    raise ValueError(workload)


def pytensor_function(workload, linker):
    import pytensor
    ins, out = pytensor_graph(workload, linker)
    mode = pytensor.compile.mode.Mode(linker=linker, optimizer="fast_run")
    if linker == "c":  # keep the explicit softmax: its Softmax op has no C code
        mode = mode.excluding("local_softmax_stabilize")
    f = pytensor.function(ins, out, mode=mode)
    f.trust_input = True
    return f


def pytensor_compile_child(workload, linker):
    """In a fresh process: time graph construction + pytensor.function (import excluded)."""
    import pytensor  # noqa: F401  (imported before timing)
    t = time.perf_counter()
    pytensor_function(workload, linker)
    print(json.dumps({"ms": (time.perf_counter() - t) * 1e3}))


def pytensor_compile_ms(workload, linker, compiledir):
    env = dict(os.environ, PYTENSOR_FLAGS=f"compiledir={compiledir},floatX=float32")
    r = subprocess.run([sys.executable, __file__, "--pytensor-compile", workload, linker],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"PyTensor compile of {workload} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])["ms"]


# ---- kiln ---------------------------------------------------------------------------------

def kiln_run(bench, model, inputs, tmp, cache, repeat):
    files = []
    for i, x in enumerate(inputs):
        files.append(os.path.join(tmp, f"in{i}.npy"))
        np.save(files[-1], x)
    out = os.path.join(tmp, "kiln_out.npy")
    r = subprocess.run([bench, model, *files, "--repeat", str(repeat), "--out", out],
                       capture_output=True, text=True, env=dict(os.environ, KILN_CACHE_DIR=cache))
    if r.returncode != 0:
        raise SystemExit(f"kiln failed on {model}: {r.stderr}")
    vals = dict((l.split()[0], l.split()[1:]) for l in r.stdout.splitlines())
    return float(vals["compile_ms"][0]), float(vals["run_ms"][0]), np.load(out)


# ---- timing -------------------------------------------------------------------------------

def median_ms(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def machine():
    cpu, family, flags = "unknown CPU", "", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name" and cpu == "unknown CPU":
                cpu = value.strip()
            elif key == "cpu family" and not family:
                family = value.strip()
            elif key == "flags" and not flags:
                flags = set(value.split())
    # The vector ISA decides which kernels run (and how far peak is): say it.
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE"
    cpu += f" (family {family}, {isa})" if family else f" ({isa})"
    mem = ""
    with open("/proc/meminfo") as f:
        kb = int(f.readline().split()[1])
        mem = f", {kb / 2**20:.0f} GiB"
    clang = subprocess.run(["clang", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"{cpu}, {os.cpu_count()} logical CPUs{mem}, {platform.system()} {platform.release()}; {clang}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile (slow to compile)")
    ap.add_argument("--pytensor-compile", nargs=2, metavar=("WORKLOAD", "LINKER"), help=argparse.SUPPRESS)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release", "bench"))
    ap.add_argument("--results", default=os.path.join(ROOT, "bench", "results", "peers.md"))
    ap.add_argument("--smoke", action="store_true",
                    help="ctest: two timed runs, no torch.compile, PyTensor only if installed, "
                         "the table to a temporary file")
    args = ap.parse_args()
    if args.pytensor_compile:
        return pytensor_compile_child(*args.pytensor_compile)
    if args.smoke:
        args.repeat, args.no_torch_compile = 2, True
        args.results = os.path.join(tempfile.mkdtemp(prefix="kiln-peers-smoke-"), "peers.md")

    import onnxruntime as ort
    import torch
    try:
        import pytensor
    except ImportError:
        if not args.smoke:
            raise
        pytensor = None  # the smoke run checks kiln's side and the peers that are installed
    sys.path.insert(0, os.path.join(ROOT, "examples", "onnx"))
    import export_models
    torch.set_grad_enabled(False)
    kbench = os.path.join(args.build, "onnx_bench")
    rng = np.random.default_rng(0)
    tmp = tempfile.mkdtemp(prefix="kiln-peers-")
    try:
        models = {"chain": os.path.join(tmp, "chain30.onnx"), "softmax": os.path.join(tmp, "softmax.onnx"),
                  "mlp": os.path.join(ROOT, "examples", "onnx", "mlp", "model.onnx"),
                  "cnn": os.path.join(ROOT, "examples", "onnx", "lenet", "model.onnx")}
        chain_onnx(models["chain"])
        softmax_onnx(models["softmax"])

        # ---- compile times ----
        compile_rows = []
        for workload in ("mlp", "chain"):
            cache = os.path.join(tmp, f"kiln-cache-{workload}")
            dummy = [np.zeros((1, 784), np.float32)] if workload == "mlp" else [np.zeros(8, np.float32)] * 2
            cold = kiln_run(kbench, models[workload], dummy, tmp, cache, 1)[0]
            warm = kiln_run(kbench, models[workload], dummy, tmp, cache, 1)[0]
            row = {"workload": workload, "kiln": (cold, warm)}
            for linker in ("cvm", "c") if pytensor else ():
                cdir = os.path.join(tmp, f"pytensor-{workload}-{linker}")
                row[linker] = (pytensor_compile_ms(workload, linker, cdir), pytensor_compile_ms(workload, linker, cdir))
            compile_rows.append(row)
            print(f"compile {workload:6s}: kiln cold {cold:8.1f} ms warm {warm:6.2f} ms" +
                  (f" | PyTensor cvm cold {row['cvm'][0]:8.1f} warm {row['cvm'][1]:7.1f} | c cold "
                   f"{row['c'][0]:8.1f} warm {row['c'][1]:7.1f}" if pytensor else ""),
                  flush=True)

        # ---- run times ----
        a = rng.standard_normal(N_CHAIN).astype(np.float32)
        b = rng.standard_normal(N_CHAIN).astype(np.float32)
        sm = rng.standard_normal((4096, 1024)).astype(np.float32)
        xm = rng.standard_normal((32, 784)).astype(np.float32)
        xc = rng.standard_normal((32, 1, 28, 28)).astype(np.float32)
        npf = {"mul": np.multiply, "add": np.add, "sub": np.subtract, "tanh": np.tanh, "neg": np.negative,
               "exp": np.exp, "log": np.log, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "abs": np.abs,
               "sqrt": np.sqrt, "relu": lambda x: np.maximum(x, np.float32(0))}
        tf = {"mul": torch.mul, "add": torch.add, "sub": torch.sub, "tanh": torch.tanh, "neg": torch.neg,
              "exp": torch.exp, "log": torch.log, "sigmoid": torch.sigmoid, "abs": torch.abs,
              "sqrt": torch.sqrt, "relu": torch.relu}

        def np_softmax(x):
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        layers = mlp_weights()

        def np_mlp(x):
            h = np.maximum(x @ layers[0][0] + layers[0][1], 0)
            h = np.tanh(h @ layers[1][0] + layers[1][1])
            return np_softmax(h @ layers[2][0] + layers[2][1])

        def torch_module(cls, path):
            model = cls().eval()
            w = {i.name: torch.from_numpy(numpy_helper.to_array(i).copy()) for i in onnx.load(path).graph.initializer}
            model.load_state_dict({k: w.get(k, v) for k, v in model.state_dict().items()})
            return model

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        workloads = {
            "chain": ([a, b], lambda: chain_apply(npf, a, b, np.float32),
                      lambda: chain_apply(tf, ta, tb, float), lambda f: f(a, b)),
            "softmax": ([sm], lambda: np_softmax(sm), (lambda t=torch.from_numpy(sm): torch.softmax(t, -1)),
                        lambda f: f(sm)),
            "mlp": ([xm], lambda: np_mlp(xm),
                    (lambda m=torch_module(export_models.MLP, models["mlp"]), t=torch.from_numpy(xm): m(t)),
                    lambda f: f(xm)),
            "cnn": ([xc], None,
                    (lambda m=torch_module(export_models.LeNet, models["cnn"]), t=torch.from_numpy(xc): m(t)),
                    None),
        }
        # kiln and the triad first, each in its own process, before any peer has started
        # thread pools (PyTorch's spin-waiting threads would otherwise share the cores).
        kiln_results = {name: kiln_run(kbench, models[name], w[0], tmp, os.path.join(tmp, "kiln-cache-run"),
                                       args.repeat)[1:] for name, w in workloads.items()}
        triad = subprocess.run([os.path.join(args.build, "triad")], capture_output=True, text=True).stdout
        triad_gbs = {int(l.split()[1]): float(l.split()[2]) for l in triad.splitlines()}
        run_rows = []
        for name, (inputs, np_fn, torch_fn, pt_call) in workloads.items():
            kiln_ms, y = kiln_results[name]
            row = {"workload": name, "kiln": kiln_ms}
            checks = {}
            if np_fn:
                checks["numpy"] = np_fn()
                row["numpy"] = median_ms(np_fn, args.repeat)
            if pt_call and pytensor:
                f = pytensor_function(name, "cvm")
                checks["PyTensor"] = pt_call(f)
                row["PyTensor"] = median_ms(lambda: pt_call(f), args.repeat)
            sess = ort.InferenceSession(models[name], providers=["CPUExecutionProvider"])
            feed = dict(zip([i.name for i in sess.get_inputs()], inputs))
            checks["onnxruntime"] = sess.run(None, feed)[0]
            row["onnxruntime"] = median_ms(lambda: sess.run(None, feed), args.repeat)
            checks["PyTorch"] = torch_fn().numpy()
            row["PyTorch"] = median_ms(torch_fn, args.repeat)
            if not args.no_torch_compile:
                compiled = torch.compile(torch_fn)
                t = time.perf_counter()
                compiled()
                row["torch.compile build s"] = time.perf_counter() - t
                checks["torch.compile"] = compiled().numpy()
                row["torch.compile"] = median_ms(compiled, args.repeat)
            for who, ref in checks.items():
                if not np.allclose(y, ref, rtol=1e-3, atol=1e-4):
                    raise SystemExit(f"{name}: kiln and {who} disagree (max diff {np.max(np.abs(y - ref))})")
            run_rows.append(row)
            print(f"run {name:8s}: " + "  ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "workload"),
                  flush=True)

    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    chain_gbs = 3 * N_CHAIN * 4 / (run_rows[0]["kiln"] / 1e3) / 1e9
    peers = ["numpy", "PyTensor", "onnxruntime", "PyTorch", "torch.compile"]
    lines = [
        "# kiln vs PyTensor, numpy, onnxruntime and PyTorch",
        "",
        f"Machine: {machine()}.",
        f"numpy {np.__version__}, PyTensor {pytensor.__version__ if pytensor else 'not installed'}, "
        f"onnxruntime {ort.__version__}, "
        f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads). Produced by `bench/peers`.",
        "",
        "## Compile time (ms): graph -> callable in a fresh process",
        "",
        "Cold: empty cache (kiln: cache folder; PyTensor: compiledir). Warm: a second fresh process "
        "on the populated cache. Ratio: PyTensor's time / kiln's (higher is better for kiln).",
        "",
        "| graph | kiln cold | kiln warm | PyTensor cvm cold | PyTensor cvm warm | PyTensor c cold | PyTensor c warm "
        "| cold ratio (c) | warm ratio (c) | cold ratio (cvm) | warm ratio (cvm) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in compile_rows:
        if "cvm" not in r:
            continue
        (kc, kw), (vc, vw), (cc, cw) = r["kiln"], r["cvm"], r["c"]
        label = "MLP (3 Gemm + softmax)" if r["workload"] == "mlp" else "30-op elementwise"
        lines.append(f"| {label} | {kc:.1f} | {kw:.2f} | {vc:.0f} | {vw:.0f} | {cc:.0f} | {cw:.0f} | "
                     f"{cc / kc:.1f}x | {cw / kw:.0f}x | {vc / kc:.1f}x | {vw / kw:.0f}x |")
    lines += [
        "",
        "## Run time (ms, median after a warm-up)",
        "",
        "chain: the 30-op elementwise chain on 4M float32; softmax: rows of (4096, 1024); MLP: "
        "examples/onnx/mlp at batch 32; CNN: examples/onnx/lenet at batch 32. In brackets: the "
        "peer's time / kiln's (above 1: kiln is faster).",
        "",
        "| workload | kiln | " + " | ".join(peers) + " |",
        "|---|---|" + "---|" * len(peers),
    ]
    for r in run_rows:
        cells = [f"{r[p]:.4g} ({r[p] / r['kiln']:.2f}x)" if p in r else "n/a" for p in peers]
        lines.append(f"| {r['workload']} | {r['kiln']:.4g} | " + " | ".join(cells) + " |")
    if any("torch.compile build s" in r for r in run_rows):
        lines += ["", "torch.compile's first call (its compile) took " +
                  ", ".join(f"{r['workload']} {r['torch.compile build s']:.1f} s" for r in run_rows) + "."]
    lines += [
        "",
        "## Memory bandwidth",
        "",
        f"STREAM-style triad (bench/triad): {triad_gbs.get(1, 0):.1f} GB/s on one core, "
        f"{max(triad_gbs.values()):.1f} GB/s on all. kiln's 30-op chain moves 3 x 4M floats "
        f"(two inputs, one output) in {run_rows[0]['kiln']:.3g} ms: {chain_gbs:.1f} GB/s.",
    ]
    os.makedirs(os.path.dirname(args.results), exist_ok=True)
    with open(args.results, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"\nwritten to {args.results}")


if __name__ == "__main__":
    main()
