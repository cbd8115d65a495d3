"""GEMM accumulation: ``c + s * (a @ b)`` and ``c - s * (a @ b)`` become one addmm, the product
added into c by the GEMM itself (BLAS's beta = 1).

Why: SGD's update of a weight is ``w - lr * dw`` with ``dw = g.T @ x``. Unfused, the GEMM writes
dw out (4 MiB for a 1024 x 1024 layer) and an elementwise kernel reads it back with w to write
w: three passes over memory beside the GEMM, and dw's bytes in the arena. As ``addmm(w, g, x,
lr, alpha=-1)`` the GEMM reads and writes w in place (the lowering computes an assigned value
straight into its param; the memory planner lets addmm's output take over input 0), so the
update costs no pass of its own and dw no memory. The same holds for a residual ``h + x @ w``.

A matmul is absorbed only when it is a product of two matrices (no batch) of c's shape and
dtype, and its one use (and the scaling's, when there is one) is this add or sub, so nothing
else needs the product. ``s`` must hold one value. c must not come from an elementwise op:
fuse would have merged that op with the add, and addmm would only move its pass (SGD with
momentum, ``mu * v + dw``, stays as it was).

Rounding: through the BLAS the result is not bitwise the unfused one (the BLAS applies alpha
and adds c with its own rounding, one fused multiply-add where eager mode rounds twice). On the
CPU's tiles each element is scaled and added as the mul and the add or sub would (linalg.pyx's
row_out), from the same product. ``exact(matmul node)``, the target's word on which products
those are, restricts the pass to them at level 1 (pipeline.LEVELS), where a compiled step
gives bitwise eager mode's weights; level 2 absorbs every match.

>>> str(accumulate(g, [y], runs).graph)   # sub %w (mul (matmul %g %x) %lr) -> addmm %w %g %x %lr
"""
from __future__ import annotations

from dataclasses import dataclass

from .rewrite import PassResult, rebuild, result, use_counts


@dataclass(frozen=True)
class _Match:
    c: object           # the Var the product is added to
    product: object     # the matmul node
    scale: object       # a one-value Var multiplying the product, or None
    alpha: float        # +1 (add) or -1 (sub)
    absorbed: tuple     # the nodes replaced: the matmul and the mul, when there is one


def _product(var, uses):
    """(matmul node, scale Var or None, nodes absorbed) when ``var`` is ``a @ b`` or a
    one-value scaling of it, each used only here; else None."""
    node = var.node
    if node is None or uses.get(var.id) != 1:
        return None
    if node.op.name == "matmul":
        return node, None, (node,)
    if node.op.name != "mul":
        return None
    for k, v in enumerate(node.inputs):
        other = node.inputs[1 - k]
        if (v.node is not None and v.node.op.name == "matmul" and uses.get(v.id) == 1
                and other.size == 1 and other.ndim <= 2 and other.id != v.id):
            return v.node, other, (v.node, node)
    return None


def _match(node, uses) -> _Match | None:
    name = node.op.name
    if name not in ("add", "sub") or node.outputs[0].dtype.kind != "f":
        return None
    out = node.outputs[0]
    orders = [(0, 1), (1, 0)] if name == "add" else [(0, 1)]
    for ci, pi in orders:
        c, found = node.inputs[ci], _product(node.inputs[pi], uses)
        if found is None:
            continue
        mm, scale, absorbed = found
        a, b = mm.inputs
        if c.node is not None and c.node.op.category == "elementwise":
            continue
        if (a.ndim == 2 and b.ndim == 2 and c.type == out.type
                and mm.outputs[0].type == out.type and (scale is None or scale.dtype == out.dtype)):
            return _Match(c, mm, scale, -1.0 if name == "sub" else 1.0, absorbed)
    return None


def accumulate(graph, outputs, runs=None, exact=None) -> PassResult:
    """``runs(op name)``: whether the target has a kernel for an op; without addmm's, nothing
    changes. ``exact(matmul node)``, when given: whether the target's addmm of that product
    rounds as the ops it replaces; only those are absorbed."""
    if runs is None or not runs("addmm"):
        return PassResult(graph, list(outputs), False, {"fused": 0})
    uses = use_counts(graph, outputs)
    matches = {}
    absorbed = set()
    for node in graph.nodes:
        m = _match(node, uses)
        if m is not None and exact is not None and not exact(m.product):
            continue
        if m is not None and not any(id(n) in absorbed for n in m.absorbed):
            matches[id(node)] = m
            absorbed.update(id(n) for n in m.absorbed)
    if not matches:
        return PassResult(graph, list(outputs), False, {"fused": 0})

    def rewrite(builder, node):
        m = matches.get(id(node))
        if m is not None:
            inputs = [builder.var(v) for v in (m.c, *m.product.inputs)]
            if m.scale is not None:
                inputs.append(builder.var(m.scale))
            return builder.add("addmm", inputs, {**m.product.attr, "alpha": m.alpha}, node)
        if id(node) in absorbed:
            return (None,) * len(node.outputs)
        return None

    builder = rebuild(graph, rewrite)
    return result(builder, outputs, True, {"fused": len(matches)})
