"""Algebraic simplification: a table of local rewrites applied until none matches.

Design: each rule is data, (name, op, rewrite): the rewrite looks at one node whose inputs are
already rewritten (so ``neg(neg(x))`` sees the inner node as it now is) and returns the Var
that replaces its output, or None. A rule that returns an existing Var only fires when that
Var has the node's exact type: ``x * 1`` with a broadcasting ``1`` makes a bigger value than
``x`` and stays. Constants are const nodes whose array has one value throughout, and fills.

Every rule is exact except for the sign of zero: ``x + 0.0`` and ``x - (-0.0)`` give +0.0 where
x is -0.0, the rewritten graph gives -0.0 (equal under ==; XLA's simplifier does the same).
Left out on purpose: ``x * 0`` for floats (NaN * 0 and inf * 0 are NaN, not 0), ``x - x``
and ``x / x`` (NaN and inf again), and casts of casts (they round).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...ir.graph import Graph, Node, Var
from ...ir.types import is_float
from .rewrite import Builder, PassResult, rebuild

MAX_SWEEPS = 16  # each sweep rewrites whole chains; a fixpoint takes two or three


@dataclass(frozen=True)
class Match:
    """One node under a rule: ``inputs`` are its inputs in the graph being built."""

    builder: Builder
    node: Node
    inputs: tuple[Var, ...]

    @property
    def out(self) -> Var:
        return self.node.outputs[0]

    def same_type(self, var: Var) -> Var | None:
        return var if var.type == self.out.type else None


@dataclass(frozen=True)
class Rule:
    name: str
    op: str
    rewrite: Callable[[Match], "Var | None"]


def splat(builder: Builder, var: Var):
    """The one value every element of ``var`` has, when a const or a fill makes it; else None.

    >>> splat(builder, builder.graph.const(np.ones(3)))  # 1.0
    """
    node = var.node
    if node.op.name == "fill":
        return node.attr["value"]
    if node.op.name != "const":
        return None
    array = builder.graph.values[var.id]
    if array.size == 0 or not np.all(array == array.flat[0]):
        return None
    return array.flat[0].item()


def _is(m: Match, index: int, value) -> bool:
    found = splat(m.builder, m.inputs[index])
    return found is not None and found == value


def _right_identity(value):
    def rewrite(m: Match):
        return m.same_type(m.inputs[0]) if _is(m, 1, value) else None
    return rewrite


def _either_identity(value):
    def rewrite(m: Match):
        for keep, other in ((0, 1), (1, 0)):
            if _is(m, other, value) and m.same_type(m.inputs[keep]) is not None:
                return m.inputs[keep]
        return None
    return rewrite


def _mul_zero(m: Match):
    if is_float(m.out.dtype) or not (_is(m, 0, 0) or _is(m, 1, 0)):
        return None
    zero = np.zeros((), m.out.dtype).item()
    (out,) = m.builder.add("fill", (), {"shape": m.out.shape, "dtype": str(m.out.dtype),
                                        "value": zero}, m.node)
    return out


def _producer(var: Var, op: str) -> Node | None:
    return var.node if var.node.op.name == op else None


def _neg_neg(m: Match):
    inner = _producer(m.inputs[0], "neg")
    return inner.inputs[0] if inner is not None else None


def _axes(pattern, ndim: int) -> tuple:
    return tuple("x" if a == "x" else a % ndim for a in pattern)


def _transpose_identity(m: Match):
    x = m.inputs[0]
    return x if _axes(m.node.attr["pattern"], x.ndim) == tuple(range(x.ndim)) else None


def _transpose_transpose(m: Match):
    inner = _producer(m.inputs[0], "transpose")
    if inner is None:
        return None
    x = inner.inputs[0]
    p = _axes(inner.attr["pattern"], x.ndim)
    q = _axes(m.node.attr["pattern"], m.inputs[0].ndim)
    composed = tuple("x" if a == "x" else p[a] for a in q)
    if composed == tuple(range(x.ndim)):
        return x
    (out,) = m.builder.add("transpose", (x,), {"pattern": composed}, m.node)
    return out


def _reshape_reshape(m: Match):
    inner = _producer(m.inputs[0], "reshape")
    if inner is None:
        return None
    x = inner.inputs[0]
    if x.shape == m.out.shape:
        return x
    (out,) = m.builder.add("reshape", (x,), {"shape": m.out.shape}, m.node)
    return out


def _same_as_input(m: Match):
    return m.same_type(m.inputs[0])


# Rules of one op are tried in order; the first that returns a Var wins.
RULES = (
    Rule("mul_one", "mul", _either_identity(1)),
    Rule("mul_zero", "mul", _mul_zero),
    Rule("add_zero", "add", _either_identity(0)),
    Rule("sub_zero", "sub", _right_identity(0)),
    Rule("div_one", "div", _right_identity(1)),
    Rule("neg_neg", "neg", _neg_neg),
    Rule("transpose_identity", "transpose", _transpose_identity),
    Rule("transpose_transpose", "transpose", _transpose_transpose),
    Rule("reshape_same", "reshape", _same_as_input),
    Rule("reshape_reshape", "reshape", _reshape_reshape),
    Rule("cast_same", "cast", _same_as_input),
    Rule("broadcast_same", "broadcast_to", _same_as_input),
)


def _rules_by_op(rules) -> dict[str, list[Rule]]:
    table: dict[str, list[Rule]] = {}
    for rule in rules:
        table.setdefault(rule.op, []).append(rule)
    return table


def _sweep(graph: Graph, table, counts: dict[str, int]) -> Builder:
    def apply_rules(builder, node):
        if len(node.outputs) != 1:
            return None
        match = Match(builder, node, tuple(builder.var(v) for v in node.inputs))
        for rule in table.get(node.op.name, ()):
            new = rule.rewrite(match)
            if new is not None:
                counts[rule.name] = counts.get(rule.name, 0) + 1
                return (new,)
        return None

    return rebuild(graph, apply_rules)


def simplify(graph: Graph, outputs: list[Var], rules=RULES) -> PassResult:
    """Apply ``rules`` to a fixpoint; stats ``{"rewrites": {"mul_one": 2, ...}}``. Nodes left
    unused stay for DCE.

    >>> r = simplify(g, [-(-x) * 1.0]); r.outputs[0] is r.graph.inputs["x"]
    """
    table, counts = _rules_by_op(rules), {}
    outs = list(outputs)
    for _ in range(MAX_SWEEPS):
        before = sum(counts.values())
        builder = _sweep(graph, table, counts)
        graph, outs = builder.graph, [builder.var(v) for v in outs]
        if sum(counts.values()) == before:
            break
    return PassResult(graph, outs, bool(counts), {"rewrites": counts})
