"""Building a new Graph from an old one node by node: the one helper every graph pass uses.

Design: passes never edit a graph. ``rebuild`` walks the old graph in order and asks the pass's
callback what each node becomes; the answer is None (copy the node onto the mapped inputs) or
a tuple with one new Var per output (the node is replaced; a None entry is an output nothing
may use any more, a dropped node answers all None). Sources keep their identity: inputs keep
their names, params keep their names and their value arrays (the *same* objects, so a shared
param is still the user's weight that a training step updates in place), consts keep their
arrays, and every assign is remade with ``Graph.assign`` on the mapped target and value.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from ...ir.errors import GraphError
from ...ir.graph import Graph, Node, Var
from ...ir.types import tensor_type


@dataclass(frozen=True)
class PassResult:
    """What a pass made: the new graph, the caller's outputs mapped into it, whether anything
    changed, and counts for the report (``{"nodes_removed": 3}``)."""

    graph: Graph
    outputs: list[Var]
    changed: bool
    stats: dict


class Builder:
    """The graph being built and the map from old var ids to its Vars."""

    def __init__(self, old: Graph):
        self.old, self.graph = old, Graph()
        # the facts the shape rules recorded about named dimensions hold for any rewrite of
        # the graph (copied nodes do not run their rules again to record them)
        self.graph.constraints = old.constraints.copy()
        self.vars: dict[int, Var] = {}

    def var(self, old_var: Var) -> Var:
        """The new Var standing for ``old_var``; an error if its node was dropped."""
        try:
            return self.vars[old_var.id]
        except KeyError:
            raise GraphError(f"%{old_var.id} is used but its node was removed") from None

    def add(self, op, inputs, attrs, like: Node) -> tuple[Var, ...]:
        """A new node of ``op`` that keeps ``like``'s user location (errors point at user code,
        not at the pass)."""
        return self.graph.add_node(op, tuple(inputs), dict(attrs),
                                   location=like.location).outputs

    def carry_bindings(self) -> None:
        """Once every node is built: the nn.Parameters bound in the old graph are bound to
        their new Vars, so a model called on the new graph reuses them."""
        self.graph._bound = {key: self.vars[v.id] for key, v in self.old._bound.items()
                             if v.id in self.vars}

    def copy(self, node: Node, inputs: tuple[Var, ...] | None = None) -> tuple[Var, ...]:
        """``node`` on the mapped inputs, or on ``inputs`` (new Vars) when given (sources and
        assigns keep their identity)."""
        name = node.op.name
        if inputs is None and name not in ("input", "param", "const"):
            inputs = tuple(self.var(v) for v in node.inputs)
        if name == "assign":
            target, value = inputs
            self.graph.assign(target, value)
            self.graph.assigns[-1] = _relocate(self.graph, self.graph.assigns[-1], node.location)
            return ()
        if name not in ("input", "param", "const"):
            return self.graph.add_copy(node, tuple(inputs)).outputs
        (old,) = node.outputs
        if name == "input":
            var = self.graph.input(node.attr["name"], old.shape, old.dtype, old.type.quant)
        elif name == "param":
            var = self._param(node.attr["name"], old)
        else:
            return (self.const(self.old.values[old.id], node.location, old.type.quant),)
        _relocate(self.graph, var.node, node.location)
        return (var,)

    def const(self, array, location: str | None = None, quant=None) -> Var:
        """A const holding ``array`` itself: consts are never written, and a pipeline of five
        passes should not copy a large table five times. (Graph.const always copies, so this
        takes its steps: the scalar's value attribute, the node, the value.) ``quant``: the
        quantization of its integers."""
        attrs = {"value": array.item()} if array.ndim == 0 and quant is None else {}
        var_type = tensor_type(array.shape, array.dtype, quant)
        node = self.graph.add_node("const", (), attrs, types=(var_type,), location=location)
        self.graph.values[node.outputs[0].id] = array
        return node.outputs[0]

    def _param(self, name: str, old: Var) -> Var:
        # NOTE: Graph.param copies an unshared value, so every param is added shared (the array
        # itself) and the flag then dropped where it was not set: a plan copies an unshared
        # value into its own buffer, so the old array object is safe to keep.
        var = self.graph.param(name, self.old.values[old.id], share=True, quant=old.type.quant)
        if old.id not in self.old.shared:
            self.graph.shared.discard(var.id)
        return var


def _relocate(graph: Graph, node: Node, location: str) -> Node:
    """``node`` with ``location``, replacing it in ``graph``, for the sources and assigns the
    Graph methods make (their outputs point back at their node, so they are updated too)."""
    moved = replace(node, location=location)
    for v in moved.outputs:
        v.node = moved
    for i in range(len(graph.nodes) - 1, -1, -1):
        if graph.nodes[i] is node:
            graph.nodes[i] = moved
            break
    return moved


Rewrite = Callable[[Builder, Node], "tuple[Var | None, ...] | None"]


def rebuild(graph: Graph, rewrite: Rewrite | None = None) -> Builder:
    """A new graph made node by node from ``graph``; ``rewrite(builder, node)`` may replace a node
    (see the module docstring). Returns the Builder: ``.graph`` and ``.vars`` (old id -> Var).

    >>> b = rebuild(g); new_y = b.var(y)
    """
    builder = Builder(graph)
    for node in graph.nodes:
        outs = rewrite(builder, node) if rewrite is not None else None
        if outs is None:
            outs = builder.copy(node)
        elif len(outs) != len(node.outputs):
            raise GraphError(f"a rewrite of {node.op.name} gave {len(outs)} values for "
                             f"{len(node.outputs)} outputs")
        for old, new in zip(node.outputs, outs):
            if new is not None:
                _check_same_type(old, new)
                builder.vars[old.id] = new
    builder.carry_bindings()
    return builder


def _check_same_type(old: Var, new: Var) -> None:
    if old.type != new.type:
        raise GraphError(f"a rewrite replaced %{old.id}:{old.type} by %{new.id}:{new.type}")


def result(builder: Builder, outputs, changed: bool, stats: dict) -> PassResult:
    """The PassResult of a rebuilt graph, with the caller's ``outputs`` mapped into it.

    >>> return result(rebuild(g, my_rewrite), outputs, changed=True, stats={"rewrites": 2})
    """
    return PassResult(builder.graph, [builder.var(v) for v in outputs], changed, stats)


def use_counts(graph: Graph, outputs) -> dict[int, int]:
    """Var id -> how many node inputs and outputs of the caller read it."""
    count = {v.id: 1 for v in outputs}
    for node in graph.nodes:
        for v in node.inputs:
            count[v.id] = count.get(v.id, 0) + 1
    return count


# ops whose result is a weight laid out for a kernel, padded to whole blocks: at most twice
# their input (the prepack pass makes them only where the padding is a third at most)
REPACKS = ("conv2d_pack_weight",)
# the int8 weights in the GEMM's blocks of 8 rows and groups of 4, with 8 bytes per channel
REPACKS += ("quantized_pack_weight", "quantized_pack_transposed_weight")


def weight_result_fits(node: Node) -> bool:
    """Whether a node computed from weights alone may keep its results for the plan's life (a
    folded const, a prologue's value): none larger than its largest input, so nothing blows
    up (a broadcast or an outer product of weights stays in the run), or than twice it for a
    weight repacked into a kernel's blocks."""
    largest = max(v.type.nbytes for v in node.inputs)
    limit = 2 * largest if node.op.name in REPACKS else largest
    return all(v.type.nbytes <= limit for v in node.outputs)


def weight_values(graph: Graph) -> tuple[set[int], set[int]]:
    """Ids of the Vars computed from weights alone: params that no assign of the graph writes,
    consts, and the results of nodes whose inputs all are (bnfold's scaled weights, a cast or
    a transpose of a weight); and of those, the ones that read a param (the rest read consts
    only)."""
    assigned = {n.inputs[0].id for n in graph.assigns}
    fixed: set[int] = set()
    from_param: set[int] = set()
    for node in graph.nodes:
        name, outs = node.op.name, [v.id for v in node.outputs]
        if name == "param" and outs[0] not in assigned:
            fixed.add(outs[0])
            from_param.add(outs[0])
        elif name == "const":
            fixed.add(outs[0])
        elif (node.op.category != "source" and name != "assign" and node.inputs
              and all(v.id in fixed for v in node.inputs)):
            fixed.update(outs)
            if any(v.id in from_param for v in node.inputs):
                from_param.update(outs)
    return fixed, from_param
