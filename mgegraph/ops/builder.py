"""Helpers the public functions (mgegraph.functional) use to make nodes."""
from __future__ import annotations

import numpy as np

from ..ir.errors import GraphError
from ..ir.graph import Var
from ..ir.types import result_type


def graph_of(*values):
    for v in values:
        if isinstance(v, Var):
            return v.graph
        if isinstance(v, (list, tuple)):
            for item in v:
                if isinstance(item, Var):
                    return item.graph
    raise GraphError("at least one argument must be a graph Var (an nn.Parameter alone does not "
                     "say which graph it belongs to)")


def apply(op: str, inputs, **attrs) -> Var:
    """Make one node of ``op`` on ``inputs`` and return its single output."""
    (out,) = graph_of(*inputs).add_node(op, tuple(inputs), attrs).outputs
    return out


def apply_multi(op: str, inputs, **attrs) -> tuple[Var, ...]:
    return graph_of(*inputs).add_node(op, tuple(inputs), attrs).outputs


def cast_to(x: Var, dtype) -> Var:
    dtype = np.dtype(dtype)
    return x if x.dtype == dtype else apply("cast", (x,), dtype=str(dtype))


def promote(*values) -> list[Var]:
    """Lift scalars and arrays to consts and cast all to NumPy's result dtype."""
    g = graph_of(*values)
    like = next(v for v in values if isinstance(v, Var))
    lifted = [g.lift(v, like) for v in values]
    dtype = result_type(*(v.dtype for v in lifted))
    return [cast_to(v, dtype) for v in lifted]
