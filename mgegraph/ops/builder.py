"""Helpers the public functions (mgegraph.functional) use to make nodes."""
from __future__ import annotations

import numpy as np

from ..ir.errors import GraphError, user_location
from ..ir.graph import Var
from ..ir.types import result_type


def _values(values):
    for v in values:
        if isinstance(v, (list, tuple)):
            yield from v
        else:
            yield v


def graph_of(*values):
    """The graph a new node on ``values`` goes into: the graph of its Vars, or the eager graph
    when its values are eager Tensors (``mgegraph.eager``). An nn.Parameter is a value of
    whichever graph uses it, and of the eager graph when it is used alone."""
    graph = eager = None
    tensors = False
    for v in values:
        if isinstance(v, (list, tuple)):  # concat's and stack's list of values
            return graph_of(*_values(values))
        if not isinstance(v, Var):
            continue
        if v.graph.eager:
            eager = v.graph
            tensors = tensors or not hasattr(v, "bind_to")
        elif graph is None:
            graph = v.graph
    return _chosen(graph, eager, tensors, values)


def _chosen(graph, eager, tensors, values):
    if graph is not None:
        if tensors:
            raise mixing_error(None, list(_values(values)))
        return graph
    if eager is not None:
        return eager
    raise GraphError("at least one argument must be a graph Var or a Tensor")


def mixing_error(op, values) -> GraphError:
    """The error of an op given both eager Tensors and a graph's Vars."""
    name = getattr(op, "name", op) or "an op"
    kinds = ", ".join(("Tensor" if getattr(v.graph, "eager", False) else f"Var %{v.id}")
                      if isinstance(v, Var) else type(v).__name__ for v in values)
    return GraphError(f"{name}: an eager Tensor and a graph Var cannot be mixed in one op (got "
                      f"{kinds}, at {user_location()}); make the tensor a graph value with "
                      "g.const(t.numpy()), or run the graph and use its result as a tensor")


def apply(op: str, inputs, **attrs) -> Var:
    """Make one node of ``op`` on ``inputs`` and return its single output."""
    (out,) = graph_of(*inputs).add_node(op, tuple(inputs), attrs).outputs
    return out


def apply_in(graph, op: str, inputs: tuple, attrs: dict) -> Var:
    """``apply`` when the caller knows the graph already (``promote`` found it)."""
    (out,) = graph.add_node(op, inputs, attrs).outputs
    return out


def apply_multi(op: str, inputs, **attrs) -> tuple[Var, ...]:
    return graph_of(*inputs).add_node(op, tuple(inputs), attrs).outputs


def cast_to(x: Var, dtype) -> Var:
    dtype = np.dtype(dtype)
    return x if x.type.dtype == dtype else apply("cast", (x,), dtype=str(dtype))


_RESULT_TYPES: dict = {}  # the dtypes of a promotion -> its result (NumPy's rule is slow)


def promote(*values) -> list[Var]:
    """Lift scalars and arrays to consts and cast all to NumPy's result dtype."""
    g = graph_of(*values)
    like = next(v for v in values if isinstance(v, Var))
    lifted = [g.lift(v, like) for v in values]
    dtypes = tuple(v.type.dtype for v in lifted)
    dtype = _RESULT_TYPES.get(dtypes)
    if dtype is None:
        dtype = _RESULT_TYPES[dtypes] = result_type(*dtypes)
    return [v if v.type.dtype == dtype else apply("cast", (v,), dtype=str(dtype))
            for v in lifted]
