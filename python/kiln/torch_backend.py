"""kiln as a torch.compile backend: torch.compile(model, backend="kiln").

The ATen graph dynamo captures goes through aot_autograd with the core ATen decompositions.
Each connected run of ops kiln supports becomes one kiln graph, compiled through the kernel
cache (so a second process, or a second model with the same layers, compiles nothing); ops
kiln lacks stay in PyTorch, named once in a warning, so a model never fails because of kiln.
Tensors cross between PyTorch and kiln through DLPack without copies. Graphs with symbolic
(dynamic) shapes run in PyTorch as captured, with a warning.
"""
import operator
import warnings

import torch
from torch._decomp import core_aten_decompositions
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupport

from . import _kiln
from . import graph as kg

aten = torch.ops.aten

_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
           torch.int32: "int32", torch.bool: "bool", torch.uint8: "uint8", torch.int8: "int8"}

# aten overload -> lowering(ctx, *args, **kwargs) -> Var, or a tuple for multi-output ops.
LOWERINGS = {}
# The overloads this process has lowered so far (the op tests check every lowering ran).
LOWERED = set()


def _lowers(*ops):
    def register(fn):
        for op in ops:
            LOWERINGS[op] = fn
        return fn
    return register


class _Ctx:
    """What a lowering needs: the graph, and scalars in the dtype of the Var they meet."""

    def __init__(self, g):
        self.g = g

    def operand(self, v, like):
        if isinstance(v, kg.Var):
            return v
        dtype = like.dtype if isinstance(like, kg.Var) else "float32"
        if dtype == "bool":
            dtype = "float32"
        return self.g.scalar(float(v), dtype)


def _binary(kiln_op):
    def lower(ctx, a, b, alpha=None):
        like = a if isinstance(a, kg.Var) else b
        a, b = ctx.operand(a, like), ctx.operand(b, like)
        if alpha is not None and alpha != 1:
            b = kg.apply("mul", [b, ctx.operand(alpha, b)])
        return kg.apply(kiln_op, [a, b])
    return lower


for _aten_ops, _kiln_op in [((aten.add.Tensor, aten.add.Scalar), "add"),
                            ((aten.sub.Tensor, aten.sub.Scalar), "sub"),
                            ((aten.mul.Tensor, aten.mul.Scalar), "mul"),
                            ((aten.div.Tensor, aten.div.Scalar), "div"),
                            ((aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar), "pow"),
                            ((aten.maximum.default,), "maximum"),
                            ((aten.minimum.default,), "minimum"),
                            ((aten.gt.Tensor, aten.gt.Scalar), "gt"),
                            ((aten.lt.Tensor, aten.lt.Scalar), "lt"),
                            ((aten.ge.Tensor, aten.ge.Scalar), "ge"),
                            ((aten.le.Tensor, aten.le.Scalar), "le"),
                            ((aten.eq.Tensor, aten.eq.Scalar), "eq"),
                            ((aten.ne.Tensor, aten.ne.Scalar), "ne")]:
    _lowers(*_aten_ops)(_binary(_kiln_op))

for _aten_op, _kiln_op in [(aten.relu.default, "relu"), (aten.exp.default, "exp"),
                           (aten.log.default, "log"), (aten.sqrt.default, "sqrt"),
                           (aten.neg.default, "neg"), (aten.abs.default, "abs"),
                           (aten.tanh.default, "tanh"), (aten.sigmoid.default, "sigmoid"),
                           (aten.erf.default, "erf"), (aten.reciprocal.default, "reciprocal"),
                           (aten.sin.default, "sin"), (aten.cos.default, "cos"),
                           (aten.floor.default, "floor"), (aten.ceil.default, "ceil"),
                           (aten.log1p.default, "log1p"), (aten.expm1.default, "expm1"),
                           (aten.logical_not.default, "logical_not")]:
    LOWERINGS[_aten_op] = (lambda k: lambda ctx, x: kg.apply(k, [x]))(_kiln_op)


@_lowers(aten.rsqrt.default)
def _rsqrt(ctx, x):
    return kg.reciprocal(kg.sqrt(x))


@_lowers(aten.gelu.default)
def _gelu(ctx, x, approximate="none"):
    if approximate == "none":
        return kg.gelu(x)
    inner = (x + x * x * x * 0.044715) * 0.7978845608028654
    return x * 0.5 * (kg.tanh(inner) + 1.0)


@_lowers(aten.silu.default)
def _silu(ctx, x):
    return x * kg.sigmoid(x)


@_lowers(aten.hardtanh.default, aten.clamp.default)
def _clamp(ctx, x, lo=None, hi=None):
    if lo is not None:
        x = kg.maximum(x, ctx.operand(lo, x))
    if hi is not None:
        x = kg.minimum(x, ctx.operand(hi, x))
    return x


@_lowers(aten.hardsigmoid.default)
def _hardsigmoid(ctx, x):
    return _clamp(ctx, x / 6.0 + 0.5, 0.0, 1.0)


@_lowers(aten.hardswish.default)
def _hardswish(ctx, x):
    return x * _hardsigmoid(ctx, x)


@_lowers(aten.where.self)
def _where(ctx, c, a, b):
    like = a if isinstance(a, kg.Var) else b
    return kg.where(c, ctx.operand(a, like), ctx.operand(b, like))


@_lowers(aten.clone.default, aten.alias.default, aten.detach.default)
def _identity(ctx, x, **kwargs):
    return kg.apply("reshape", [x], shape=[0] * x.ndim)  # a copy kiln may elide


@_lowers(aten._to_copy.default)
def _to_copy(ctx, x, dtype=None, **kwargs):
    if dtype is None or _DTYPES[dtype] == x.dtype:
        return _identity(ctx, x)
    return kg.cast(x, _DTYPES[dtype])


@_lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx, x, shape):
    return kg.reshape(x, [int(d) for d in shape])


@_lowers(aten.permute.default)
def _permute(ctx, x, dims):
    return kg.transpose(x, [d % x.ndim for d in dims])


@_lowers(aten.expand.default)
def _expand(ctx, x, shape):
    lead = len(shape) - x.ndim
    out = [x.shape[i - lead] if d == -1 else int(d) for i, d in enumerate(shape)]
    return kg.apply("expand", [x], shape=out)


@_lowers(aten.unsqueeze.default)
def _unsqueeze(ctx, x, dim):
    dim = dim % (x.ndim + 1)
    shape = list(x.shape)
    return kg.reshape(x, shape[:dim] + [1] + shape[dim:])


@_lowers(aten.squeeze.dims, aten.squeeze.dim)
def _squeeze(ctx, x, dims):
    dims = [dims] if isinstance(dims, int) else dims
    dims = {d % x.ndim for d in dims if x.shape[d % x.ndim] == 1}
    return kg.reshape(x, [s for i, s in enumerate(x.shape) if i not in dims])


@_lowers(aten.cat.default)
def _cat(ctx, xs, dim=0):
    return kg.concat(xs, dim % xs[0].ndim)


@_lowers(aten.slice.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    size = x.shape[dim]
    start = 0 if start is None else start
    end = size if end is None or end > size else end
    return kg.apply("slice", [x], starts=[int(start)], ends=[int(end)], axes=[dim],
                    steps=[int(step)])


@_lowers(aten.select.int)
def _select(ctx, x, dim, index):
    dim %= x.ndim
    index %= x.shape[dim]
    s = kg.apply("slice", [x], starts=[index], ends=[index + 1], axes=[dim])
    return kg.reshape(s, [d for i, d in enumerate(x.shape) if i != dim])


@_lowers(aten.mm.default, aten.bmm.default, aten.matmul.default)
def _mm(ctx, a, b):
    return kg.matmul(a, b)


@_lowers(aten.addmm.default)
def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    return kg.gemm(a, b, bias, alpha=alpha, beta=beta)


@_lowers(aten.convolution.default)
def _conv(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    ins = [x, w] + ([b] if b is not None else [])
    return kg.apply("conv", ins, strides=list(stride), pads=list(padding) + list(padding),
                    dilations=list(dilation), group=int(groups),
                    kernel_shape=list(w.shape[2:]))


@_lowers(aten._native_batch_norm_legit_no_training.default)
def _batch_norm(ctx, x, w, b, mean, var, momentum, eps):
    k = kg.reciprocal(kg.sqrt(var + float(eps)))
    if w is not None:
        k = k * w
    shift = -(mean * k) if b is None else b - mean * k
    shape = [-1] + [1] * (x.ndim - 2)
    return (x * kg.reshape(k, shape) + kg.reshape(shift, shape), None, None)


@_lowers(aten.native_layer_norm.default)
def _layer_norm(ctx, x, shape, w, b, eps):
    axes = list(range(x.ndim - len(shape), x.ndim))
    mean = kg.mean(x, axes, True)
    d = x - mean
    inv = kg.reciprocal(kg.sqrt(kg.mean(d * d, axes, True) + float(eps)))
    y = d * inv
    if w is not None:
        y = y * w
    if b is not None:
        y = y + b
    return (y, mean, inv)


def _pool_props(kernel, stride, padding, ceil_mode, dilation=None):
    stride = list(stride) or list(kernel)
    padding = list(padding) if len(padding) == len(kernel) else list(padding) * len(kernel)
    props = dict(kernel_shape=list(kernel), strides=stride, pads=padding + padding,
                 ceil_mode=int(bool(ceil_mode)))
    if dilation is not None:
        props["dilations"] = list(dilation)
    return props


@_lowers(aten.max_pool2d_with_indices.default)
def _max_pool(ctx, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    dilation = list(dilation) if len(dilation) == len(kernel) else list(dilation) * len(kernel)
    return (kg.apply("max_pool", [x], **_pool_props(kernel, stride, padding, ceil_mode, dilation)),
            None)


@_lowers(aten.avg_pool2d.default)
def _avg_pool(ctx, x, kernel, stride=(), padding=(0,), ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    props = _pool_props(kernel, stride, padding, ceil_mode)
    return kg.apply("average_pool", [x], count_include_pad=int(bool(count_include_pad)), **props)


@_lowers(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(ctx, x, output_size):
    h, w = x.shape[-2:]
    oh, ow = output_size
    if (oh, ow) == (1, 1):
        return kg.mean(x, [x.ndim - 2, x.ndim - 1], True)
    if h % oh or w % ow:
        raise _kiln.UnsupportedError("adaptive average pooling to a size that does not divide "
                                     "the input")
    return kg.apply("average_pool", [x], kernel_shape=[h // oh, w // ow],
                    strides=[h // oh, w // ow])


def _reducer(fn):
    def lower(ctx, x, dims=None, keepdim=False, dtype=None):
        dims = list(range(x.ndim)) if not dims else [d % x.ndim for d in dims]
        return fn(x, dims, bool(keepdim))
    return lower


LOWERINGS[aten.mean.dim] = LOWERINGS[aten.mean.default] = _reducer(kg.mean)
LOWERINGS[aten.sum.default] = _reducer(kg.sum)
LOWERINGS[aten.sum.dim_IntList] = _reducer(kg.sum)
LOWERINGS[aten.amax.default] = _reducer(kg.max)
LOWERINGS[aten.amin.default] = _reducer(kg.min)


@_lowers(aten._softmax.default)
def _softmax(ctx, x, dim, half_to_float=False):
    return kg.softmax(x, dim % x.ndim)


@_lowers(aten._log_softmax.default)
def _log_softmax(ctx, x, dim, half_to_float=False):
    return kg.log_softmax(x, dim % x.ndim)


@_lowers(aten.embedding.default)
def _embedding(ctx, w, idx, padding_idx=-1, *rest):
    return kg.apply("gather", [w, idx], axis=0)


@_lowers(aten.constant_pad_nd.default)
def _pad(ctx, x, pad, value=0):
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for i in range(len(pad) // 2):  # torch lists the last dimension first
        begins[x.ndim - 1 - i], ends[x.ndim - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    return kg.apply("pad", [x], pads=begins + ends, value=float(value))


def _meta(node):
    return node.meta.get("val") if hasattr(node, "meta") else None


def _tensor_ok(val):
    return isinstance(val, torch.Tensor) and val.dtype in _DTYPES and val.device.type == "cpu" \
        and not any(isinstance(s, torch.SymInt) for s in val.shape)


class _Support(OperatorSupport):
    """An op kiln lowers, on CPU tensors of kiln's dtypes with static shapes; a tuple output
    (max-pool indices, batch-norm statistics) only where nothing reads its extra parts."""

    def is_node_supported(self, submodules, node):
        if node.op != "call_function":
            return False
        if node.target is operator.getitem:
            src = node.args[0]
            return src.target in LOWERINGS and (node.args[1] == 0 or src.target in _ALL_OUTPUTS)
        if node.target not in LOWERINGS:
            return False
        val = _meta(node)
        if isinstance(val, (tuple, list)):
            if not _tensor_ok(val[0]):
                return False
            if node.target not in _ALL_OUTPUTS and any(
                    u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
                return False
        elif not _tensor_ok(val):
            return False
        return all(_tensor_ok(_meta(a)) for a in node.all_input_nodes)


# Multi-output ops whose every output kiln computes (the others: only the first).
_ALL_OUTPUTS = {aten.native_layer_norm.default}


class KilnSubgraph(torch.nn.Module):
    """One partition as a compiled kiln function, called with PyTorch tensors."""

    def __init__(self, gm):
        super().__init__()
        g = kg.Graph("torch_partition")
        ctx = _Ctx(g)
        env = {}
        inputs = []
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                val = _meta(node)
                env[node] = g.input(f"in{len(inputs)}", _DTYPES[val.dtype], list(val.shape))
                inputs.append(node)
            elif node.op == "call_function":
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                if node.target is operator.getitem:
                    env[node] = args[0][args[1]]
                else:
                    env[node] = LOWERINGS[node.target](ctx, *args, **kwargs)
                    LOWERED.add(node.target)
            elif node.op == "output":
                out = node.args[0]
                self.single = not isinstance(out, (tuple, list))
                outs = [out] if self.single else list(out)
                # An output that is an input passes through a copy kiln makes.
                g.set_outputs([_identity(ctx, env[o]) if o.op == "placeholder" else env[o]
                               for o in outs])
        self.fn = _kiln.compile_graph(g)

    def forward(self, *args):
        outs = [torch.from_dlpack(t) for t in self.fn(*args)]
        return outs[0] if self.single else tuple(outs)


_warned = set()


def _warn_once(message):
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, stacklevel=3)


def _op_name(target):
    return getattr(target, "__name__", str(target))


def _lower_graph(gm, example_inputs):
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = _meta(node)
            if isinstance(val, torch.SymInt) or (isinstance(val, torch.Tensor)
                                                 and not _tensor_ok(val)):
                _warn_once("kiln: a graph with dynamic shapes or non-CPU tensors runs in "
                           "PyTorch (compile with dynamic=False to use kiln)")
                return gm
    support = _Support()
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    missing = sorted({_op_name(n.target) for n in gm.graph.nodes
                      if n.op == "call_function" and not support.is_node_supported({}, n)
                      and n.target is not operator.getitem})
    if missing:
        _warn_once("kiln: these ops run in PyTorch: " + ", ".join(missing))
    fused = partitioner.fuse_partitions(partitions)
    for name, sub in list(fused.named_children()):
        if not name.startswith("fused_"):
            continue
        try:
            setattr(fused, name, KilnSubgraph(sub))
        except _kiln.Error as e:  # kiln refused this part: it stays in PyTorch
            _warn_once(f"kiln: a part of the graph runs in PyTorch: {e}")
    fused.recompile()
    return fused


def _compiler(gm, example_inputs):
    return make_boxed_func(_lower_graph(gm, example_inputs).forward)


def kiln_backend(gm, example_inputs, **kwargs):
    """The torch.compile backend (registered as "kiln")."""
    return aot_autograd(fw_compiler=_compiler, bw_compiler=_compiler,
                        decompositions=core_aten_decompositions())(gm, example_inputs)


def register():
    from torch._dynamo import list_backends, register_backend
    if "kiln" not in list_backends(exclude_tags=()):
        register_backend(name="kiln")(kiln_backend)
