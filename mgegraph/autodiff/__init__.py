"""Reverse-mode autodiff on the graph itself: the backward pass is made of ordinary nodes.

Gradient rules live with each op (``OpDef.grad``): ``rule(node, output_grads)`` returns one
entry per input, ``None`` where the input gets no gradient. This walker alone accumulates
gradients over uses and undoes broadcasting, so no rule repeats either.
"""
from __future__ import annotations

import importlib

from .. import functional as F
from ..ir.errors import GraphError
from ..ir.graph import Var
from ..ir.types import is_float
from ..ops.registry import install_walker


def grad(loss: Var, wrt, seed: Var | None = None) -> list[Var]:
    """Gradients of scalar ``loss`` with respect to each Var of ``wrt`` (params or inputs).

    The gradient nodes are added to ``loss``'s graph, so they print, plan and run like any
    other node, and ``grad`` can be applied again to them (grad of grad). ``seed`` replaces the
    implicit 1 for a non-scalar ``loss`` (a vector-Jacobian product).

    >>> (dw,) = mg.grad(F.sum(x @ w), [w])
    """
    wrt = [wrt] if isinstance(wrt, Var) else list(wrt)
    _check_request(loss, wrt, seed)
    if seed is None:
        seed = F.ones_like(loss)
    grads = backward(loss.graph.nodes, [(loss, seed)], wrt)
    return [grads[v.id] if v.id in grads else F.zeros_like(v) for v in wrt]


install_walker(grad)  # the backward ops' own gradient rules differentiate with it


def backward(nodes, roots, wrt, consume: bool = False, on_final=None,
             after_node=None) -> dict[int, Var]:
    """The walker: {id of each ``wrt`` entry the roots depend on: its gradient}, through the
    gradient rules of ``nodes`` (a graph's nodes, or an eager tape: any list in which a value
    is made before it is used), from each ``(value, seed)`` of ``roots`` (the seeds of one
    value add up). A gradient is dropped once the node that made its value is done, and with
    ``consume`` each node is popped off ``nodes`` as it is walked, so an eager tape frees its
    activations during the walk. ``on_final(v, g)`` is called for each ``wrt`` entry ``v`` as
    soon as its gradient ``g`` is final (the walk has passed every node that reads ``v``), in
    the order the walk finishes them: what lets data-parallel training send a gradient while
    the walk goes on; ``after_node()`` after each node walked (where it tests the sends under
    way, MPI moving a message only inside its calls)."""
    needed = _on_a_path(nodes, wrt, [y for y, _ in roots])
    keep = {v.id for v in wrt}
    finished = _finished_at(nodes, wrt, needed) if on_final is not None else {}
    grads: dict[int, Var] = {}
    for y, seed in roots:
        grads[y.id] = seed if y.id not in grads else grads[y.id] + seed
    walk = _popping(nodes) if consume else reversed(nodes)
    for position, node in zip(range(len(nodes) - 1, -1, -1), walk):
        _walk_node(node, grads, keep, needed, wrt)
        for v in finished.pop(position, ()):
            if v.id in grads:
                on_final(v, grads[v.id])
        if after_node is not None:
            after_node()
    for v in finished.pop(None, ()):  # read by no node walked: a root itself
        if v.id in grads:
            on_final(v, grads[v.id])
    return {v.id: grads[v.id] for v in wrt if v.id in grads}


def _walk_node(node, grads: dict, keep: set, needed: set, wrt) -> None:
    """One step of the walk: ``node``'s gradient rule, its input gradients added up."""
    outs = tuple(grads.get(v.id) if v.id in keep else grads.pop(v.id, None)
                 for v in node.outputs)
    if all(g is None for g in outs) or not any(v.id in needed for v in node.inputs):
        return
    if node.op.grad is None:
        raise GraphError(f"op {node.op.name!r} has no gradient rule (node made at "
                         f"{node.location}); it lies between the loss and {wrt_names(wrt)}")
    in_grads = node.op.grad(node, outs)
    for var, g in zip(node.inputs, in_grads):
        if g is None or var.id not in needed:
            continue
        g = _unbroadcast(g, var)
        grads[var.id] = g if var.id not in grads else grads[var.id] + g


def _finished_at(nodes, wrt, needed: set) -> dict:
    """{position of a node in ``nodes``: the ``wrt`` entries whose gradient is final once the
    walk has done it (the first node to read them on a path to a root)}; key None: those no
    such node reads. ``wrt`` order within a node."""
    first_reader: dict[int, int] = {}
    wanted = {v.id for v in wrt if v.id in needed}
    for position, node in enumerate(nodes):
        if not any(out.id in needed for out in node.outputs):
            continue
        for v in node.inputs:
            if v.id in wanted and v.id not in first_reader:
                first_reader[v.id] = position
    finished: dict = {}
    for v in wrt:
        finished.setdefault(first_reader.get(v.id), []).append(v)
    return finished


def _popping(nodes: list):
    while nodes:
        yield nodes.pop()


def wrt_names(wrt) -> str:
    return ", ".join(f"%{v.id}" for v in wrt)


def _check_request(loss: Var, wrt, seed):
    if not isinstance(loss, Var):
        raise GraphError(f"grad() needs a Var loss, got {type(loss).__name__}")
    if getattr(loss.graph, "eager", False):  # the eager graph keeps no node to walk
        raise GraphError("grad() differentiates a Graph's Vars; the loss is an eager Tensor, "
                         "whose ops are not kept: record them with a GradManager (with gm: ... "
                         "gm.backward(loss))")
    if not is_float(loss.dtype):
        raise GraphError(f"grad(): the loss must be floating point, got {loss.type}")
    if seed is None and loss.size != 1:
        raise GraphError(f"grad(): the loss must be a scalar (got {loss.type}); pass seed= for a "
                         "vector-Jacobian product")
    if seed is not None and (seed.shape != loss.shape or seed.graph is not loss.graph):
        raise GraphError(f"grad(): seed must be a Var of the loss's graph and shape {loss.shape}")
    for v in wrt:
        if not isinstance(v, Var) or v.graph is not loss.graph:
            raise GraphError("grad(): every entry of wrt must be a Var of the loss's graph")
        if not is_float(v.dtype):
            raise GraphError(f"grad(): %{v.id}:{v.type} is not differentiable (integer or bool "
                             "values such as labels and indices have no gradient)")


def _on_a_path(nodes, wrt, roots) -> set[int]:
    """Ids of the values that depend on some ``wrt`` entry and that some root depends on."""
    depends = {v.id for v in wrt}
    for node in nodes:
        if any(v.id in depends for v in node.inputs):
            depends.update(v.id for v in node.outputs)
    used = {y.id for y in roots}
    for node in reversed(nodes):
        if any(v.id in used for v in node.outputs):
            used.update(v.id for v in node.inputs)
    return depends & used


def _unbroadcast(g: Var, like: Var) -> Var:
    """Sum ``g`` over the axes along which ``like`` was broadcast, and match its dtype."""
    if g.shape != like.shape:
        lead = g.ndim - like.ndim
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(like.shape) if d == 1 and g.shape[lead + i] != 1)
        if axes:
            g = F.sum(g, axis=axes, keepdims=True)
        g = F.reshape(g, like.shape)
    return F.astype(g, like.dtype)


# MegEngine's names in its ``megengine.autodiff`` for what eager mode defines, loaded on first
# use (``import mgegraph.autodiff`` loads no eager layer): name -> module
_EAGER_NAMES = {"GradManager": "mgegraph.autodiff.grad_manager",
                "Function": "mgegraph.eager.function"}


def __getattr__(name):
    if name not in _EAGER_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EAGER_NAMES[name]), name)  # lazy: eager layer
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EAGER_NAMES))
