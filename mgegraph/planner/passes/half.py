"""Half precision in float32: a node on float16 or bfloat16 that its backend has no kernel for
becomes casts to float32, the node on float32, and casts of its results back.

That is what such a node means (``ops.registry``: every op but those that move or convert bytes
computes in float32 and rounds its results to the half type once), so the rewrite changes no
value. It runs before the optimisation passes, at every level (a plan has no other way to run
the node): the fusion pass then joins each cast to the float32 work beside it, and the memory
planner sees the float32 temporaries like any other value.

>>> str(widen_half(g, [y], runs=lambda node: False).graph)   # y = x16 * x16
%1:f32[4] = cast[dtype=float32] %0
%2:f32[4] = mul %1 %1
%3:f16[4] = cast[dtype=float16] %2
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...ir.graph import Node
from ...ir.types import HALF_DTYPES
from ...ops.registry import HALF_NATIVE_OPS
from .rewrite import PassResult, rebuild, result

FLOAT32 = np.dtype(np.float32)


def needs_widening(node: Node) -> bool:
    """Whether ``node`` reads or makes a half type and is not an op that moves its bytes."""
    if node.op.name in HALF_NATIVE_OPS:
        return False
    return any(v.dtype in HALF_DTYPES for v in (*node.inputs, *node.outputs))


def backend_runs_half(backend, node: Node) -> bool:
    """Whether ``backend`` has kernels for the half types ``node`` reads and makes."""
    impl = backend.impl(node.op.name)
    return impl is not None and all(v.dtype in impl.dtypes for v in (*node.inputs, *node.outputs)
                                    if v.dtype in HALF_DTYPES)


def widen_half(graph, outputs, runs: Callable[[Node], bool]) -> PassResult:
    """Widen every node ``needs_widening`` names that ``runs(node)`` (the backend has a kernel
    for its half types) does not; stats ``{"nodes_widened": n}``."""
    widened = 0

    def rewrite(builder, node):
        nonlocal widened
        if not needs_widening(node) or runs(node):
            return None
        widened += 1
        inputs = [builder.var(v) for v in node.inputs]
        wide = [builder.add("cast", (v,), {"dtype": FLOAT32}, node)[0]
                if v.dtype in HALF_DTYPES else v for v in inputs]
        outs = builder.add(node.op, wide, node.attr, node)
        return tuple(out if out.dtype == old.dtype else
                     builder.add("cast", (out,), {"dtype": old.dtype}, node)[0]
                     for out, old in zip(outs, node.outputs))

    builder = rebuild(graph, rewrite)
    if not widened:
        return PassResult(graph, list(outputs), False, {})
    return result(builder, outputs, True, {"nodes_widened": widened})
