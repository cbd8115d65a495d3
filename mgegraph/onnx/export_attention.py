"""(export) The attention op as ONNX nodes: MatMul, Softmax, MatMul, with the masks as Where and
Add. ONNX's own Attention op is opset 23, past the opsets the exporter writes (13 to 21), so
the scores are written whole, as ONNX Runtime's exporters of older opsets do.

What the nodes compute is the op's meaning (ops/attention.py): grouped key/value heads repeated
to the query's (Unsqueeze, Expand, Reshape), the causal mask top-left, and a row that attends no
key given 0 where Softmax would give NaN (its row maximum is -inf). Only the output is
written; lse, the backward's residual, is no graph output an exported model can ask for.
"""
from __future__ import annotations

import numpy as np

from ..ir.types import is_float


def _reduce_max_last(w, x: str) -> str:
    if w.opset >= 18:
        return w.add("ReduceMax", [x, w.ints([-1])], keepdims=1)[0]
    return w.add("ReduceMax", [x], axes=[-1], keepdims=1)[0]


def _repeat_heads(w, x: str, groups: int, heads: int, length: int, width: int) -> str:
    """(B, H, L, W) as (B, H * groups, L, W), each head repeated ``groups`` times in place."""
    x = w.add("Unsqueeze", [x, w.ints([2])])[0]
    x = w.add("Expand", [x, w.ints([1, 1, groups, 1, 1])])[0]
    return w.add("Reshape", [x, w.ints([0, heads * groups, length, width])])[0]


def write_attention(w, n, ins) -> list[str]:
    """The writer of ``attention`` (registered in onnx/exporter.py)."""
    q, k, v = ins[:3]
    qt, kt, vt = n.inputs[:3]
    dtype = qt.dtype
    hq, lq = qt.shape[1], qt.shape[2]
    hkv, lk = kt.shape[1], kt.shape[2]
    if hq != hkv:
        k = _repeat_heads(w, k, hq // hkv, hkv, lk, kt.shape[3])
        v = _repeat_heads(w, v, hq // hkv, hkv, lk, vt.shape[3])
    kt_name = w.add("Transpose", [k], perm=[0, 1, 3, 2])[0]
    s = w.add("MatMul", [q, kt_name])[0]
    s = w.add("Mul", [s, w.const(np.asarray(n.attr["scale"], dtype))])[0]
    ninf = w.const(np.asarray(-np.inf, dtype))
    if n.attr["is_causal"]:
        s = w.add("Where", [w.const(np.tril(np.ones((lq, lk), bool))), s, ninf])[0]
    if len(ins) == 4:
        mask = n.inputs[3]
        s = w.add("Add", [s, ins[3]])[0] if is_float(mask.dtype) else \
            w.add("Where", [ins[3], s, ninf])[0]
    p = w.add("Softmax", [s], axis=-1)[0]
    dead = w.add("Equal", [_reduce_max_last(w, s), ninf])[0]
    p = w.add("Where", [dead, w.const(np.asarray(0, dtype)), p])[0]
    return [w.add("MatMul", [p, v])[0], w.fresh("unused_lse")]
