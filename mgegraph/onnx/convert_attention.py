"""ONNX's ``Attention`` (opsets 23, 24 and 25) as a composition of mgegraph ops: reshape and
transpose for 3-D inputs, concat for the key/value cache, matmul, tanh for the softcap,
an additive bias for the masks, softmax and a where for fully masked rows.

The masks are built once into one additive bias: ``attn_mask`` (bool: False is -inf; float:
added), padded with -inf to the total key length where shorter; ``is_causal`` (query ``i``
sees key ``j`` iff ``j <= i + offset``, ``offset`` the past length, or
``nonpad_kv_seqlen - q_len`` per batch without a past); the sliding window of opset 25
(``left_window_size``, ``right_window_size`` around ``i + offset``); and the padding of
``nonpad_kv_seqlen`` (opset 24). Parts known at import are NumPy arrays folded together, so
a causal mask costs one constant. A query row whose bias is -inf everywhere gives zeros, in
``Y`` and in the softmax output, as the definition says (softmax alone would give NaN).

Design: ``attend`` is the whole computation on 4-D heads; the converter only reads the
node, reshapes and builds the bias. A fused attention op can take the plain cases (no softcap,
no ``qk_matmul_output``) by changing ``attend`` alone.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.graph import Var
from .context import dtype_of, shape_of

_NEG_INF = np.float32(-np.inf)
_QK_MODES = {0: "qk", 1: "softcapped", 2: "biased", 3: "softmax"}


def attend(q, k, v, bias, scale: float, softcap: float = 0.0, keep: str | None = None,
           softmax_dtype=None):
    """Scaled dot-product attention over 4-D heads: ``q`` (B, Hq, S, D), ``k`` (B, Hkv, L, D),
    ``v`` (B, Hkv, L, Dv) with ``Hq`` a multiple of ``Hkv`` (grouped queries: each key head
    serves ``Hq / Hkv`` adjacent query heads); ``bias`` None, an array or a Var broadcasting to
    (B, Hq, S, L). Returns ``(y, kept)``: y (B, Hq, S, Dv) and the scores at stage ``keep``
    ("qk", "softcapped", "biased", "softmax"; None keeps nothing).

    ONNX scales both operands by ``sqrt(scale)`` before the product (its definition, which
    guards against overflow); the cases with neither softcap nor ``keep`` are what a fused
    scaled-dot-product-attention op computes, and can be routed to one here.

    >>> y, _ = attend(q, k, v, None, scale=1 / 8)
    """
    scores, v = _scores(q, k, v, np.sqrt(scale))
    stages = {"qk": scores}
    if softcap > 0:
        scores = F.mul(F.tanh(F.div(scores, np.float32(softcap))), np.float32(softcap))
    stages["softcapped"] = scores
    if bias is not None:
        scores = F.add(scores, bias)
    stages["biased"] = scores
    if softmax_dtype is not None and softmax_dtype != scores.dtype:
        probs = F.astype(F.softmax(F.astype(scores, softmax_dtype), axis=-1), scores.dtype)
    else:
        probs = F.softmax(scores, axis=-1)
    probs = _zero_masked_rows(probs, bias)
    stages["softmax"] = probs
    return F.matmul(probs, v), (stages[keep] if keep else None)


def _scores(q, k, v, root: float):
    """``q k^T`` scaled, each operand by ``root`` (ONNX scales by the root of the scale, each
    op rounding it its own way), and ``v``; a key head serves its group of ``Hq / Hkv``
    adjacent query heads."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = F.repeat(k, groups, axis=1), F.repeat(v, groups, axis=1)
    root = np.asarray(root).astype(q.dtype)
    return F.matmul(F.mul(q, root), F.mul(k, root), transpose_b=True), v


def _zero_masked_rows(probs, bias):
    """Rows whose bias is -inf everywhere attend to nothing: zeros, not softmax's NaN."""
    if bias is None:
        return probs
    zero = np.zeros((), probs.dtype)  # of probs' dtype: a float32 zero would widen half probs
    if isinstance(bias, np.ndarray):
        dead = np.isneginf(bias.max(axis=-1, keepdims=True))
        return F.where(dead, zero, probs) if dead.any() else probs
    dead = F.equal(F.max(bias, axis=-1, keepdims=True), _NEG_INF)
    return F.where(dead, zero, probs)


def _attention(cx, ins, at):
    ins = list(ins) + [None] * (7 - len(ins))
    q, k, v = (cx.var(x) for x in ins[:3])
    mask, past_k, past_v, nonpad = ins[3:7]
    _check_attrs(cx, at, q.ndim)
    if (past_k is None) != (past_v is None):
        cx.fail("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        cx.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    q4, k4, v4 = _heads(cx, q, k, v, at)
    if past_k is not None:
        k4 = _concat_past(cx, cx.var(past_k), k4, "past_key")
        v4 = _concat_past(cx, cx.var(past_v), v4, "past_value")
    scale = at.get("scale")
    scale = 1.0 / np.sqrt(q4.shape[3]) if scale is None else float(scale)
    past = 0 if past_k is None else shape_of(past_k)[2]
    bias = _bias(cx, mask, nonpad, at, q4, k4.shape[2], past)
    mode = int(at.get("qk_matmul_output_mode", 0))
    wants_qk = len(cx.node.output) > 3 and bool(cx.node.output[3])
    precision = at.get("softmax_precision")
    y, kept = attend(q4, k4, v4, bias, scale, float(at.get("softcap", 0.0)),
                     _QK_MODES[mode] if wants_qk else None,
                     None if precision is None else dtype_of(precision, cx.where()))
    if q.ndim == 3:
        y = F.reshape(F.transpose(y, (0, 2, 1, 3)), (y.shape[0], y.shape[2], -1))
    return [y, k4, v4, kept]


def _check_attrs(cx, at, ndim: int):
    if ndim not in (3, 4):
        cx.fail(f"Q of rank {ndim}: Attention takes 3-D (batch, seq, hidden) or 4-D (batch, "
                "heads, seq, head_size) inputs")
    mode = int(at.get("qk_matmul_output_mode", 0))
    if mode not in _QK_MODES:
        cx.fail(f"qk_matmul_output_mode {mode} is not one of {sorted(_QK_MODES)}")
    for name in ("left_window_size", "right_window_size"):
        if int(at.get(name, -1)) < -1:
            cx.fail(f"{name} must be -1 (unbounded) or >= 0, got {at[name]}")


def _heads(cx, q, k, v, at):
    """Q, K, V as 4-D (batch, heads, seq, head size), checked against one another."""
    if not q.ndim == k.ndim == v.ndim:
        cx.fail(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} differ in rank")
    if q.ndim == 3:
        if "q_num_heads" not in at or "kv_num_heads" not in at:
            cx.fail("3-D inputs need the q_num_heads and kv_num_heads attributes")
        hq, hkv = int(at["q_num_heads"]), int(at["kv_num_heads"])
        q, k, v = (_split_heads(cx, x, h, name)
                   for x, h, name in ((q, hq, "Q"), (k, hkv, "K"), (v, hkv, "V")))
    hq, hkv = q.shape[1], k.shape[1]
    if q.shape[3] != k.shape[3] or v.shape[1] != hkv or v.shape[2] != k.shape[2]:
        cx.fail(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} (as heads) do not "
                "agree: Q and K need one head size, K and V one head count and length")
    if hkv == 0 or hq % hkv:
        cx.fail(f"{hq} query heads are not a multiple of {hkv} key/value heads")
    if not q.shape[0] == k.shape[0] == v.shape[0]:
        cx.fail(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} differ in batch")
    return q, k, v


def _split_heads(cx, x, heads: int, name: str):
    b, s, hidden = x.shape
    if heads <= 0 or hidden % heads:
        cx.fail(f"{name} {list(x.shape)}: hidden size {hidden} is not a multiple of {heads} "
                "heads")
    return F.transpose(F.reshape(x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _concat_past(cx, past, x, name: str):
    if past.ndim != 4 or past.shape[:2] != x.shape[:2] or past.shape[3] != x.shape[3]:
        cx.fail(f"{name} {list(past.shape)} does not match the heads {list(x.shape)} it "
                "extends (batch, heads, past length, head size)")
    return F.concat([past, x], axis=2)


def _bias(cx, mask, nonpad, at, q4, total: int, past: int):
    """One additive bias (None, an array or a Var) for every mask the node asks for."""
    b, s = q4.shape[0], q4.shape[2]
    causal = bool(int(at.get("is_causal", 0)))
    left, right = int(at.get("left_window_size", -1)), int(at.get("right_window_size", -1))
    if mask is None and nonpad is None and not causal and left < 0 and right < 0:
        return None
    if not all(isinstance(n, (int, np.integer)) for n in (s, total)):
        cx.fail(f"query length {s} and key length {total}: the masks are built at import and "
                "need numbers there (give them with input_shapes=)")
    parts = [] if mask is None else [_mask_bias(cx, mask, total, q4.dtype)]
    lens = None if nonpad is None else _nonpad(cx, nonpad, b)
    pos, cols = _positions(s, past, lens, b), np.arange(total).reshape(1, total)
    if causal:
        parts.append(_allowed(_le(cols, pos)))  # key j <= the query's position
    if left >= 0:
        parts.append(_allowed(_le(_add(pos, -left), cols)))
    if right >= 0:
        parts.append(_allowed(_le(cols, _add(pos, right))))
    if lens is not None:
        parts.append(_allowed(_le(cols, _add(_reshape(lens, (b, 1, 1, 1)), -1))))
    return _sum(parts, q4.dtype)


def _positions(s: int, past: int, lens, b: int):
    """Each query's position among the keys: after the ``past`` keys, or (``nonpad_kv_seqlen``
    given) the last ``s`` of each batch's valid keys; (s, 1) or (b, 1, s, 1)."""
    rows = np.arange(s, dtype=np.int64)
    if lens is None:
        return rows.reshape(s, 1) + past
    return _add(_reshape(_add(lens, -s), (b, 1, 1, 1)), rows.reshape(1, 1, s, 1))


def _le(a, b):
    both = isinstance(a, np.ndarray) and isinstance(b, np.ndarray)
    return a <= b if both else F.less_equal(a, b)


def _add(a, b):
    both = isinstance(a, np.ndarray) and isinstance(b, (np.ndarray, int))
    return a + b if both else F.add(a, np.asarray(b, np.int64))


def _reshape(x, shape):
    return x.reshape(shape) if isinstance(x, np.ndarray) else F.reshape(x, shape)


def _allowed(keep):
    """0 where attended, -inf where not (a select: 0 * -inf would be NaN)."""
    if isinstance(keep, np.ndarray):
        return np.where(keep, np.float32(0), _NEG_INF)
    if isinstance(keep, Var):
        return F.where(keep, np.float32(0), _NEG_INF)
    return keep


def _sum(parts: list, dtype):
    """The parts added, arrays folded at import; None when there is none."""
    arrays = [p for p in parts if isinstance(p, np.ndarray)]
    vars_ = [p for p in parts if not isinstance(p, np.ndarray)]
    total = None
    for a in arrays:
        total = a.astype(dtype) if total is None else total + a.astype(dtype)
    for v in vars_:
        v = v if v.dtype == dtype else F.astype(v, dtype)  # float32 masks over half scores
        total = v if total is None else F.add(v, total)
    return total


def _mask_bias(cx, mask, total: int, dtype):
    """``attn_mask`` as an additive bias of length ``total`` on its last axis."""
    shape = shape_of(mask)
    if not shape or shape[-1] > total:
        cx.fail(f"attn_mask {list(shape)}: its last axis must be at most the total key length "
                f"{total}")
    if mask.dtype == np.bool_:
        mask = np.where(mask, np.float32(0), _NEG_INF).astype(dtype) if isinstance(
            mask, np.ndarray) else F.where(mask, np.float32(0), _NEG_INF)
    elif mask.dtype != dtype:
        cx.fail(f"attn_mask of dtype {mask.dtype}: it must be bool or Q's dtype {dtype}")
    if shape[-1] < total:
        widths = [(0, 0)] * (len(shape) - 1) + [(0, total - shape[-1])]
        mask = np.pad(mask, widths, constant_values=-np.inf) if isinstance(mask, np.ndarray) \
            else F.pad(cx.var(mask), widths, constant_value=-np.inf)
    return mask


def _nonpad(cx, lens, batch: int):
    shape = shape_of(lens)
    if tuple(shape) != (batch,) or lens.dtype.kind not in "iu":
        cx.fail(f"nonpad_kv_seqlen {list(shape)} {lens.dtype}: it must be integers of shape "
                f"(batch,) = ({batch},)")
    if isinstance(lens, np.ndarray):
        return lens.astype(np.int64)
    lens = cx.var(lens)
    return lens if lens.dtype == np.int64 else F.astype(lens, np.int64)


def _flex_attention(cx, ins, at):
    """FlexAttention (ai.onnx.preview, 1): attention over 4-D heads whose scores and
    probabilities pass through the node's ``score_mod`` and ``prob_mod`` subgraphs, converted
    inline; no mask of its own (a ``score_mod`` writes -inf)."""
    q, k, v = (cx.var(x) for x in ins[:3])
    if not q.ndim == k.ndim == v.ndim == 4:
        cx.fail(f"Q {list(q.shape)}, K {list(k.shape)} and V {list(v.shape)} must be 4-D "
                "(batch, heads, seq, head size)")
    q, k, v = _heads(cx, q, k, v, {})
    scale = at.get("scale")
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    scores, v = _scores(q, k, v, np.sqrt(np.float32(scale)))
    precision = at.get("softmax_precision")
    wide = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    wide = wide if precision is None else dtype_of(precision, cx.where())
    scores = F.astype(scores, wide) if scores.dtype != wide else scores
    if "score_mod" in at:
        scores = _modified(cx, at["score_mod"], scores, "score_mod")
    probs = F.softmax(scores, axis=-1)
    if "prob_mod" in at:
        probs = _modified(cx, at["prob_mod"], probs, "prob_mod")
    probs = F.astype(probs, v.dtype) if probs.dtype != v.dtype else probs
    return [F.matmul(probs, v)]


def _modified(cx, body, x, what: str):
    """``x`` through a one-in, one-out modifier subgraph, which must keep its shape and type."""
    if len(body.input) != 1 or len(body.output) != 1:
        cx.fail(f"{what} must take 1 input and give 1 output, not {len(body.input)} and "
                f"{len(body.output)}")
    (out,) = cx.inline(body, [x])
    out = cx.var(out)
    if out.shape != x.shape or out.dtype != x.dtype:
        cx.fail(f"{what} gave {out.dtype}{list(out.shape)} for {x.dtype}{list(x.shape)}: it "
                "must keep the shape and element type")
    return out


# ONNX op -> converter
CONVERTERS = {"Attention": _attention, "FlexAttention": _flex_attention}
