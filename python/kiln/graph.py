"""Graphs built in code, mirroring kiln's C++ builder (ops/builders.h):

    from kiln import graph as kg
    g = kg.Graph("mlp")
    x = g.input("x", "float32", [None, 784])     # None: known only at run time
    w = g.parameter(np.ones((784, 10), np.float32), "w")
    g.set_outputs([kg.softmax(kg.relu(x @ w))])
    f = kiln.compile(g)

Every call runs the op's type inference at once, so a mismatch raises where it was made.
Any kiln op is reachable by name through apply(op, inputs, **props).
"""
from ._kiln import Graph, Var, add_optimizer_step, grad
from ._kiln import scalar_ops as _scalar_ops
from ._kiln import apply as _apply
from ._kiln import scan as _scan
from ._kiln import cond as _cond

__all__ = ["Graph", "Var", "apply", "grad", "add_optimizer_step", "scan", "cond"]


def scan(fn, sequences=(), outputs_info=(), n_steps=None, go_backwards=False):
    """Theano's scan, unrolled into the graph: for each step t (over axis 0 of every sequence,
    all of one static length, or n_steps), fn(t, slices, states) returns the new states (as
    many as outputs_info, each of its type) followed by any per-step outputs. Returns
    (final states, per-step outputs stacked on a new axis 0 in step order), each a list.
    grad() through it is backpropagation through time."""
    return _scan(fn, list(sequences), list(outputs_info), n_steps, go_backwards)


def cond(pred, then_branch, else_branch):
    """Theano's ifelse on a bool scalar: each branch is a function of no arguments returning
    Vars. A condition known when the graph is built keeps one branch; otherwise both are built
    and each output is where(pred, then, else). Returns a list."""
    return _cond(pred, then_branch, else_branch)


def apply(op, inputs, **props):
    """Applies kiln op `op` to `inputs` (Vars) with props; one output is returned as a Var,
    several as a list."""
    outs = _apply(op, list(inputs), **props)
    return outs[0] if len(outs) == 1 else outs


def _unary(op):
    def f(x, **props):
        return apply(op, [x], **props)
    f.__name__ = op
    f.__doc__ = f"kiln op '{op}' on one input."
    return f


def _binary(op):
    def f(a, b):
        return apply(op, [a, b])
    f.__name__ = op
    f.__doc__ = f"kiln op '{op}' on two inputs (broadcasting)."
    return f


def _with_params(op, arity, params):
    names = [p for p, _ in params]
    defaults = dict(params)

    def f(*args, **props):
        # The inputs, then the params by position or by name: leaky_relu(x, 0.2).
        if not arity <= len(args) <= arity + len(names):
            raise TypeError(f"{op}() takes {arity} inputs and the params {names}, "
                            f"got {len(args)} arguments")
        for name, value in zip(names, args[arity:]):
            if name in props:
                raise TypeError(f"{op}() got param '{name}' twice")
            props[name] = value
        unknown = set(props) - set(names)
        if unknown:
            raise TypeError(f"{op}() takes the params {names}, not {sorted(unknown)}")
        return apply(op, list(args[:arity]),
                     **{p: float(props.get(p, defaults[p])) for p in names})
    f.__name__ = op
    f.__doc__ = f"kiln op '{op}' on {arity} inputs; params {names} (defaults {defaults})."
    return f


# One builder per entry of the scalar-op table (ops/scalar_table.cpp), made from the table
# itself so the two never drift; the few that take other arguments are defined below.
_SCALAR = []
for _name, _arity, _params in _scalar_ops():
    if _name == "cast":  # its dtype is not a number: defined below
        continue
    if _params or _arity > 2:
        globals()[_name] = _with_params(_name, _arity, _params)
    else:
        globals()[_name] = _unary(_name) if _arity == 1 else _binary(_name)
    _SCALAR.append(_name)
globals()["matmul"] = _binary("matmul")
__all__ += _SCALAR + ["matmul"]


def cast(x, dtype):
    return apply("cast", [x], to=dtype)


def _reduce(op):
    def f(x, axes=(), keepdims=False):
        return apply(op, [x], axes=[int(a) for a in axes], keepdims=int(bool(keepdims)))
    f.__name__ = op
    return f


sum = _reduce("reduce_sum")
mean = _reduce("reduce_mean")
max = _reduce("reduce_max")
min = _reduce("reduce_min")
prod = _reduce("reduce_prod")


def transpose(x, perm=()):
    return apply("transpose", [x], perm=[int(p) for p in perm])


def reshape(x, shape):
    return apply("reshape", [x], shape=[int(d) for d in shape])


def flatten(x, axis=1):
    return apply("flatten", [x], axis=int(axis))


def concat(xs, axis):
    return apply("concat", list(xs), axis=int(axis))


def softmax(x, axis=-1, safe=False):
    """safe: a slice of -inf throughout gives zeros, not NaN (PyTorch's _safe_softmax)."""
    if safe:
        return apply("softmax", [x], axis=int(axis), safe=1)
    return apply("softmax", [x], axis=int(axis))


def log_softmax(x, axis=-1):
    return apply("log_softmax", [x], axis=int(axis))


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    ins = [a, b] + ([c] if c is not None else [])
    props = dict(alpha=float(alpha), transA=int(trans_a), transB=int(trans_b))
    if c is not None:
        props["beta"] = float(beta)
    return apply("gemm", ins, **props)


__all__ += ["cast", "sum", "mean", "max", "min", "prod",
            "transpose", "reshape", "flatten", "concat", "softmax", "log_softmax", "gemm"]
