"""How each ATen op becomes kiln ops: the lowering registry behind torch.compile(backend="kiln").

A lowering takes a Ctx and the op's arguments (kiln Vars where the op had tensors) and returns a
Var, or a tuple for a multi-output op. Ops whose inputs are all known while compiling (arange,
full, a causal mask built from them) are not lowered at all: the backend evaluates them in
PyTorch once and enters the result as a constant (see Ctx.materialize).
"""
import operator

import torch

from . import _kiln
from . import graph as kg
from .torch_shapes import _BIG, DimExprs, SymDim, is_symbolic, product, same, shape_of

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


# Constants up to this many elements go into the code (and the key); larger ones are bound as
# weights, as an ONNX initializer is.
_CODE_CONSTANT_LIMIT = 256


class Ctx:
    """What a lowering needs: the graph, scalars in the dtype of the Var they meet, and
    tensors PyTorch computed while compiling entered as kiln values."""

    def __init__(self, g):
        self.g = g
        self._count = 0
        self.node = None  # the FX node being lowered (build_graph sets it)
        self.sources = {}  # symbol -> (graph input Var, dimension): where each size comes from
        self._shapes = {}  # id(var) -> (var, its shape with SymDims): what Var.shape leaves None
        # What some Vars are views of, so a product reads through them as kiln's own importers
        # build it: id(var) -> (var, "t", src) for a 2-D transpose, (var, "merged", src) for a
        # reshape merging the leading dimensions of src (matmul's batch for bmm).
        self._origin = {}

    def set_shape(self, var, dims):
        self._shapes[id(var)] = (var, dims)

    def shape(self, var):
        """var's shape, symbolic sizes as SymDims."""
        entry = self._shapes.get(id(var))
        if entry is not None and entry[0] is var:
            return entry[1]
        if any(d is None for d in var.shape):
            raise _kiln.UnsupportedError("a dynamic size kiln lost track of")
        return list(var.shape)

    def out_shape(self):
        """The shape of the node's (first) output, symbolic sizes as SymDims."""
        val = self.node.meta["val"]
        return shape_of(val[0] if isinstance(val, (tuple, list)) else val)

    def with_dims(self, op, inputs, dims_props, **props):
        """apply(op) with props that are lists of sizes written as dimension expressions."""
        exprs = DimExprs(self.sources, inputs)
        texts = {k: exprs.text(v) for k, v in dims_props.items()}
        return kg.apply(op, exprs.inputs, **texts, **props)

    def reshape(self, x, dims):
        if not is_symbolic(dims):
            return kg.reshape(x, [int(d) for d in dims])
        return self.with_dims("reshape", [x], {"dims": dims})

    def size_scalar(self, d, dtype):
        """A symbolic size as a 0-D tensor of `dtype` (a size used in arithmetic)."""
        v = self.with_dims("dim_values", [], {"dims": [d]}, scalar=1, dtype="int64")
        return v if dtype == "int64" else kg.cast(v, dtype)

    def record(self, var, kind, src):
        self._origin[id(var)] = (var, kind, src)
        return var

    def origin(self, var, kind):
        entry = self._origin.get(id(var))
        return entry[2] if entry is not None and entry[0] is var and entry[1] == kind else None

    def operand(self, v, like):
        if isinstance(v, kg.Var):
            return v
        if isinstance(v, torch.Tensor):
            return self.materialize(v)
        dtype = like.dtype if isinstance(like, kg.Var) else "float32"
        if dtype == "bool":
            dtype = "float32"
        if isinstance(v, SymDim):
            return self.size_scalar(v, dtype)
        return self.g.scalar(float(v), dtype)

    def materialize(self, t, name=None):
        """A PyTorch tensor as a kiln constant (small) or weight (large)."""
        if t.dtype not in _DTYPES:
            raise _kiln.UnsupportedError(f"a constant of dtype {t.dtype}")
        t = t.detach().cpu().contiguous()  # computed on the GPU, perhaps: kiln takes host values
        self._count += 1
        if name is None:
            name = f"const{self._count}"
        if t.numel() <= _CODE_CONSTANT_LIMIT:
            return self.g.constant(t, name)
        return self.g.parameter(t, name)


_TORCH_DTYPES = {v: k for k, v in _DTYPES.items()}


def _promoted(a, b):
    """a and b in one dtype, PyTorch's promotion of theirs (a 0-D int64 size meeting a float
    tensor, say)."""
    if a.dtype == b.dtype:
        return a, b
    dtype = _DTYPES[torch.promote_types(_TORCH_DTYPES[a.dtype], _TORCH_DTYPES[b.dtype])]
    return (a if a.dtype == dtype else kg.cast(a, dtype),
            b if b.dtype == dtype else kg.cast(b, dtype))


def _in_result_dtype(ctx, a, b):
    """a and b in the dtype of the node's result, where that is a number (aten.div of integers
    is a true division: its result is float); compared operands in their common dtype."""
    a, b = _promoted(a, b)
    dtype = _DTYPES.get(ctx.node.meta["val"].dtype) if ctx.node is not None else None
    if dtype is None or dtype == "bool" or dtype == a.dtype:
        return a, b
    return kg.cast(a, dtype), kg.cast(b, dtype)


def _binary(kiln_op):
    def lower(ctx, a, b, alpha=None):
        like = a if isinstance(a, kg.Var) else b
        a, b = _in_result_dtype(ctx, ctx.operand(a, like), ctx.operand(b, like))
        if alpha is not None and alpha != 1:
            b = kg.apply("mul", [b, ctx.operand(alpha, b)])
        return kg.apply(kiln_op, [a, b])
    return lower


for _aten_ops, _kiln_op in [((aten.add.Tensor, aten.add.Scalar), "add"),
                            ((aten.sub.Tensor, aten.sub.Scalar), "sub"),
                            ((aten.mul.Tensor, aten.mul.Scalar), "mul"),
                            ((aten.div.Tensor, aten.div.Scalar), "div"),
                            ((aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar), "pow"),
                            ((aten.remainder.Tensor, aten.remainder.Scalar), "mod"),
                            ((aten.fmod.Tensor, aten.fmod.Scalar), "fmod"),
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
                           (aten.sign.default, "sign"), (aten.round.default, "round"),
                           (aten.sinh.default, "sinh"), (aten.cosh.default, "cosh"),
                           (aten.asin.default, "asin"), (aten.acos.default, "acos"),
                           (aten.atan.default, "atan"), (aten.asinh.default, "asinh"),
                           (aten.acosh.default, "acosh"), (aten.atanh.default, "atanh")]:
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


def copy_of(x):
    """A copy of x as a new value (for an output that would otherwise be an input)."""
    return kg.apply("reshape", [x], shape=[0] * x.ndim)


@_lowers(aten.clone.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh_copy.default)
def _identity(ctx, x, **kwargs):
    return x  # values are immutable in a functional graph: a clone is the value itself


@_lowers(aten._to_copy.default)
def _to_copy(ctx, x, dtype=None, **kwargs):
    if dtype is None or _DTYPES[dtype] == x.dtype:
        return _identity(ctx, x)
    return kg.cast(x, _DTYPES[dtype])


@_lowers(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def _view(ctx, x, shape):
    shape = ctx.out_shape()
    xs = ctx.shape(x)
    if len(shape) == len(xs) and all(same(a, b) for a, b in zip(shape, xs)):
        return x
    for kind in ("merged", "rows"):
        src = ctx.origin(x, kind)
        if src is not None:
            ss = ctx.shape(src)
            if len(ss) == len(shape) and all(same(a, b) for a, b in zip(ss, shape)):
                return src  # a reshape undone
    y = ctx.reshape(x, shape)
    lead = product(xs[:-2])
    if len(xs) > 3 and len(shape) == 3 and same(shape[0], lead) and same(shape[1], xs[-2]) \
            and same(shape[2], xs[-1]):
        ctx.record(y, "merged", x)
    elif len(xs) > 2 and len(shape) == 2 and same(shape[0], product(xs[:-1])) \
            and same(shape[1], xs[-1]):
        ctx.record(y, "rows", x)
    return y


@_lowers(aten.permute.default)
def _permute(ctx, x, dims):
    perm = [d % x.ndim for d in dims]
    if perm == list(range(x.ndim)):
        return x
    y = kg.transpose(x, perm)
    return ctx.record(y, "t", x) if perm == [1, 0] else y


@_lowers(aten.expand.default)
def _expand(ctx, x, shape):
    out = ctx.out_shape()
    xs = ctx.shape(x)
    lead = len(out) - len(xs)
    if lead == 0 and all(same(a, b) for a, b in zip(out, xs)):
        return x  # matmul's decomposition expands operands to the shape they have
    if not is_symbolic(out):
        return kg.apply("expand", [x], shape=[int(d) for d in out])
    # A dimension x keeps is 1 (broadcast to itself); the others are the target's sizes.
    dims = [1 if i >= lead and same(d, xs[i - lead]) else d for i, d in enumerate(out)]
    return ctx.with_dims("expand", [x], {"dims": dims})


@_lowers(aten.unsqueeze.default, aten.squeeze.dims, aten.squeeze.dim)
def _to_out_shape(ctx, x, dims):
    return ctx.reshape(x, ctx.out_shape())


@_lowers(aten.cat.default)
def _cat(ctx, xs, dim=0):
    return kg.concat(xs, dim % xs[0].ndim)


@_lowers(aten.slice.Tensor)
def _slice(ctx, x, dim=0, start=None, end=None, step=1):
    dim %= x.ndim
    size = ctx.shape(x)[dim]
    start = 0 if start is None else start
    if end is None or (not isinstance(end, SymDim) and end >= _BIG) or same(end, size):
        if start == 0 and step == 1:
            return x
        end = _BIG
    if isinstance(start, SymDim) or isinstance(end, SymDim):
        return ctx.with_dims("slice", [x], {"starts_dims": [start], "ends_dims": [end]},
                             axes=[dim], steps=[int(step)])
    return kg.apply("slice", [x], starts=[int(start)], ends=[int(end)], axes=[dim],
                    steps=[int(step)])


@_lowers(aten.select.int)
def _select(ctx, x, dim, index):
    dim %= x.ndim
    size = ctx.shape(x)[dim]
    if index < 0:
        if isinstance(size, SymDim):
            raise _kiln.UnsupportedError("select from the end of a dynamic dimension")
        index += size
    s = kg.apply("slice", [x], starts=[index], ends=[index + 1], axes=[dim])
    return ctx.reshape(s, ctx.out_shape())


def _linear(ctx, a, b, bias=None, alpha=1, beta=1):
    """a @ b (+ bias): a linear layer's x @ W.t() reads W transposed in the GEMM (and packs it);
    rows merged from an N-D x go in unmerged, so the product's epilogue (a bias, a residual add
    after the reshape back) fuses as for an imported MatMul."""
    w = ctx.origin(b, "t")
    x = ctx.origin(a, "rows")
    if x is not None and alpha == 1 and beta == 1:
        y = kg.matmul(x, b)
        if bias is not None:
            y = y + bias
        ctx.set_shape(y, ctx.shape(x)[:-1] + ctx.out_shape()[-1:])
        return ctx.record(ctx.reshape(y, ctx.out_shape()), "rows", y)
    if w is not None:
        return kg.gemm(a, w, bias, alpha=alpha, beta=beta, trans_b=True)
    if bias is None and alpha == 1:
        return kg.matmul(a, b)
    return kg.gemm(a, b, bias, alpha=alpha, beta=beta)


@_lowers(aten.mm.default, aten.matmul.default)
def _mm(ctx, a, b):
    return _linear(ctx, a, b)


@_lowers(aten.bmm.default)
def _bmm(ctx, a, b):
    # matmul of 4-D operands reaches here as bmm of their reshapes to 3-D; kiln's matmul takes
    # the 4-D operands (reading transposed heads in place) and its result reshapes for free.
    a4, b4 = ctx.origin(a, "merged"), ctx.origin(b, "merged")
    if a4 is not None and b4 is not None:
        sa, sb = ctx.shape(a4), ctx.shape(b4)
        if len(sa) == len(sb) and all(same(p, q) for p, q in zip(sa[:-2], sb[:-2])):
            y4 = kg.matmul(a4, b4)
            ctx.set_shape(y4, sa[:-1] + sb[-1:])
            return ctx.record(ctx.reshape(y4, ctx.out_shape()), "merged", y4)
    return kg.matmul(a, b)


@_lowers(aten.addmm.default)
def _addmm(ctx, bias, a, b, beta=1, alpha=1):
    return _linear(ctx, a, b, bias, alpha, beta)


@_lowers(aten.convolution.default)
def _conv(ctx, x, w, b, stride, padding, dilation, transposed, output_padding, groups):
    if transposed:
        raise _kiln.UnsupportedError("a transposed convolution")
    ins = [x, w] + ([b] if b is not None else [])
    return kg.apply("conv", ins, strides=list(stride), pads=list(padding) + list(padding),
                    dilations=list(dilation), group=int(groups),
                    kernel_shape=list(w.shape[2:]))


def _vjp(forward, upstream, wrt):
    """The gradients of `forward` (a Var built from `wrt`) against `upstream`, through kiln's
    own autodiff: the cost sum(forward * upstream) has exactly those gradients. The forward
    step itself is dead afterwards unless something else reads it."""
    axes = list(range(forward.ndim))
    return kg.grad(kg.sum(forward * upstream, axes), list(wrt))


@_lowers(aten.convolution_backward.default)
def _conv_backward(ctx, g, x, w, bias_sizes, stride, padding, dilation, transposed,
                   output_padding, groups, output_mask):
    y = _conv(ctx, x, w, None, stride, padding, dilation, transposed, output_padding, groups)
    wanted = [v for v, m in zip((x, w), output_mask[:2]) if m]
    grads = iter(_vjp(y, g, wanted) if wanted else [])
    gx = next(grads) if output_mask[0] else None
    gw = next(grads) if output_mask[1] else None
    gb = kg.sum(g, [0] + list(range(2, g.ndim))) if output_mask[2] else None
    return gx, gw, gb


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


def _pool_geometry(kernel, stride, padding, dilation):
    """Kernel, stride (the kernel's when empty), padding and dilation, two entries each."""
    def two(v, default):
        v = [int(d) for d in (list(v) or list(default))]
        return v if len(v) == 2 else v * 2
    kernel = two(kernel, ())
    return kernel, two(stride, kernel), two(padding, (0,)), two(dilation, (1,))


@_lowers(aten.max_pool2d_with_indices.default)
def _max_pool(ctx, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    k, st, pad, dil = _pool_geometry(kernel, stride, padding, dilation)
    props = _pool_props(k, st, pad, ceil_mode, dil)
    y = kg.apply("max_pool", [x], **props)
    users = ctx.node.users if ctx.node is not None else {}
    if not any(u.target is operator.getitem and u.args[1] == 1 for u in users):
        return y, None
    return y, _window_argmax(ctx, x, props)


def _window_argmax(ctx, x, props):
    """PyTorch's max-pool indices (a window's first maximum, the last NaN, as an offset in its
    H x W plane), which training saves for the backward: kiln's max_pool_indices (flat over
    the whole tensor, one pass like the pool's) modulo the plane."""
    if any(d is None for d in x.shape[2:]):
        raise _kiln.UnsupportedError("max-pool indices of a dynamic size")
    plane = ctx.g.scalar(float(x.shape[2] * x.shape[3]), "int64")
    return kg.apply("mod", [kg.apply("max_pool_indices", [x], **props), plane])


@_lowers(aten.max_pool2d_with_indices_backward.default)
def _max_pool_backward(ctx, g, x, kernel, stride, padding, dilation, ceil_mode, indices):
    # kiln's max-pool gradient goes to each window's first maximum, the index PyTorch saved.
    k, st, pad, dil = _pool_geometry(kernel, stride, padding, dilation)
    y = kg.apply("max_pool", [x], **_pool_props(k, st, pad, ceil_mode, dil))
    return _vjp(y, g, [x])[0]


@_lowers(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def _attention_backward(ctx, g, q, k, v, out, logsumexp, dropout_p, is_causal, attn_mask=None,
                        scale=None):
    """The gradients of softmax(q k^T * scale + mask) v through kiln's autodiff, the attention
    recomputed from q, k and v (out and logsumexp, which PyTorch's kernel saves, are not
    needed)."""
    if dropout_p:
        raise _kiln.UnsupportedError("the backward of attention with dropout")
    if any(d is None for d in q.shape + k.shape):
        raise _kiln.UnsupportedError("the backward of attention over a dynamic size")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = kg.matmul(q, kg.transpose(k, list(range(k.ndim - 2)) + [k.ndim - 1, k.ndim - 2]))
    s = s * ctx.g.scalar(float(scale), s.dtype)
    if is_causal:
        lq, lk = q.shape[-2], k.shape[-2]
        keep = torch.ones(lq, lk, dtype=torch.bool).tril()
        s = kg.where(ctx.materialize(keep), s, ctx.g.scalar(float("-inf"), s.dtype))
    if attn_mask is not None:
        if attn_mask.dtype == "bool":
            s = kg.where(attn_mask, s, ctx.g.scalar(float("-inf"), s.dtype))
        else:
            s = s + attn_mask
    y = kg.matmul(kg.softmax(s, -1), v)
    return tuple(_vjp(y, g, [q, k, v]))


@_lowers(aten._native_batch_norm_legit_functional.default)
def _batch_norm_training(ctx, x, w, b, running_mean, running_var, training, momentum, eps):
    """Training-mode batch norm: the batch's statistics normalise, and the running ones move
    toward them (the variance unbiased), as PyTorch's functional form returns them."""
    if not training:
        raise _kiln.UnsupportedError("the functional batch norm outside training")
    axes = [0] + list(range(2, x.ndim))
    count = 1
    for a in axes:
        if x.shape[a] is None:
            raise _kiln.UnsupportedError("training batch norm over a dynamic size")
        count *= x.shape[a]
    mean = kg.mean(x, axes, True)
    d = x - mean
    var = kg.mean(d * d, axes, True)
    rstd = kg.reciprocal(kg.sqrt(var + float(eps)))
    y = d * rstd
    shape = [-1] + [1] * (x.ndim - 2)
    if w is not None:
        y = y * kg.reshape(w, shape)
    if b is not None:
        y = y + kg.reshape(b, shape)
    c = [x.shape[1]]
    mean, var, rstd = kg.reshape(mean, c), kg.reshape(var, c), kg.reshape(rstd, c)
    m = float(momentum)
    new_mean = running_mean * (1 - m) + mean * m
    new_var = running_var * (1 - m) + var * (m * count / max(count - 1, 1))
    return y, mean, rstd, new_mean, new_var


@_lowers(aten.avg_pool2d.default)
def _avg_pool(ctx, x, kernel, stride=(), padding=(0,), ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    props = _pool_props(kernel, stride, padding, ceil_mode)
    return kg.apply("average_pool", [x], count_include_pad=int(bool(count_include_pad)), **props)


@_lowers(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool(ctx, x, output_size):
    h, w = x.shape[-2:]
    if h is None or w is None:
        raise _kiln.UnsupportedError("adaptive average pooling of a dynamic size")
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


# Scaled-dot-product attention's softmax. Left whole (for inference, torch_backend keeps it
# out of the decompositions) it reaches kiln as one softmax that attention fusion can take;
# decomposed, its guard for rows of -inf (a reduction and a where between the softmax and
# the second product) kept every attention of a ViT unfused.
@_lowers(aten._safe_softmax.default)
def _safe_softmax(ctx, x, dim, dtype=None):
    if dtype is not None and _DTYPES[dtype] != x.dtype:
        x = kg.cast(x, _DTYPES[dtype])
    return kg.softmax(x, dim % x.ndim, safe=True)


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


def _truth(ctx, x, like=None):
    """x as booleans: nonzero is true (NaN included), as PyTorch's logical ops read numbers."""
    x = ctx.operand(x, like)
    return x if x.dtype == "bool" else kg.ne(x, ctx.g.scalar(0.0, x.dtype))


# (all() reaches kiln as not(any(not x)), zeros_like and ones_like as full_like, split as
# split_with_sizes, softplus as its formula, upsampling as index: the decompositions.)
@_lowers(aten.any.dim, aten.any.dims)
def _any(ctx, x, dim=None, keepdim=False):
    # The truth of each element as 0/1, then its max over the axes.
    dims = [dim] if isinstance(dim, int) else list(range(x.ndim) if dim is None else dim)
    dims = [d % x.ndim for d in dims] if x.ndim else []
    if not dims:
        return _truth(ctx, x)
    return kg.gt(kg.max(kg.cast(_truth(ctx, x), "float32"), dims, bool(keepdim)),
                 ctx.g.scalar(0.0, "float32"))


def _fill(ctx, dims, value, dtype):
    if not is_symbolic(dims):  # a constant
        return ctx.materialize(torch.full([int(d) for d in dims], value, dtype=dtype))
    if dtype == torch.bool:  # kiln's fill is numeric: a causal mask's ones of symbolic size
        return kg.cast(_fill(ctx, dims, float(bool(value)), torch.uint8), "bool")
    return ctx.with_dims("fill", [], {"dims": dims}, value=float(value), dtype=_DTYPES[dtype])


@_lowers(aten.full_like.default)
def _full_like(ctx, x, value, dtype=None, **kwargs):
    # Only x's shape and dtype matter.
    return _fill(ctx, ctx.shape(x), value, dtype or _TORCH_DTYPES[x.dtype])


# (Without symbolic sizes these are computed while compiling, never lowered.)
@_lowers(aten.full.default)
def _full(ctx, size, value, dtype=None, **kwargs):
    return _fill(ctx, ctx.out_shape(), value, ctx.node.meta["val"].dtype)


@_lowers(aten.arange.start_step)  # (the other overloads decompose to this one)
def _arange(ctx, *args, **kwargs):
    numbers = [a for a in args if isinstance(a, (int, float, SymDim))]
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (
        numbers[0], numbers[1], numbers[2] if len(numbers) > 2 else 1)
    dtype = ctx.node.meta["val"].dtype
    if any(isinstance(v, float) for v in (start, end, step)):
        raise _kiln.UnsupportedError("arange over float bounds with a dynamic size")
    return ctx.with_dims("arange", [], {"start": [start], "limit": [end], "delta": [step]},
                         dtype=_DTYPES[dtype])


@_lowers(aten.gather.default)
def _gather(ctx, x, dim, index, sparse_grad=False):
    return kg.apply("gather_elements", [x, index], axis=dim % max(x.ndim, 1))


_lowers(aten.bitwise_and.Tensor, aten.logical_and.default)(
    lambda ctx, a, b: kg.logical_and(_truth(ctx, a, b), _truth(ctx, b, a)))
_lowers(aten.bitwise_or.Tensor, aten.logical_or.default)(
    lambda ctx, a, b: kg.logical_or(_truth(ctx, a, b), _truth(ctx, b, a)))
# Exclusive or: the two truths differ.
_lowers(aten.bitwise_xor.Tensor, aten.logical_xor.default)(
    lambda ctx, a, b: kg.ne(kg.cast(_truth(ctx, a, b), "float32"),
                            kg.cast(_truth(ctx, b, a), "float32")))
_lowers(aten.bitwise_not.default, aten.logical_not.default)(
    lambda ctx, x: kg.logical_not(_truth(ctx, x)))
# What a node must satisfy beyond its op being lowered (the backend's support check).
CHECKS = {aten.convolution.default: lambda node: not node.args[6]}  # not transposed
# Bitwise ops lowered as logical ones: only on booleans (the backend's support check).
BOOL_ONLY = {aten.bitwise_and.Tensor, aten.bitwise_or.Tensor, aten.bitwise_xor.Tensor,
             aten.bitwise_not.default}


@_lowers(aten.index.Tensor)
def _index(ctx, x, indices):
    """x[..., i, j, ...]: index tensors (broadcast together) on some dimensions, None on the
    others. The indexed dimensions go first, one flat index picks from them (a gather), and
    the result's broadcast dimensions go where PyTorch puts them: in place of adjacent indexed
    dimensions, first otherwise. Upsampling and causal masks index this way."""
    xs = ctx.shape(x)  # sizes may be symbolic: they enter the index arithmetic as 0-D sizes
    indices = list(indices) + [None] * (x.ndim - len(indices))
    dims = [d for d, i in enumerate(indices) if i is not None]
    rest = [d for d in range(x.ndim) if d not in dims]
    if dims + rest != list(range(x.ndim)):
        x_first = kg.transpose(x, dims + rest)
    else:
        x_first = x
    flat = None
    stride = 1
    zero = ctx.g.scalar(0.0, "int64")
    for d in reversed(dims):
        i = indices[d]
        if i.dtype == "bool":
            raise _kiln.UnsupportedError("index.Tensor with a boolean mask")
        i = kg.cast(i, "int64")
        i = kg.where(kg.lt(i, zero), i + ctx.operand(xs[d], i), i)
        term = i if same(stride, 1) else i * ctx.operand(stride, i)
        flat = term if flat is None else term + flat
        stride = product([stride, xs[d]])
    y = kg.apply("gather", [ctx.reshape(x_first, [stride] + [xs[d] for d in rest]), flat],
                 axis=0)
    first = dims[0]
    if dims == list(range(first, dims[-1] + 1)) and first > 0:
        nb = flat.ndim
        y = kg.transpose(y, list(range(nb, nb + first)) + list(range(nb))
                         + list(range(nb + first, y.ndim)))
    return y


@_lowers(aten.split_with_sizes.default)
def _split(ctx, x, sizes, dim=0):
    dim %= x.ndim
    parts, start = [], 0
    for size in sizes:
        parts.append(kg.apply("slice", [x], starts=[start], ends=[start + int(size)], axes=[dim]))
        start += int(size)
    return tuple(parts)


@_lowers(aten.as_strided.default)
def _as_strided(ctx, x, size, stride, storage_offset=0):
    """A view of x's (contiguous) elements: a reshape where the view is x's own order, a
    gather of precomputed element indices otherwise."""
    size, stride = [int(s) for s in size], [int(s) for s in stride]
    contiguous, acc = [], 1
    for s in reversed(size):
        contiguous.insert(0, acc)
        acc *= s
    if any(d is None for d in x.shape):
        raise _kiln.UnsupportedError("as_strided of a dynamic size")
    numel = 1
    for s in x.shape:
        numel *= s
    if not storage_offset and acc == numel and all(
            a == b or s == 1 for a, b, s in zip(stride, contiguous, size)):
        return kg.reshape(x, size)
    idx = torch.as_strided(torch.arange(numel), size, stride, storage_offset or 0)
    flat = kg.reshape(x, [numel])
    return kg.apply("gather", [flat, ctx.materialize(idx.contiguous())], axis=0)


@_lowers(aten.trunc.default)
def _trunc(ctx, x):
    return kg.where(kg.lt(x, ctx.g.scalar(0.0, x.dtype)), kg.ceil(x), kg.floor(x))


@_lowers(aten.isnan.default)
def _isnan(ctx, x):
    return kg.ne(x, x)


@_lowers(aten.isinf.default)
def _isinf(ctx, x):
    return kg.eq(kg.abs(x), ctx.g.scalar(float("inf"), x.dtype))


@_lowers(aten.leaky_relu.default)
def _leaky_relu(ctx, x, negative_slope=0.01):
    return kg.leaky_relu(x, float(negative_slope))


@_lowers(aten.elu.default)
def _elu(ctx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if input_scale != 1:
        x = x * float(input_scale)
    y = kg.elu(x, float(alpha))
    return y if scale == 1 else y * float(scale)


def _arg_reducer(op):
    def lower(ctx, x, dim=None, keepdim=False):
        if dim is None:  # over all elements, as a flat vector
            x, dim, keepdim = kg.reshape(x, [-1]), 0, False
        return kg.apply(op, [x], axis=dim % x.ndim, keepdims=int(bool(keepdim)))
    return lower


_lowers(aten.argmax.default)(_arg_reducer("arg_max"))
_lowers(aten.argmin.default)(_arg_reducer("arg_min"))


def _value_and_index(reduce, arg):
    def lower(ctx, x, dim, keepdim=False):
        dim %= x.ndim
        return (reduce(x, [dim], bool(keepdim)),
                kg.apply(arg, [x], axis=dim, keepdims=int(bool(keepdim))))
    return lower


_lowers(aten.max.dim)(_value_and_index(kg.max, "arg_max"))
_lowers(aten.min.dim)(_value_and_index(kg.min, "arg_min"))


@_lowers(aten.prod.dim_int)
def _prod(ctx, x, dim, keepdim=False, dtype=None):
    return kg.prod(x, [dim % x.ndim], bool(keepdim))


@_lowers(aten.cumsum.default)
def _cumsum(ctx, x, dim, dtype=None):
    if dtype is not None and _DTYPES.get(dtype) != x.dtype:
        x = kg.cast(x, _DTYPES[dtype])
    return kg.apply("cumsum", [x], axis=dim % x.ndim)


@_lowers(aten.topk.default)
def _topk(ctx, x, k, dim=-1, largest=True, is_sorted=True):
    values, indices = kg.apply("top_k", [x], k=int(k), axis=dim % x.ndim,
                               largest=int(bool(largest)), sorted=1)
    return values, indices


@_lowers(aten.index_select.default)
def _index_select(ctx, x, dim, index):
    return kg.apply("gather", [x, index], axis=dim % x.ndim)


@_lowers(aten.native_group_norm.default)
def _group_norm(ctx, x, w, b, n, c, hw, groups, eps):
    g = kg.reshape(x, [0, int(groups), -1])  # 0: x's own (maybe dynamic) batch
    mean = kg.mean(g, [2], True)
    d = g - mean
    inv = kg.reciprocal(kg.sqrt(kg.mean(d * d, [2], True) + float(eps)))
    y = ctx.reshape(d * inv, ctx.shape(x))
    shape = [-1] + [1] * (x.ndim - 2)
    if w is not None:
        y = y * kg.reshape(w, shape)
    if b is not None:
        y = y + kg.reshape(b, shape)
    return (y, kg.reshape(mean, [0, int(groups)]), kg.reshape(inv, [0, int(groups)]))


@_lowers(torch.ops.prims.convert_element_type.default)
def _convert_element_type(ctx, x, dtype):
    return x if _DTYPES[dtype] == x.dtype else kg.cast(x, _DTYPES[dtype])


@_lowers(aten.div.Tensor_mode)
def _div_mode(ctx, a, b, rounding_mode=None):
    like = a if isinstance(a, kg.Var) else b
    a, b = _promoted(ctx.operand(a, like), ctx.operand(b, like))
    if a.dtype in ("float32", "float64"):
        if rounding_mode == "trunc":
            return _trunc(ctx, kg.div(a, b))
        return _floor_divide(ctx, a, b)
    if rounding_mode == "trunc":
        return kg.div(a, b)  # C's integer division truncates
    return kg.div(a - kg.apply("mod", [a, b]), b)  # exact: a - a mod b is a multiple of b


def _floor_divide(ctx, a, b):
    """PyTorch's (and Python's) float floor division: from fmod, so inf // 1.5 is NaN, and
    the quotient rounded to the nearest whole number below (a / b itself when b is 0)."""
    zero, one = ctx.g.scalar(0.0, a.dtype), ctx.g.scalar(1.0, a.dtype)
    mod = kg.fmod(a, b)
    div = kg.div(a - mod, b)
    # A remainder of the divisor's opposite sign: one less.
    off = kg.logical_and(kg.ne(mod, zero), kg.ne(kg.cast(kg.lt(b, zero), "float32"),
                                                kg.cast(kg.lt(mod, zero), "float32")))
    div = kg.where(off, div - one, div)
    floor = kg.floor(div)
    floor = kg.where(kg.gt(div - floor, ctx.g.scalar(0.5, a.dtype)), floor + one, floor)
    quotient = kg.div(a, b)
    out = kg.where(kg.eq(div, zero), quotient * zero, floor)  # a signed zero: a / b's sign
    return kg.where(kg.eq(b, zero), quotient, out)


@_lowers(aten.scalar_tensor.default)
def _scalar_tensor(ctx, value, dtype=None, **kwargs):
    # (A known number is computed while compiling; this is a size used as a number.)
    dtype = _DTYPES[dtype or torch.float32]
    if isinstance(value, SymDim):
        return ctx.size_scalar(value, dtype)
    return ctx.g.scalar(float(value), dtype)


@_lowers(aten.true_divide.Tensor)
def _true_divide(ctx, a, b):
    # Division in the result's (floating) dtype, integers included.
    dtype = _DTYPES[ctx.node.meta["val"].dtype]
    like = a if isinstance(a, kg.Var) else b
    a, b = ctx.operand(a, like), ctx.operand(b, like)
    return kg.div(a if a.dtype == dtype else kg.cast(a, dtype),
                  b if b.dtype == dtype else kg.cast(b, dtype))


def _core_aten_ops():
    ops = []
    for name in dir(aten):
        packet = getattr(aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if torch.Tag.core in op.tags:
                ops.append(op)
    return sorted(ops, key=str)


def coverage_markdown():
    """docs/python.md's table of PyTorch's core ATen ops: which kiln lowers, which it computes
    only while compiling (when every input is known then), which stay in PyTorch."""
    lines = ["| core ATen op | in kiln |", "|---|---|"]
    counts = {"lowered": 0, "known": 0, "pytorch": 0}
    for op in _core_aten_ops():
        if op in LOWERINGS:
            what, key = "lowered", "lowered"
        elif torch.Tag.nondeterministic_seeded in op.tags:
            what, key = "runs in PyTorch (random)", "pytorch"
        elif str(op).endswith("_backward.default") or "backward" in str(op):
            what, key = "runs in PyTorch (a gradient op)", "pytorch"
        else:
            what, key = "computed while compiling when its inputs are known; else PyTorch", "known"
        counts[key] += 1
        lines.append(f"| `{str(op).removeprefix('aten.')}` | {what} |")
    extra = sorted(str(op).removeprefix("aten.") for op in LOWERINGS
                   if torch.Tag.core not in op.tags)
    head = [f"Of PyTorch {torch.__version__.split('+')[0]}'s {sum(counts.values())} core ATen "
            f"ops, kiln lowers {counts['lowered']}; {counts['known']} more run in kiln where "
            f"their inputs are known while compiling (a mask from `arange` and `full`); "
            f"{counts['pytorch']} are random or gradient ops. Also lowered, outside the core "
            "set: " + ", ".join(f"`{e}`" for e in extra) + ".", ""]
    return "\n".join(head + lines)


if __name__ == "__main__":  # python -m kiln.torch_lowerings: the table for docs/python.md
    print(coverage_markdown())
