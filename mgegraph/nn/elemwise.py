"""``Elemwise``: MegEngine's module naming one elementwise function by its mode
(``Elemwise("add")``, ``Elemwise("fuse_add_relu")``), for code written against MegEngine's
quantisable modules.

>>> add = nn.Elemwise("add"); y = add(a, b)
"""
from __future__ import annotations

from .. import functional as F
from ..ir.errors import GraphError
from .module import Module

# MegEngine's Elemwise modes (lower case) that mgegraph.functional computes: mode -> function
MODES = {
    "relu": F.relu, "abs": F.abs, "acos": F.acos, "asin": F.asin, "atan": F.atan,
    "ceil": F.ceil, "cos": F.cos, "exp": F.exp, "floor": F.floor, "log": F.log,
    "log1p": F.log1p, "negate": F.neg, "sigmoid": F.sigmoid, "sin": F.sin, "tan": F.tan,
    "tanh": F.tanh, "sinh": F.sinh, "cosh": F.cosh, "asinh": F.asinh, "acosh": F.acosh,
    "atanh": F.atanh, "sqrt": F.sqrt, "square": F.square, "round": F.round, "erf": F.erf,
    "h_swish": F.hswish, "silu": F.silu, "gelu": F.gelu,
    "add": F.add, "sub": F.sub, "mul": F.mul, "true_div": F.div, "floor_div": F.floor_div,
    "mod": F.mod, "pow": F.pow, "max": F.maximum, "min": F.minimum, "atan2": F.atan2,
    "lt": F.less, "leq": F.less_equal, "eq": F.equal, "neq": F.not_equal, "gt": F.greater,
    "geq": F.greater_equal,
    "fuse_add_relu": lambda a, b: F.relu(F.add(a, b)),
    "fuse_add_sigmoid": lambda a, b: F.sigmoid(F.add(a, b)),
    "fuse_add_tanh": lambda a, b: F.tanh(F.add(a, b)),
    "fuse_add_h_swish": lambda a, b: F.hswish(F.add(a, b)),
    "fuse_mul_add3": lambda a, b, c: F.add(F.mul(a, b), c),
    "fuse_mul_add4": lambda a, b, c, d: F.add(F.mul(a, b), F.mul(c, d)),
}


class Elemwise(Module):
    """The elementwise function of MegEngine's mode ``method`` (case-insensitive) over its
    inputs. ``nn.Elemwise("h_swish")(x)``"""

    def __init__(self, method: str, name: str | None = None):
        super().__init__(name)
        key = method.lower() if isinstance(method, str) else None
        if key not in MODES:
            raise GraphError(f"Elemwise: unknown mode {method!r} (one of {sorted(MODES)})")
        self.method = key

    def forward(self, *inputs):
        return MODES[self.method](*inputs)

    def extra_repr(self) -> str:
        return f"method={self.method}"
