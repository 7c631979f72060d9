"""Sizes dynamo leaves symbolic, as kiln's dimension expressions (graph/dim_expr.h).

With dynamic shapes (torch.compile(dynamic=True), torch._dynamo.mark_dynamic, or dynamo's
automatic dynamic after a size changed) a graph's sizes are sympy expressions over symbols
s0, s1, ... Each symbol is a dimension of some graph input: kiln's input gets a dynamic
dimension there, and an op whose shape or bounds follow a symbol (a reshape to (s0 * 128,
768), arange(s1), full((s0, s1))) takes that input as an extra operand and an expression
"#k.d" (dimension d of its operand k), so one kiln module serves every size.
"""
import sympy
import torch

from . import _kiln

_BIG = 1 << 62  # PyTorch's "to the end" bounds (2^63 - 1) and anything past any size


class SymDim:
    """A symbolic size in a lowering's arguments or shapes: its sympy expression."""
    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr

    def __repr__(self):
        return f"SymDim({self.expr})"


def dim_of(d):
    """A meta tensor's dimension (int or SymInt) as an int or a SymDim."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr
        return int(expr) if expr.is_Integer else SymDim(expr)
    return int(d)


def shape_of(val):
    return [dim_of(d) for d in val.shape]


def is_symbolic(dims):
    return any(isinstance(d, SymDim) for d in dims)


def _sym(d):
    return d.expr if isinstance(d, SymDim) else sympy.Integer(int(d))


def same(a, b):
    """Whether two sizes (int or SymDim) are equal for every value of the symbols."""
    if not isinstance(a, SymDim) and not isinstance(b, SymDim):
        return int(a) == int(b)
    return sympy.expand(_sym(a) - _sym(b)) == 0


def product(dims):
    out = sympy.Integer(1)
    for d in dims:
        out = out * _sym(d)
    out = sympy.expand(out)
    return int(out) if out.is_Integer else SymDim(out)


class DimExprs:
    """Writes sizes as kiln dimension expressions over an op's operands: `inputs` starts with
    the op's own operands and gains, for each symbol used, the graph input it is a dimension
    of (`sources`: symbol -> (Var, dimension))."""

    def __init__(self, sources, inputs):
        self.sources = sources
        self.inputs = list(inputs)

    def text(self, dims):
        return ";".join(self.expr(d) for d in dims)

    def expr(self, d):
        if not isinstance(d, SymDim):
            return str(int(d))
        return self._write(d.expr)

    def _operand(self, var):
        for k, v in enumerate(self.inputs):
            if v is var:
                return k
        self.inputs.append(var)
        return len(self.inputs) - 1

    def _write(self, e):
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            if e not in self.sources:
                raise _kiln.UnsupportedError(f"the size {e} is no dimension of this part's inputs")
            var, d = self.sources[e]
            return f"#{self._operand(var)}.{d}"
        args = [self._write(a) for a in e.args]
        name = type(e).__name__
        if e.is_Add:
            return "(" + "+".join(args) + ")"
        if e.is_Mul:
            return "(" + "*".join(args) + ")"
        if name in ("FloorDiv", "IntTrueDiv", "CleanDiv"):  # sizes are never negative
            return f"({args[0]}/{args[1]})"
        if name in ("Mod", "PythonMod"):
            return f"({args[0]}%{args[1]})"
        if name in ("Max", "Min"):
            out = args[0]
            for a in args[1:]:
                out = f"{name.lower()}({out},{a})"
            return out
        raise _kiln.UnsupportedError(f"a size kiln cannot express: {e}")
