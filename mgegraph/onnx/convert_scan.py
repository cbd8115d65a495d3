"""ONNX's ``Scan`` (opsets 9 and up; opset 8 models arrive converted) and ``Loop`` unrolled over
their static trip counts: the body's nodes are converted once per step into the graph being
built (``Context.inline``), each step reading its slice of the scan inputs (Scan) or its
iteration number (Loop) and the states the step before gave; the scan outputs are the steps'
outputs stacked. A Loop runs while its condition, known at import after each step, holds.
``OptionalGetElement`` of a plain tensor (opset 18 allows one) is that tensor: mgegraph has no
optional values, so an optional input never reaches a converter.

Design: mgegraph plans have static shapes and no control flow, so a loop whose trip count is a
number is a straight line of its bodies. The trip count times the body's nodes is bounded by
``ImportLimits.max_nodes``, as a file's own nodes are.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from .context import shape_of


def _scan(cx, ins, at):
    body, m = at["body"], int(at["num_scan_inputs"])
    n = len(ins) - m
    if m < 1 or n < 0:
        cx.fail(f"num_scan_inputs {m} with {len(ins)} inputs: it needs 1 to {len(ins)}")
    states, scans = list(ins[:n]), list(ins[n:])
    in_axes = _axes(cx, at, "scan_input_axes", scans)
    in_dirs = list(at.get("scan_input_directions", [0] * m))
    steps = _trip_count(cx, scans, in_axes)
    if steps * max(len(body.node), 1) > cx.limits.max_nodes:
        cx.fail(f"{steps} steps of a {len(body.node)}-node body unroll over the limit of "
                f"{cx.limits.max_nodes} nodes (ImportLimits.max_nodes)")
    per_step = []
    for t in range(steps):
        sliced = [_step(x, axis, steps - 1 - t if rev else t)
                  for x, axis, rev in zip(scans, in_axes, in_dirs)]
        outs = cx.inline(body, states + sliced)
        states, per_step = outs[:n], per_step + [outs[n:]]
    k = len(body.output) - n
    out_dirs = list(at.get("scan_output_directions", [0] * k))
    out_axes = list(at.get("scan_output_axes", [0] * k))
    stacked = []
    for j in range(k):
        items = [cx.var(step[j]) for step in per_step]
        items = items[::-1] if out_dirs[j] else items
        stacked.append(F.stack(items, axis=cx.axis(out_axes[j], items[0].ndim + 1,
                                                   "scan_output_axes")))
    return states + stacked


def _loop(cx, ins, at):
    body = at["body"]
    count = None if not ins or ins[0] is None else cx.ints(ins[0], "the trip count M")[0]
    go = True if len(ins) < 2 or ins[1] is None else _known_condition(cx, ins[1])
    if count is None:
        cx.fail("a Loop without a trip count M runs until its condition fails, which mgegraph "
                "unrolls only with M known at import")
    if count * max(len(body.node), 1) > cx.limits.max_nodes:
        cx.fail(f"{count} steps of a {len(body.node)}-node body unroll over the limit of "
                f"{cx.limits.max_nodes} nodes (ImportLimits.max_nodes)")
    states, per_step = list(ins[2:]), []
    for t in range(count):
        if not go:
            break
        outs = cx.inline(body, [np.asarray(t, np.int64), np.asarray(go)] + states)
        go = _known_condition(cx, outs[0])
        states, per_step = outs[1:1 + len(states)], per_step + [outs[1 + len(states):]]
    k = len(body.output) - 1 - len(states)
    if k and not per_step:
        cx.fail("the Loop runs 0 steps: its scan outputs would be empty, of no known shape")
    stacked = [F.stack([cx.var(step[j]) for step in per_step], axis=0) for j in range(k)]
    return states + stacked


def _known_condition(cx, cond) -> bool:
    value = cx.known(cond, "the loop condition")
    if value.size != 1:
        cx.fail(f"the loop condition has shape {list(value.shape)}: it must hold one value")
    return bool(value.reshape(-1)[0])


def _axes(cx, at, name: str, values: list) -> list[int]:
    axes = list(at.get(name, [0] * len(values)))
    if len(axes) != len(values):
        cx.fail(f"{name} has {len(axes)} entries for {len(values)} scan inputs")
    return [cx.axis(a, len(shape_of(x)), name) for a, x in zip(axes, values)]


def _trip_count(cx, scans: list, axes: list) -> int:
    lengths = {shape_of(x)[a] for x, a in zip(scans, axes)}
    if len(lengths) != 1 or not all(isinstance(n, (int, np.integer)) for n in lengths):
        cx.fail(f"the scan inputs' lengths {sorted(map(str, lengths))} must be one number "
                "(the steps are unrolled at import)")
    steps = int(lengths.pop())
    if steps == 0:
        cx.fail("the scan inputs are empty: a Scan of 0 steps has no shape for its outputs")
    return steps


def _step(x, axis: int, t: int):
    """``x`` at index ``t`` of ``axis``, that axis removed."""
    if isinstance(x, np.ndarray):
        return np.take(x, t, axis=axis)
    return F.subscript(x, (slice(None),) * axis + (t,))


# ONNX op -> converter
CONVERTERS = {"Scan": _scan, "Loop": _loop,
              "OptionalGetElement": lambda cx, ins, at: [ins[0]]}
