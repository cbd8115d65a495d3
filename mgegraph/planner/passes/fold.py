"""Constant folding: evaluate at compile time every node whose inputs are all constant.

Design: a value is constant when a const node or a constant node makes it; params are not
(a training step or ``load_state_dict`` changes them between runs), nor inputs. The constant
nodes are copied into a graph of their own, compiled with the plain (unoptimised)
``plan.compile`` and run once, so folding uses the very kernels a run would and the folded
values are bitwise the ones the unfolded graph computes. Only the constant values that a
non-constant node, an assign or an output reads become consts; the constant nodes between
them simply disappear.

Generators without inputs (fill, arange, linspace) are constant but not folded on their own:
they exist so a large constant takes no persistent memory. A node is folded only when each of
its results and each of its inputs is at most ``max_bytes``: evaluating the constant subgraph
materialises every value in it, so ``sum(full((8192, 8192), 1.0))`` stays a run-time reduction
of a generator instead of a 256 MiB fill at compile time. (A const input is already in memory;
it is read in place whatever its size.)

A constant subgraph whose evaluation fails in a kernel (an integer ``pow`` with a negative
exponent) is left unfolded: the run then raises the kernel's KernelError, naming the op and the
user's line, instead of compile failing inside the pass.
"""
from __future__ import annotations

from ...ir.errors import KernelError
from ...ir.graph import Graph, Node, Var
from .rewrite import PassResult, rebuild, result, weight_result_fits

MAX_BYTES = 1 << 20


def _constant_nodes(graph: Graph, max_bytes: int, weights: bool = False) -> set[int]:
    """``id`` of every non-source node whose inputs are all constant and whose results and
    computed inputs are small enough; generators count as constant inputs. With ``weights``,
    a node computed from consts alone (no generator before it) is also folded when its results
    fit (``rewrite.weight_result_fits``)."""
    constant_vars: set[int] = set()
    in_memory: set[int] = set()  # const results: evaluating reads them, materialises nothing
    from_consts: set[int] = set()  # values computed from consts alone (no generator)
    found = set()
    for node in graph.nodes:
        name = node.op.name
        if name == "const":
            constant_vars.add(node.outputs[0].id)
            in_memory.add(node.outputs[0].id)
        if node.op.category == "source" or name == "assign" or not node.outputs:
            continue
        if all(v.id in constant_vars for v in node.inputs):
            if not node.inputs:
                constant_vars.update(v.id for v in node.outputs)
            elif weights and all(v.id in in_memory or v.id in from_consts
                                 for v in node.inputs) and weight_result_fits(node):
                constant_vars.update(v.id for v in node.outputs)
                from_consts.update(v.id for v in node.outputs)
                found.add(id(node))
            elif all(v.type.nbytes <= max_bytes for v in node.outputs) and all(
                    v.type.nbytes <= max_bytes for v in node.inputs if v.id not in in_memory):
                constant_vars.update(v.id for v in node.outputs)
                found.add(id(node))
    return found


def _boundary(graph: Graph, outputs, folded: set[int]) -> list[Var]:
    """The results of folded nodes that something other than a folded node reads."""
    made = {v.id: v for n in graph.nodes if id(n) in folded for v in n.outputs}
    read = {v.id for v in outputs}
    for node in graph.nodes:
        if id(node) not in folded:
            read.update(v.id for v in node.inputs)
    return [v for i, v in made.items() if i in read]


def _evaluate(graph: Graph, folded: set[int], wanted: list[Var], evaluate) -> list:
    """The values of ``wanted``: ``evaluate`` (the pipeline's, which runs an unoptimised plan
    on the target device) applied to the constant subgraph alone."""

    def constant_only(builder, node):
        if id(node) in folded or node.op.name == "const" or (
                not node.inputs and node.outputs and node.op.category != "source"):
            return None
        return (None,) * len(node.outputs)

    builder = rebuild(graph, constant_only)
    return evaluate([builder.var(v) for v in wanted])


def fold(graph: Graph, outputs: list[Var], max_bytes: int = MAX_BYTES,
         evaluate=None, weights: bool = False) -> PassResult:
    """Replace constant nodes by consts; stats ``{"folded": nodes, "consts": made,
    "bytes": bytes of the new consts}``. ``evaluate(outputs) -> arrays`` computes the folded
    values (``mg.compile`` passes one that runs on its device); without it nothing is folded.
    ``weights=True`` (``compile(freeze=True)``, whose weights are consts) folds values
    computed from consts alone whatever their size when none is larger than what it is
    computed from: a scaled or transposed weight replaces the weight, it adds no memory.

    >>> r = fold(g, [x * (g.const(2.0) + 1.0)]); print(r.graph)  # x * const 3.0
    """
    folded = _constant_nodes(graph, max_bytes, weights) if evaluate is not None else set()
    if not folded:
        return PassResult(graph, list(outputs), False, {"folded": 0, "consts": 0, "bytes": 0})
    wanted = _boundary(graph, outputs, folded)
    try:
        values = dict(zip((v.id for v in wanted), _evaluate(graph, folded, wanted, evaluate))) \
            if wanted else {}
    except KernelError:  # left for the run to raise, with the op and the user's line
        return PassResult(graph, list(outputs), False, {"folded": 0, "consts": 0, "bytes": 0})

    def replace_folded(builder, node: Node):
        if id(node) not in folded:
            return None
        return tuple(builder.const(values[v.id], quant=v.type.quant) if v.id in values else None
                     for v in node.outputs)

    builder = rebuild(graph, replace_folded)
    stats = {"folded": len(folded), "consts": len(values),
             "bytes": sum(a.nbytes for a in values.values())}
    return result(builder, outputs, bool(folded), stats)
