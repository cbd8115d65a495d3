"""Rematerialisation (sublinear memory): recompute forward values in the backward pass instead of
keeping them alive from the forward pass to their use in the backward.

Design: a remat plan is data, the set of forward values that are *kept* (their originals may be
read by the backward part); every other forward value the backward part reads is recomputed
there, from kept values and sources, by clones of the forward nodes that made it (or their
op's cheaper ``OpDef.remake``: a training batch norm from the statistics it saved), inserted
just before its first backward use. ``rematerialize`` turns a plan into an ordinary Graph that
goes through lowering and memory planning like any other; the clones are listed so that the
scheduler can pin each behind the backward step before it (``pins``). Which set to keep is
chosen in ``remat_search`` by planning the candidates' memory for real.

The forward part is what the first output (the loss) depends on; the backward part is every
other node after the last forward node (gradients, optimiser updates, metrics). Nodes that are
not forward but sit among the forward nodes (batch norm's running statistics) read originals.

>>> compile([loss], remat="sqrt")      # or "auto", RematOptions(overhead=0.2), 64 * 2**20
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir.errors import GraphError
from ...ir.graph import Graph, Node, Var
from ...ops.registry import Remake
from ..passes.rewrite import Builder

MODES = ("sqrt", "auto")


@dataclass(frozen=True)
class RematOptions:
    """How ``mg.compile(..., remat=)`` trades compute for memory.

    ``mode``: "sqrt" (checkpointed segments, each dear value recomputed at most once and cheap
    ones possibly remade at each use, the smallest peak such a plan reaches), "auto" (the
    smallest peak whose extra FLOPs are at most ``overhead`` times the step's) or a byte budget
    (the least recomputation whose planned arena, workspaces included, fits in it; an error
    names the smallest peak reachable).

    >>> mg.compile([loss], remat=RematOptions("auto", overhead=0.2))
    """

    mode: str | int = "auto"
    overhead: float = 0.30

    def __post_init__(self):
        budget = isinstance(self.mode, int) and not isinstance(self.mode, bool)
        if not (self.mode in MODES or (budget and self.mode > 0)):
            raise GraphError(f"remat mode {self.mode!r} is not one of {MODES} or a positive "
                             "number of bytes")
        if not (isinstance(self.overhead, (int, float)) and self.overhead >= 0):
            raise GraphError(f"remat overhead must be a fraction >= 0, got {self.overhead!r}")

    @property
    def budget(self) -> int | None:
        return None if self.mode in MODES else int(self.mode)


def remat_options(value) -> RematOptions | None:
    """``remat=`` of compile: None (off), "sqrt", "auto", a byte budget, or RematOptions."""
    if value is None or isinstance(value, RematOptions):
        return value
    try:
        return RematOptions(value)
    except GraphError:
        raise GraphError(f"remat={value!r}: pass None, 'sqrt', 'auto', a positive byte budget "
                         "(remat=512 * 2**20) or a mg.planner.RematOptions") from None


# -- the forward/backward split ----------------------------------------------------------------
def is_view(node: Node) -> bool:
    return node.op.view_offset(node) is not None


def remake(node: Node) -> Remake | None:
    """The op's cheaper way to recompute ``node`` (``OpDef.remake``), or None."""
    return node.op.remake(node) if node.op.remake is not None else None


def recompute_inputs(node: Node) -> tuple[Var, ...]:
    r = remake(node)
    return node.inputs if r is None else r.inputs


def remade_outputs(node: Node) -> tuple[Var, ...]:
    """The outputs of ``node`` a recomputation makes (its remake's, or all)."""
    r = remake(node)
    return node.outputs if r is None else tuple(node.outputs[i] for i in r.outputs)


def recompute_cost(node: Node) -> float:
    """FLOPs of recomputing ``node``: its remake's, else a run of the node."""
    r = remake(node)
    return node.op.cost(node) if r is None else r.flops


def root(v: Var) -> Var:
    """The value whose buffer ``v`` lives in (itself unless it is a view)."""
    while v.node is not None and is_view(v.node):
        v = v.node.inputs[0]
    return v


@dataclass(frozen=True)
class Split:
    """A training graph cut into its forward part and the rest.

    ``forward``: the non-source nodes the loss depends on, in graph order; ``backward_from``:
    the index in ``graph.nodes`` after the last of them; ``crossing``: the buffers (root value
    id -> Var) of forward values that nodes from there on read; ``always_kept``: root ids
    never recomputed, the caller's outputs (they outlive the run), what the last forward
    node that is not a view (the loss) reads or makes (live when the backward starts anyway,
    so recomputing them would save nothing) and the outputs a node's remake reads (batch
    norm's statistics, C values each); ``across_loss``: the crossing buffers read by nodes
    that depend on the loss, so live while it is computed in any plan that keeps them.
    """

    graph: Graph
    forward: tuple[Node, ...]
    forward_ids: frozenset[int]
    backward_from: int
    crossing: dict[int, Var]
    always_kept: frozenset[int]
    positions: dict[int, int]   # id() of a forward node -> its index in ``forward``
    values: dict[int, Var]      # id of a forward value -> the Var
    across_loss: frozenset[int]

    def is_forward_value(self, v: Var) -> bool:
        return v.node is not None and id(v.node) in self.forward_ids


def split(graph: Graph, outputs) -> Split:
    needed, forward = {outputs[0].id}, set()
    for node in reversed(graph.nodes):
        if any(v.id in needed for v in node.outputs):
            needed.update(v.id for v in node.inputs)
            if node.op.category != "source":
                forward.add(id(node))
    last = max((i for i, n in enumerate(graph.nodes) if id(n) in forward), default=-1)
    crossing, across_loss, after_loss = {}, set(), {outputs[0].id}
    for node in graph.nodes[last + 1:]:
        on_loss = any(v.id in after_loss for v in node.inputs)
        if on_loss:
            after_loss.update(v.id for v in node.outputs)
        for v in node.inputs:
            if v.node is not None and id(v.node) in forward:
                r = root(v)
                if r.node is not None and id(r.node) in forward:
                    crossing[r.id] = r
                    if on_loss:
                        across_loss.add(r.id)
    nodes = tuple(n for n in graph.nodes if id(n) in forward)
    computing = [n for n in nodes if not is_view(n)]
    at_end = [root(v).id for v in computing[-1].inputs + computing[-1].outputs] \
        if computing else []
    remake_reads = [root(v).id for n in nodes for v in recompute_inputs(n) if v.node is n]
    return Split(graph, nodes, frozenset(forward), last + 1, crossing,
                 frozenset([root(v).id for v in outputs] + at_end + remake_reads),
                 {id(n): i for i, n in enumerate(nodes)},
                 {v.id: v for n in nodes for v in n.outputs}, frozenset(across_loss))


# -- what a plan recomputes ----------------------------------------------------------------------
def makers(s: Split, kept, values, done=frozenset()) -> list[Node]:
    """The forward nodes that recompute ``values`` from ``kept`` values (root ids) and sources,
    in forward order; values in ``done`` (ids) are at hand already and need no node."""
    found: dict[int, Node] = {}
    stack = [v.node for v in values if v.id not in done]
    while stack:
        node = stack.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        stack += [u.node for u in recompute_inputs(node)
                  if s.is_forward_value(u) and root(u).id not in kept and u.id not in done]
    return sorted(found.values(), key=lambda n: s.positions[id(n)])


def recomputed_nodes(s: Split, kept) -> list[Node]:
    """The forward nodes a plan keeping ``kept`` (root value ids) clones, in graph order: the
    makers of the crossing values not kept, and of the values those need that are not kept."""
    kept = frozenset(kept) | s.always_kept
    return makers(s, kept, [v for rid, v in s.crossing.items() if rid not in kept])


def recomputations(s: Split, kept, mirror: bool = False) -> list[tuple[int, list[Node]]]:
    """(index in ``s.graph.nodes`` of a backward node, the forward nodes cloned just before
    it), in order, for a plan keeping ``kept`` (root value ids).

    A clone is made before the first backward node that needs its value and held for the later
    ones. With ``mirror`` (Chen et al.'s "mirror" of cheap ops, as in MXNet), only the clones
    of dear ops are held: a cheap clone serves the backward nodes up to the next dear one and
    is then remade where needed, so a segment's cheap values (norm and activation outputs) are
    not live across its GEMMs or convolutions. Remaking them costs cheap FLOPs only.
    """
    kept = frozenset(kept) | s.always_kept
    held: set[int] = set()    # ids of values whose clones later nodes may read
    fresh: set[int] = set()   # cheap clones, with mirror, until the next dear node
    out = []
    for index in range(s.backward_from, len(s.graph.nodes)):
        user = s.graph.nodes[index]
        if mirror and not user.op.cheap(user):
            held -= fresh
            fresh.clear()
        needed = [v for v in user.inputs if s.is_forward_value(v) and root(v).id not in kept]
        missing = makers(s, kept, needed, held) if needed else []
        if not missing:
            continue
        out.append((index, missing))
        for node in missing:
            made = {v.id for v in remade_outputs(node)}
            held |= made
            if mirror and node.op.cheap(node):
                fresh |= made
    return out


def graph_flops(graph: Graph) -> float:
    return sum(node.op.cost(node) for node in graph.nodes if node.op.name != "assign")


# -- the transform -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rematerialized:
    """The rebuilt graph, the caller's outputs in it, the clone nodes (new graph) and, per
    backward node that needed them, the forward nodes recomputed before it."""

    graph: Graph
    outputs: list[Var]
    clones: frozenset[int]                           # id() of the clone nodes
    groups: tuple[tuple[Node, tuple[Node, ...]], ...]  # (user, forward nodes cloned for it)


def rematerialize(s: Split, outputs, kept, groups) -> Rematerialized:
    """``s.graph`` with every forward value outside ``kept`` (root ids) recomputed before its
    uses after the forward part, where ``groups`` (``recomputations(s, kept, mirror)``) says.

    >>> r = rematerialize(s, [loss], frozenset(), recomputations(s, frozenset())); print(r.graph)
    """
    kept = frozenset(kept) | s.always_kept
    groups = dict(groups)
    b = Builder(s.graph)
    latest: dict[int, Var] = {}   # id of a value not kept -> its newest clone
    clones, made = [], []

    def new(v: Var) -> Var:
        recomputed = s.is_forward_value(v) and root(v).id not in kept
        return latest[v.id] if recomputed else b.var(v)

    for index, node in enumerate(s.graph.nodes):
        if index in groups:
            for old in groups[index]:
                r = remake(old)
                inputs = tuple(new(u) for u in recompute_inputs(old))
                clone = b.graph.add_copy(old, inputs) if r is None else \
                    b.graph.add_node(r.op, inputs, dict(r.attrs), location=old.location)
                clones.append(clone)
                latest.update((v.id, c) for v, c in zip(remade_outputs(old), clone.outputs))
            made.append((node, tuple(groups[index])))
        outs = b.copy(node, tuple(new(u) for u in node.inputs) if index >= s.backward_from
                      else None)
        for old, out in zip(node.outputs, outs):
            b.vars[old.id] = out
    b.carry_bindings()
    return Rematerialized(b.graph, [b.var(v) for v in outputs],
                          frozenset(id(n) for n in clones), tuple(made))
