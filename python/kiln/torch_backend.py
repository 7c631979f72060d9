"""kiln as a torch.compile backend: torch.compile(model, backend="kiln").

The ATen graph dynamo captures goes through aot_autograd with the core ATen decompositions.
Each connected run of ops kiln supports becomes one kiln graph, compiled through the kernel
cache (so a second process, or a second model with the same layers, compiles nothing); ops
kiln lacks stay in PyTorch, named once in a warning, so a model never fails because of kiln.
Tensors cross between PyTorch and kiln through DLPack without copies.

For inference (grad disabled), a module's parameters and buffers are frozen: they enter kiln as
weights of its graph, so folding, packing and layouts apply as for an ONNX model. A frozen
tensor changed in place (its version counter moves) or replaced is prepared again before the
next call. Ops whose inputs are all known while compiling (a causal mask from arange and full)
are computed once by PyTorch. With grad enabled, weights stay inputs. Graphs with symbolic
(dynamic) shapes run in PyTorch as captured, with a warning.

CUDA tensors run on kiln's CUDA backend: a graph whose tensors are all on the GPU is compiled
with device inputs and outputs (device_io), its inputs and outputs cross through DLPack device
pointers, and its work goes on PyTorch's current stream, after what PyTorch enqueued there.
`options={"device": "cuda"}` (or KILN_TORCH_DEVICE=cuda) sends CPU tensors' graphs to the
CUDA backend too: on kiln's CUDA emulator, CPU tensors stand in for device memory, so the
whole path is exercised without a GPU.
"""
import atexit
import os
import operator
import time
import weakref
import warnings

import torch
from torch._decomp import core_aten_decompositions
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import _kiln
from . import graph as kg
from .torch_lowerings import _DTYPES, BOOL_ONLY, CHECKS, LOWERED, LOWERINGS, Ctx, copy_of
from .torch_shapes import SymDim, dim_of, shape_of

# What each graph the backend compiled became, newest last: a dict with "kiln_graphs" (how
# many kiln graphs), "pytorch_ops" (ops left to PyTorch), "frozen" (weights entered as kiln
# weights), "constants" (ops PyTorch computed while compiling), and the seconds spent
# lowering ("lower_s") and in kiln's compile ("compile_s", a cache hit or a build), and
# "dynamic" (some input has symbolic sizes: one kiln module serves them all), "device" (kiln's
# backend, "cpu" or "cuda device_io"; None when the graph stayed in PyTorch) and "subgraphs"
# (weak references to the KilnSubgraph modules).
REPORTS = []


def _meta(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _tensor_ok(val, device="cpu"):
    """A tensor of a dtype kiln has on the graph's device type (its sizes may be symbolic)."""
    return isinstance(val, torch.Tensor) and val.dtype in _DTYPES and val.device.type == device


def _static(val):
    return not any(isinstance(s, torch.SymInt) for s in val.shape)


def _value_ok(val, device):
    """A value PyTorch may compute while compiling: tensors of static shape."""
    if isinstance(val, (tuple, list)):
        return all(_tensor_ok(v, device) and _static(v) for v in val)
    return _tensor_ok(val, device) and _static(val)


def _is_size(node):
    return isinstance(_meta(node), torch.SymInt)


def _constant_nodes(gm, frozen, device):
    """The nodes computable while compiling: pure ops whose inputs are all such nodes (an op
    without tensor inputs, like arange or full, included). Frozen weights do not count: kiln
    folds what derives from them itself, and re-prepares it when they change."""
    known = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        target = node.target
        if target is operator.getitem:
            if node.args[0] in known:
                known.add(node)
            continue
        if not isinstance(target, torch._ops.OpOverload) or \
                torch.Tag.nondeterministic_seeded in target.tags or \
                not _value_ok(_meta(node), device):
            continue
        if all(a in known for a in node.all_input_nodes):
            known.add(node)
    return known


class _Support(OperatorSupport):
    """An op kiln lowers, on tensors of kiln's dtypes on the graph's device type, or one
    PyTorch computes while compiling; a tuple output (max-pool indices, batch-norm statistics)
    only where nothing reads its extra parts, unless kiln computes them all."""

    def __init__(self, constants=frozenset(), device="cpu"):
        super().__init__()
        self.constants = constants
        self.device = device

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node in self.constants or _is_size(node):  # a size: kiln tracks it symbolically
            return True
        if node.target is operator.getitem:
            src = node.args[0]
            return src.target in LOWERINGS and (node.args[1] == 0 or src.target in _ALL_OUTPUTS)
        if node.target not in LOWERINGS:
            return False
        val = _meta(node)
        if isinstance(val, (tuple, list)):
            present = [v for v in val if v is not None]  # (gradients not asked for are None)
            if not present or not all(_tensor_ok(v, self.device) for v in present):
                return False
            if node.target not in _ALL_OUTPUTS and any(
                    u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
                return False
        elif not _tensor_ok(val, self.device):
            return False
        inputs = [_meta(a) for a in node.all_input_nodes if not _is_size(a)]
        if node.target in BOOL_ONLY and any(v.dtype != torch.bool for v in inputs):
            return False
        if node.target in CHECKS and not CHECKS[node.target](node):
            return False
        return all(_tensor_ok(v, self.device) for v in inputs)


# Multi-output ops whose every output kiln computes (the others: only the first).
_ALL_OUTPUTS = {torch.ops.aten.native_layer_norm.default, torch.ops.aten.split_with_sizes.default,
                torch.ops.aten.convolution_backward.default,
                torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
                torch.ops.aten.max_pool2d_with_indices.default,
                torch.ops.aten._native_batch_norm_legit_functional.default,
                torch.ops.aten.max.dim, torch.ops.aten.min.dim, torch.ops.aten.topk.default,
                torch.ops.aten.native_group_norm.default}


def _evaluate(node, env):
    """Runs `node` in PyTorch on the values computed while compiling."""
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    if node.target is operator.getitem:
        return args[0][args[1]]
    with torch.no_grad():
        return node.target(*args, **kwargs)


def _note_shapes(ctx, value, val):
    """Records the symbolic shapes of a lowered node's Vars (Var.shape has None there)."""
    if isinstance(value, (tuple, list)) and isinstance(val, (tuple, list)):
        for v, m in zip(value, val):
            _note_shapes(ctx, v, m)
    elif isinstance(value, kg.Var) and isinstance(val, torch.Tensor):
        ctx.set_shape(value, shape_of(val))


def build_graph(gm, frozen, constants, name="torch_partition", input_names=None):
    """gm (an ATen graph) as a kiln graph: `frozen` maps positions among gm's placeholders to
    the tensors that are its weights, the others are inputs (named input_names[i], else
    in{i}); nodes in `constants` are computed now by PyTorch. Returns (graph, whether gm
    returns one value rather than a tuple, how many nodes PyTorch computed)."""
    # The fake tensor mode tracing may still be active: what PyTorch computes here is real.
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        g = kg.Graph(name)
        ctx = Ctx(g)
        env = {}  # node -> kiln Var, or a torch.Tensor PyTorch computed while compiling
        evaluated = 0
        placeholders = 0
        single = True

        def var(v):
            return ctx.materialize(v) if isinstance(v, torch.Tensor) else v

        for node in gm.graph.nodes:
            ctx.node = node
            if _is_size(node):  # a size (an input or arithmetic on sizes): symbolic
                env[node] = dim_of(_meta(node))
                placeholders += node.op == "placeholder"
            elif node.op == "placeholder":
                i = placeholders
                placeholders += 1
                if i in frozen:  # kiln takes weights from host memory (and uploads them once)
                    env[node] = g.parameter(frozen[i].detach().cpu(), f"weight{i}")
                else:
                    val = _meta(node)
                    dims = shape_of(val)
                    env[node] = g.input(input_names[i] if input_names else f"in{i}",
                                        _DTYPES[val.dtype],
                                        [None if isinstance(d, SymDim) else d for d in dims])
                    ctx.set_shape(env[node], dims)
                    for d, size in enumerate(dims):
                        if isinstance(size, SymDim) and size.expr.is_Symbol:
                            ctx.sources.setdefault(size.expr, (env[node], d))
            elif node.op == "call_function":
                if node in constants:
                    env[node] = _evaluate(node, env)
                    evaluated += 1
                    continue
                args = torch.fx.node.map_arg(node.args, lambda n: var(env[n]))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: var(env[n]))
                if node.target is operator.getitem:
                    env[node] = args[0][args[1]]
                else:
                    env[node] = LOWERINGS[node.target](ctx, *args, **kwargs)
                    LOWERED.add(node.target)
                _note_shapes(ctx, env[node], _meta(node))
            elif node.op == "output":
                out = node.args[0]
                single = not isinstance(out, (tuple, list))
                outs = [out] if single else list(out)
                # An output that is an input, a weight or a constant (a view lowered to its
                # source included) passes through a copy kiln makes.
                sources = {id(env[n]) for n in env if n.op == "placeholder"}
                g.set_outputs([copy_of(var(env[o]))
                               if isinstance(env[o], torch.Tensor) or id(env[o]) in sources
                               else env[o] for o in outs])
    return g, single, evaluated


class KilnSubgraph(torch.nn.Module):
    """One partition as a compiled kiln function, called with PyTorch tensors. `frozen` maps
    the positions of the partition's inputs that are frozen weights to their tensors. `target`
    says where it runs (see _Target)."""

    def __init__(self, gm, frozen=None, constants=frozenset(), target=None):
        super().__init__()
        self.gm = gm
        self.constants = constants
        self.frozen = dict(frozen or {})
        self.target = target or _Target("cpu", "cpu")
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        # kiln's inputs: the tensors not frozen (a size argument is known from them).
        self.dynamic = [i for i, n in enumerate(placeholders)
                        if i not in self.frozen and not _is_size(n)]
        self._build()

    def _build(self):
        # The tensors are held, so a storage kiln froze cannot be freed and its address reused.
        self.versions = {i: (t, t.data_ptr(), t._version) for i, t in self.frozen.items()}
        start = time.perf_counter()
        self.graph, self.single, self.evaluated = build_graph(self.gm, self.frozen,
                                                              self.constants)
        lowered = time.perf_counter()
        t = self.target
        # A miss answers its first calls through the generic tier (a host one) while the
        # module compiles.
        self.fn = _kiln.compile_graph(self.graph, t.kiln_device, tiered=t.kiln_device == "cpu",
                                      device_io=t.device_io)
        self.seconds = {"lower_s": lowered - start, "compile_s": time.perf_counter() - lowered}

    def source(self):
        """The C source kiln generated for this partition."""
        return _kiln.source(self.graph, self.target.kiln_device)

    def _stale(self, args):
        for i, (t, ptr, version) in self.versions.items():
            a = args[i]
            # dynamo may pass a weight as an alias of the tensor frozen: same storage, and the
            # version counter aliases share.
            if a._version != version or (a is not t and a.data_ptr() != ptr):
                return True
        return False

    def forward(self, *args):
        if self.frozen and self._stale(args):
            # A weight changed in place or was replaced: the module is the same (a memo hit),
            # its weights are prepared again.
            self.frozen = {i: args[i] for i in self.frozen}
            self._build()
        inputs = [args[i] for i in self.dynamic]
        if self.target.device_io:
            # Device inputs are dense (kiln's device kernels read them so); PyTorch's work
            # producing them is on its current stream, and kiln's goes after it there.
            inputs = [a.contiguous() for a in inputs]
            stream = None
            if self.target.torch_device == "cuda":
                stream = torch.cuda.current_stream(inputs[0].device if inputs else None)
                stream = stream.cuda_stream
            results = self.fn.run(inputs, stream=stream)
        else:
            results = self.fn(*inputs)
        outs = [torch.from_dlpack(t) for t in results]
        return outs[0] if self.single else tuple(outs)


_warned = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _op_name(target):
    return getattr(target, "__name__", str(target))


class _Target:
    """Where a graph's kiln functions run: `torch_device` is the device type of its tensors
    ("cpu" or "cuda"), `kiln_device` kiln's backend; with device_io the tensors cross as
    device memory (CUDA tensors, or CPU ones on kiln's emulator, whose device memory is the
    host's)."""

    def __init__(self, torch_device, kiln_device):
        self.torch_device = torch_device
        self.kiln_device = kiln_device
        self.device_io = kiln_device == "cuda" and (torch_device == "cuda" or
                                                    _kiln.cuda_emulated())


def _target(gm, device_option):
    """The graph's _Target, or a reason it stays in PyTorch: its tensors on more than one
    device, on one kiln has no backend for, or on the GPU when kiln has no CUDA device."""
    types = set()
    for node in gm.graph.nodes:
        vals = _meta(node)
        for v in vals if isinstance(vals, (tuple, list)) else [vals]:
            if isinstance(v, torch.Tensor):
                types.add(v.device.type)
                if v.device.type == "cuda" and v.device.index not in (None, 0):
                    return None, f"a graph on {v.device} runs in PyTorch (kiln runs on cuda:0)"
    if len(types) > 1:
        return None, f"a graph with tensors on {' and '.join(sorted(types))} runs in PyTorch"
    torch_device = types.pop() if types else "cpu"
    if torch_device not in ("cpu", "cuda"):
        return None, f"a graph with {torch_device} tensors runs in PyTorch"
    kiln_device = "cuda" if torch_device == "cuda" else device_option
    if kiln_device not in ("cpu", "cuda"):
        raise ValueError(f"kiln backend: device must be 'cpu' or 'cuda', got {kiln_device!r}")
    if kiln_device == "cuda":
        try:
            _kiln.cuda_device()
        except _kiln.Error as e:
            return None, f"a graph on the GPU runs in PyTorch: {e}"
    return _Target(torch_device, kiln_device), None


def _frozen_placeholders(gm, frozen_inputs, device):
    """The names of the graph's placeholders that are frozen weights, with their tensors (the
    fused graph has new nodes, the same names), where aot_autograd kept the inputs as dynamo
    gave them (the same count, shapes and dtypes)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not frozen_inputs or len(placeholders) != frozen_inputs[0]:
        return {}
    out = {}
    for i, t in frozen_inputs[1].items():
        val = _meta(placeholders[i])
        if _tensor_ok(val, device) and val.shape == t.shape and val.dtype == t.dtype:
            out[placeholders[i].name] = t
    return out


def _lower_graph(gm, example_inputs, frozen_inputs=None, device_option="cpu"):
    report = {"kiln_graphs": 0, "pytorch_ops": [], "frozen": 0, "constants": 0, "lower_s": 0.0,
              "compile_s": 0.0, "dynamic": False, "device": None, "subgraphs": []}
    REPORTS.append(report)
    target, why = _target(gm, device_option)
    if target is None:
        _warn_once("kiln: " + why)
        report["pytorch_ops"] = ["(the whole graph)"]
        return gm
    report["device"] = target.kiln_device + (" device_io" if target.device_io else "")
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = _meta(node)
            if isinstance(val, torch.Tensor) and not _static(val):
                report["dynamic"] = True
    frozen = _frozen_placeholders(gm, frozen_inputs, target.torch_device)
    constants = _constant_nodes(gm, frozen, target.torch_device)
    for node in constants:  # the partitions' copies of these nodes carry the mark
        node.meta["kiln_constant"] = True
    support = _Support(constants, target.torch_device)
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    missing = sorted({_op_name(n.target) for n in gm.graph.nodes
                      if n.op == "call_function" and not support.is_node_supported({}, n)
                      and n.target is not operator.getitem})
    report["pytorch_ops"] = missing
    if missing:
        _warn_once("kiln: these ops run in PyTorch: " + ", ".join(missing))
    fused = partitioner.fuse_partitions(partitions)
    for call in list(fused.graph.nodes):
        if call.op != "call_module" or not call.target.startswith("fused_"):
            continue
        sub = getattr(fused, call.target)
        # The partition's inputs are the call's arguments, in order.
        sub_frozen = {i: frozen[a.name] for i, a in enumerate(call.args)
                      if getattr(a, "op", None) == "placeholder" and a.name in frozen}
        sub_constants = {n for n in sub.graph.nodes if n.op == "call_function"
                         and n.meta.get("kiln_constant")}
        try:
            kiln_sub = KilnSubgraph(sub, sub_frozen, sub_constants, target)
        except _kiln.Error as e:  # kiln refused this part: it stays in PyTorch
            _warn_once(f"kiln: a part of the graph runs in PyTorch: {e}")
            report["pytorch_ops"].append("(a part kiln refused)")
            continue
        setattr(fused, call.target, kiln_sub)
        report["kiln_graphs"] += 1
        report["subgraphs"].append(weakref.ref(kiln_sub))
        report["frozen"] += len(sub_frozen)
        report["constants"] += kiln_sub.evaluated
        for k, v in kiln_sub.seconds.items():
            report[k] += v
    fused.recompile()
    return fused


def _compiler(frozen_inputs, device_option):
    def compile_graph(gm, example_inputs):
        return make_boxed_func(_lower_graph(gm, example_inputs, frozen_inputs,
                                            device_option).forward)
    return compile_graph


def _frozen_inputs(example_inputs):
    """For inference, the positions of dynamo's inputs that are a module's parameters and
    buffers (dynamo marks them static) with their tensors; None with grad enabled."""
    if torch.is_grad_enabled():
        return None
    frozen = {i: t for i, t in enumerate(example_inputs) if isinstance(t, torch.Tensor)
              and getattr(t, "_dynamo_static_input_type", None) is not None
              and not isinstance(t, torch._subclasses.FakeTensor)}
    return (len(example_inputs), frozen) if frozen else None


_RELEASE_AT_EXIT = []


def _release_at_exit():
    """Drops dynamo's compiled frames, which hold kiln's functions, before the interpreter
    tears kiln's extension down: otherwise they outlive it, and every script that used the
    backend ended with nanobind's warnings of leaked kiln.Function and Graph instances."""
    try:
        torch._dynamo.reset()
    except Exception:  # noqa: BLE001 -- the process is exiting; nothing is lost
        pass


def kiln_backend(gm, example_inputs, options=None, **kwargs):
    """The torch.compile backend (registered as "kiln"). options (torch.compile's):
    "device": where graphs of CPU tensors run, "cpu" (the default, else $KILN_TORCH_DEVICE)
    or "cuda"; graphs of CUDA tensors always run on kiln's CUDA backend."""
    if not _RELEASE_AT_EXIT:
        _RELEASE_AT_EXIT.append(atexit.register(_release_at_exit))
    options = dict(options or {})
    device = options.pop("device", os.environ.get("KILN_TORCH_DEVICE") or "cpu")
    if options:
        raise ValueError(f"kiln backend: unknown options {sorted(options)} (it takes 'device')")
    frozen = _frozen_inputs(example_inputs)
    compiler = _compiler(frozen, device)
    decompositions = core_aten_decompositions()
    if not torch.is_grad_enabled():
        # Inference: the safe softmax of scaled-dot-product attention stays one op, which
        # kiln lowers (torch_lowerings._safe_softmax). With grad, autograd needs its
        # decomposition for the backward.
        decompositions.pop(torch.ops.aten._safe_softmax.default, None)
    return aot_autograd(fw_compiler=compiler, bw_compiler=_compiler(None, device),
                        decompositions=decompositions)(gm, example_inputs)


def register():
    from torch._dynamo import list_backends, register_backend
    if "kiln" not in list_backends(exclude_tags=()):
        register_backend(name="kiln")(kiln_backend)
