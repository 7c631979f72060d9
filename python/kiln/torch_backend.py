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
"""
import operator
import time
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
# "dynamic" (some input has symbolic sizes: one kiln module serves them all).
REPORTS = []


def _meta(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _tensor_ok(val):
    """A CPU tensor of a dtype kiln has (its sizes may be symbolic)."""
    return isinstance(val, torch.Tensor) and val.dtype in _DTYPES and val.device.type == "cpu"


def _static(val):
    return not any(isinstance(s, torch.SymInt) for s in val.shape)


def _value_ok(val):
    """A value PyTorch may compute while compiling: tensors of static shape."""
    if isinstance(val, (tuple, list)):
        return all(_tensor_ok(v) and _static(v) for v in val)
    return _tensor_ok(val) and _static(val)


def _is_size(node):
    return isinstance(_meta(node), torch.SymInt)


def _constant_nodes(gm, frozen):
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
                torch.Tag.nondeterministic_seeded in target.tags or not _value_ok(_meta(node)):
            continue
        if all(a in known for a in node.all_input_nodes):
            known.add(node)
    return known


class _Support(OperatorSupport):
    """An op kiln lowers, on CPU tensors of kiln's dtypes with static shapes, or one PyTorch
    computes while compiling; a tuple output (max-pool indices, batch-norm statistics) only
    where nothing reads its extra parts, unless kiln computes them all."""

    def __init__(self, constants=frozenset()):
        super().__init__()
        self.constants = constants

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
            if not present or not all(_tensor_ok(v) for v in present):
                return False
            if node.target not in _ALL_OUTPUTS and any(
                    u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
                return False
        elif not _tensor_ok(val):
            return False
        inputs = [_meta(a) for a in node.all_input_nodes if not _is_size(a)]
        if node.target in BOOL_ONLY and any(v.dtype != torch.bool for v in inputs):
            return False
        if node.target in CHECKS and not CHECKS[node.target](node):
            return False
        return all(_tensor_ok(v) for v in inputs)


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
                if i in frozen:
                    env[node] = g.parameter(frozen[i], f"weight{i}")
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
    the positions of the partition's inputs that are frozen weights to their tensors."""

    def __init__(self, gm, frozen=None, constants=frozenset()):
        super().__init__()
        self.gm = gm
        self.constants = constants
        self.frozen = dict(frozen or {})
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
        # A miss answers its first calls through the generic tier while the module compiles.
        self.fn = _kiln.compile_graph(self.graph, tiered=True)
        self.seconds = {"lower_s": lowered - start, "compile_s": time.perf_counter() - lowered}

    def source(self):
        """The C source kiln generated for this partition."""
        return _kiln.source(self.graph)

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
        outs = [torch.from_dlpack(t) for t in self.fn(*(args[i] for i in self.dynamic))]
        return outs[0] if self.single else tuple(outs)


_warned = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _op_name(target):
    return getattr(target, "__name__", str(target))


def _frozen_placeholders(gm, frozen_inputs):
    """The names of the graph's placeholders that are frozen weights, with their tensors (the
    fused graph has new nodes, the same names), where aot_autograd kept the inputs as dynamo
    gave them (the same count, shapes and dtypes)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if not frozen_inputs or len(placeholders) != frozen_inputs[0]:
        return {}
    out = {}
    for i, t in frozen_inputs[1].items():
        val = _meta(placeholders[i])
        if _tensor_ok(val) and val.shape == t.shape and val.dtype == t.dtype:
            out[placeholders[i].name] = t
    return out


def _lower_graph(gm, example_inputs, frozen_inputs=None):
    report = {"kiln_graphs": 0, "pytorch_ops": [], "frozen": 0, "constants": 0, "lower_s": 0.0,
              "compile_s": 0.0, "dynamic": False}
    REPORTS.append(report)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = _meta(node)
            if isinstance(val, torch.Tensor) and not _tensor_ok(val):
                _warn_once("kiln: a graph with non-CPU tensors runs in PyTorch")
                report["pytorch_ops"] = ["(the whole graph)"]
                return gm
            if isinstance(val, torch.Tensor) and not _static(val):
                report["dynamic"] = True
    frozen = _frozen_placeholders(gm, frozen_inputs)
    constants = _constant_nodes(gm, frozen)
    for node in constants:  # the partitions' copies of these nodes carry the mark
        node.meta["kiln_constant"] = True
    support = _Support(constants)
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
            kiln_sub = KilnSubgraph(sub, sub_frozen, sub_constants)
        except _kiln.Error as e:  # kiln refused this part: it stays in PyTorch
            _warn_once(f"kiln: a part of the graph runs in PyTorch: {e}")
            report["pytorch_ops"].append("(a part kiln refused)")
            continue
        setattr(fused, call.target, kiln_sub)
        report["kiln_graphs"] += 1
        report["frozen"] += len(sub_frozen)
        report["constants"] += kiln_sub.evaluated
        for k, v in kiln_sub.seconds.items():
            report[k] += v
    fused.recompile()
    return fused


def _compiler(frozen_inputs):
    def compile_graph(gm, example_inputs):
        return make_boxed_func(_lower_graph(gm, example_inputs, frozen_inputs).forward)
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


def kiln_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend (registered as "kiln")."""
    compiler = _compiler(_frozen_inputs(example_inputs))
    return aot_autograd(fw_compiler=compiler, bw_compiler=_compiler(None),
                        decompositions=core_aten_decompositions())(gm, example_inputs)


def register():
    from torch._dynamo import list_backends, register_backend
    if "kiln" not in list_backends(exclude_tags=()):
        register_backend(name="kiln")(kiln_backend)
