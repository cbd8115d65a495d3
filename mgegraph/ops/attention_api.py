"""The public attention functions, made of the ``attention`` op (ops/attention.py):
PyTorch's ``scaled_dot_product_attention`` and MegEngine's ``multi_head_attention``, re-exported
by ``mgegraph.functional`` and ``functional.nn``; registers no op.

>>> out = F.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from ..ir.errors import OpError, user_location
from ..ir.graph import Var
from ..ir.types import HALF_DTYPES, is_float
from . import elementwise as ew
from . import movement_api as movement
from . import reduce
from .attention import BOOL
from .builder import apply_multi, cast_to, graph_of
from .matmul import matmul
from .nn import dropout, softmax
from .registry import named

__all__ = ["multi_head_attention", "scaled_dot_product_attention"]


# -- scaled dot-product attention ------------------------------------------------------------
def _refuse(values, reason: str):
    raise OpError("scaled_dot_product_attention", tuple(v.type for v in values), reason,
                  user_location())


def _as_4d(x: Var, what: str, values) -> Var:
    """``x`` (..., H, L, E) as (prod(...), H, L, E)."""
    if x.ndim < 2:
        _refuse(values, f"{what} must be at least 2-D (..., L, E), got {tuple(x.shape)}")
    shape = (1,) * max(0, 4 - x.ndim) + tuple(x.shape)
    lead = shape[:-3]
    if named(*lead[1:]):
        _refuse(values, f"{what} {tuple(x.shape)}: only the first batch dim may be named")
    batch = lead[0] if len(lead) == 1 else math.prod(lead)
    return movement.reshape(x, (batch, *shape[-3:]))


def _mask_4d(mask: Var, lead: tuple, full: tuple, values) -> Var:
    """The mask broadcastable to (..., Hq, Lq, Lk) as a 4-D mask the op reads: its batch dims
    made one, broadcast over them only where they are neither all 1 nor all full."""
    ndim = len(lead) + 2
    if mask.ndim > ndim:
        _refuse(values, f"attn_mask {tuple(mask.shape)} has more dims than the scores")
    shape = (1,) * (ndim - mask.ndim) + tuple(mask.shape)
    batch, want = shape[:-3], tuple(lead[:-1])
    for m, f in zip(shape, (*lead, *full)):
        if m != 1 and m != f and not named(m, f):
            _refuse(values, f"attn_mask {tuple(mask.shape)} does not broadcast to the scores "
                    f"{(*lead, *full)}")
    mask = movement.reshape(mask, shape)
    if batch and any(m == 1 for m in batch) and any(m != 1 for m in batch):
        mask = movement.broadcast_to(mask, (*want, *shape[-3:]))
        batch = want
    nb = 1 if all(m == 1 for m in batch) else math.prod(want)
    return movement.reshape(mask, (nb, *shape[-3:]))


def _default_scale(e) -> float:
    return 1.0 / math.sqrt(e)


# each call draws a different dropout mask, as PyTorch's global generator gives; a compiled
# plan keeps the mask its graph was built with (nn.MultiHeadAttention passes a step counter)
_SEEDS = itertools.count(1)


def _weights(q, k, mask, is_causal: bool, scale: float):
    """softmax(q k^T scale + mask) of 4-D q and k with as many heads: the weights built whole."""
    s = ew.mul(matmul(q, k, transpose_b=True), q.graph.const(np.asarray(scale, q.dtype)))
    ninf = q.graph.const(np.asarray(-np.inf, q.dtype))
    if is_causal:
        s = ew.where(q.graph.const(np.tril(np.ones((q.shape[2], k.shape[2]), bool))), s, ninf)
    if mask is not None:
        s = ew.where(mask, s, ninf) if mask.dtype == BOOL else ew.add(s, mask)
    # rows with no key attended (their maximum -inf): 0, as the kernel gives, not softmax's NaN
    dead = ew.equal(reduce.max(s, -1, keepdims=True), ninf)
    return ew.where(dead, q.graph.const(np.asarray(0, q.dtype)), softmax(s, axis=-1))


def _attend(q, k, v, mask, is_causal: bool, scale: float, dropout_p: float = 0.0, step=None,
            need_weights: bool = False):
    """(out, the weights or None) of 4-D q, k, v and mask: the tiled op, or, for dropout or
    when the weights are wanted, the composition that builds them."""
    if dropout_p == 0 and not need_weights:
        inputs = (q, k, v) + ((mask,) if mask is not None else ())
        return apply_multi("attention", inputs, scale=scale, is_causal=is_causal)[0], None
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = movement.repeat(k, groups, axis=1), movement.repeat(v, groups, axis=1)
    p = _weights(q, k, mask, is_causal, scale)
    if dropout_p > 0:
        p = dropout(p, dropout_p, training=True, seed=next(_SEEDS), step=step)
    return matmul(p, v), p


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """``softmax(query @ key^T * scale + attn_mask) @ value``, PyTorch's function: query
    (..., Hq, Lq, E), key (..., Hkv, Lk, E), value (..., Hkv, Lk, Ev); ``attn_mask`` bool (True
    attends) or float (added), broadcastable to (..., Hq, Lq, Lk); ``is_causal`` masks key j >
    query i (top-left); ``scale`` defaults to 1/sqrt(E); ``enable_gqa`` lets Hq be a multiple
    of Hkv. A row with no key attended gives 0 (PyTorch: NaN). Computed in tiles, no (Lq, Lk)
    matrix (the ``attention`` op) unless ``dropout_p > 0``: dropout (always applied, as in
    PyTorch, whose callers pass 0 when not training) needs the weights, so that case is a
    composition of matmul, softmax and dropout.

    >>> out = F.nn.scaled_dot_product_attention(q, k, v, is_causal=True)
    """
    g = graph_of(query, key, value, attn_mask)
    q, k, v = (g.lift(t) for t in (query, key, value))
    values = (q, k, v) + ((g.lift(attn_mask),) if attn_mask is not None else ())
    if not all(is_float(t.dtype) for t in (q, k, v)):
        _refuse(values, "query, key and value must be floating-point")
    if not 0.0 <= float(dropout_p) < 1.0:
        _refuse(values, f"dropout_p must be in [0, 1), got {dropout_p}")
    if q.ndim != k.ndim or k.ndim != v.ndim:
        _refuse(values, "query, key and value must have the same number of dims")
    if tuple(q.shape[:-3]) != tuple(k.shape[:-3]) or tuple(k.shape[:-2]) != tuple(v.shape[:-2]):
        _refuse(values, "query, key and value must share their batch dims, and key and value "
                "their heads and length")
    hq, hkv = (q.shape[-3], k.shape[-3]) if q.ndim >= 3 else (1, 1)
    if hq != hkv and not (enable_gqa and hkv and hq % hkv == 0):
        _refuse(values, f"query has {hq} heads and key/value {hkv}: they must be equal, or "
                "with enable_gqa=True a multiple")
    out_dtype = q.dtype
    if out_dtype in HALF_DTYPES:
        q, k, v = (cast_to(t, np.float32) for t in (q, k, v))
    lead = tuple(q.shape[:-2])
    q4, k4, v4 = (_as_4d(t, what, values) for t, what in ((q, "query"), (k, "key"),
                                                          (v, "value")))
    mask = None
    if attn_mask is not None:
        mask = values[3]
        if mask.dtype != BOOL and not is_float(mask.dtype):
            _refuse(values, f"attn_mask must be bool (True attends) or floating-point (added), "
                    f"got {mask.dtype}")
        if mask.dtype != BOOL and mask.dtype != q.dtype:
            mask = cast_to(mask, q.dtype)
        mask = _mask_4d(mask, lead if len(lead) else (1,), (q.shape[-2], k.shape[-2]), values)
    scale = _default_scale(q.shape[-1]) if scale is None else float(scale)
    out, _ = _attend(q4, k4, v4, mask, bool(is_causal), scale, float(dropout_p))
    out = movement.reshape(out, (*q.shape[:-1], v.shape[-1]))
    return out if out.dtype == out_dtype else cast_to(out, out_dtype)


# -- MegEngine's multi-head attention --------------------------------------------------------
def _mha_refuse(values, reason: str):
    raise OpError("multi_head_attention", tuple(v.type for v in values if v is not None), reason,
                  user_location())


def _projections(w: Var, sizes, biases, values):
    """The weights (in, out) and biases that ``io_weight_bias`` holds, in MegEngine's order:
    the query's, key's, value's and output's weights, then their biases (None where absent)."""
    flat = movement.reshape(w, (w.size,))
    want = sum(i * o for i, o in sizes) + sum(o for (_, o), b in zip(sizes, biases) if b)
    if w.size != want:
        _mha_refuse(values, f"io_weight_bias has {w.size} values; the projections "
                    f"{[s for s in sizes if s[1]]} and biases {biases} need {want}")
    at, weights, bias = 0, [], []
    for i, o in sizes:
        weights.append(movement.reshape(flat[at:at + i * o], (i, o)) if o else None)
        at += i * o
    for (_, o), b in zip(sizes, biases):
        bias.append(flat[at:at + o] if b and o else None)
        at += o if b and o else 0
    return weights, bias


def _project(x, w, b):
    if w is None:
        return x
    y = matmul(x, w)
    return y if b is None else ew.add(y, b)


def _attends(mask: Var, dtype) -> Var:
    """A MegEngine/PyTorch MHA mask (bool True where not attended, or float added) as one the
    attention op reads: bool True where attended, or float added."""
    if mask.dtype == BOOL:
        return ew.equal(mask, mask.graph.const(np.asarray(False)))
    return mask if mask.dtype == dtype else cast_to(mask, dtype)


def _combined(a: Var, b: Var, dtype) -> Var:
    """Two attends-masks as one: both bool, attended where both attend; else added, a bool
    one as 0 / -inf (a float mask has a gradient, a bool one none: keep bool where possible)."""
    if a.dtype == BOOL and b.dtype == BOOL:  # a product of 0/1 (ONNX's Where takes no bools)
        both = ew.mul(cast_to(a, np.float32), cast_to(b, np.float32))
        return ew.equal(both, a.graph.const(np.asarray(1, np.float32)))
    added = [m if m.dtype != BOOL else ew.where(m, m.graph.const(np.asarray(0, dtype)),
                                                m.graph.const(np.asarray(-np.inf, dtype)))
             for m in (a, b)]
    return ew.add(*added)


def _merged_mask(key_padding_mask, attn_mask, n, heads, lq, lk, dtype, values):
    """The two masks as one (n | 1, heads | 1, lq | 1, lk) mask the op reads, or None."""
    merged = None
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (n, lk):
            _mha_refuse(values, f"key_padding_mask must be (batch, S) = {(n, lk)}, got "
                        f"{tuple(key_padding_mask.shape)}")
        merged = movement.reshape(_attends(key_padding_mask, dtype), (n, 1, 1, lk))
    if attn_mask is not None:
        if tuple(attn_mask.shape) == (lq, lk):
            am = movement.reshape(_attends(attn_mask, dtype), (1, 1, lq, lk))
        elif tuple(attn_mask.shape) == (n * heads, lq, lk):
            am = movement.reshape(_attends(attn_mask, dtype), (n, heads, lq, lk))
        else:
            _mha_refuse(values, f"attn_mask must be (L, S) = {(lq, lk)} or (batch * num_heads, "
                        f"L, S) = {(n * heads, lq, lk)}, got {tuple(attn_mask.shape)}")
        merged = am if merged is None else _combined(merged, am, dtype)
    return merged


def _extend_keys(k, v, bias_k, bias_v, add_zero_attn: bool, masks):
    """PyTorch's and MegEngine's key/value extensions: a learnt bias row (bias_k, bias_v), then
    a row of zeros, appended along the sequence; each mask attends to them (a 0 column)."""
    n = k.shape[0]
    rows = []
    if bias_k is not None:
        rows.append((movement.broadcast_to(movement.reshape(bias_k, (1, 1, k.shape[2])),
                                           (n, 1, k.shape[2])),
                     movement.broadcast_to(movement.reshape(bias_v, (1, 1, v.shape[2])),
                                           (n, 1, v.shape[2]))))
    if add_zero_attn:
        rows.append((movement.zeros((n, 1, k.shape[2]), k.dtype, graph=k.graph),
                     movement.zeros((n, 1, v.shape[2]), v.dtype, graph=v.graph)))
    for rk, rv in rows:
        k, v = movement.concat([k, rk], axis=1), movement.concat([v, rv], axis=1)
        masks = [None if m is None else movement.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, 1)],
                                                     constant_value=0 if m.dtype != BOOL
                                                     else False)
                 for m in masks]
    return k, v, masks


def _heads(x, heads: int):
    """(N, L, heads * d) -> (N, heads, L, d)."""
    n, length, width = x.shape
    return movement.transpose(movement.reshape(x, (n, length, heads, width // heads)),
                              (0, 2, 1, 3))


def multi_head_attention(query, key, value, embed_dim, num_heads, attn_drop, out_drop,
                         io_weight_bias, qproj_size=None, kproj_size=None, vproj_size=None,
                         oproj_size=None, qbias=False, kbias=False, vbias=False, obias=False,
                         bias_k=None, bias_v=None, add_zero_attn=False, key_padding_mask=None,
                         attn_mask=None, need_weights=False, average_attn_weights=False,
                         is_causal=False, maybe_cudnn_style_mask=False, reslink=False,
                         training=True, step=None):
    """MegEngine's ``functional.nn.multi_head_attention``: query (N, L, E), key (N, S, kdim),
    value (N, S, vdim) (or unbatched, without N), projected by ``io_weight_bias``, one array
    of the query's, key's, value's and output's weights (``Y = X @ W + B``, W as (in, out);
    a projection of size 0 is none), then their biases where ``qbias`` etc. say; attention
    over ``num_heads`` heads scaled by head_dim ** -0.5; returns ``(out (N, L, oproj),
    weights or None)``. Masks are PyTorch MHA's: ``key_padding_mask`` (N, S) and
    ``attn_mask`` (L, S) or (N * num_heads, L, S), bool True where not attended, or float
    added; ``is_causal`` without ``attn_mask`` masks key j > query i (a given ``attn_mask``
    is taken as the causal mask, MegEngine's hint). ``need_weights`` returns the weights,
    (N * num_heads, L, S), or (N, L, S) averaged over the heads with
    ``average_attn_weights``, which then are built whole; so is dropout on them (``attn_drop``
    when ``training``). ``bias_k``/``bias_v`` append a learnt key/value row and
    ``add_zero_attn`` a zero row (PyTorch's); ``reslink`` adds the query to the output.
    MegEngine's cuDNN-style masks (``maybe_cudnn_style_mask``) are refused.

    >>> out, _ = F.nn.multi_head_attention(x, x, x, 64, 8, 0.0, 0.0, w)
    """
    g = graph_of(query, key, value, io_weight_bias, key_padding_mask, attn_mask, bias_k, bias_v)
    q, k, v, w = (g.lift(t) for t in (query, key, value, io_weight_bias))
    kpm, am = (None if m is None else g.lift(m) for m in (key_padding_mask, attn_mask))
    bk, bv = (None if b is None else g.lift(b) for b in (bias_k, bias_v))
    values = (q, k, v, w, kpm, am)
    if maybe_cudnn_style_mask:
        _mha_refuse(values, "cuDNN-style masks (maybe_cudnn_style_mask=True) are not "
                    "supported: pass key_padding_mask and attn_mask as masks")
    if (bk is None) != (bv is None):
        _mha_refuse(values, "bias_k and bias_v come together")
    if not all(is_float(t.dtype) for t in (q, k, v, w)):
        _mha_refuse(values, "query, key, value and io_weight_bias must be floating-point")
    batched = q.ndim == 3
    if q.ndim not in (2, 3) or k.ndim != q.ndim or v.ndim != q.ndim:
        _mha_refuse(values, "query, key and value must all be (N, L, E) or all unbatched "
                    "(L, E)")
    if not batched:
        q, k, v = (movement.expand_dims(t, 0) for t in (q, k, v))
        kpm = None if kpm is None else movement.expand_dims(kpm, 0)
    if k.shape[:2] != v.shape[:2] or q.shape[0] != k.shape[0]:
        _mha_refuse(values, f"key {tuple(k.shape)} and value {tuple(v.shape)} must share the "
                    f"batch and length, and the query {tuple(q.shape)} the batch")
    sizes = [embed_dim if s is None else int(s)
             for s in (qproj_size, kproj_size, vproj_size, oproj_size)]
    dq, dk, dv = (s or t.shape[2] for s, t in zip(sizes, (q, k, v)))
    (wq, wk, wv, wo), (b_q, b_k, b_v, b_o) = _projections(
        w, [(q.shape[2], sizes[0]), (k.shape[2], sizes[1]), (v.shape[2], sizes[2]),
            (dv, sizes[3])], (qbias, kbias, vbias, obias), values)
    if dq != dk or dq % num_heads or dv % num_heads:
        _mha_refuse(values, f"the projected query ({dq}) and key ({dk}) must agree, and they "
                    f"and the value ({dv}) split into {num_heads} heads")
    qp, kp, vp = _project(q, wq, b_q), _project(k, wk, b_k), _project(v, wv, b_v)
    kp, vp, (kpm, am) = _extend_keys(kp, vp, bk, bv, bool(add_zero_attn), [kpm, am])
    n, lq, lk = q.shape[0], q.shape[1], kp.shape[1]
    mask = _merged_mask(kpm, am, n, num_heads, lq, lk, qp.dtype, values)
    head_dim = embed_dim if sizes[0] == 0 else embed_dim // num_heads
    drop = float(attn_drop) if training else 0.0
    out, weights = _attend(_heads(qp, num_heads), _heads(kp, num_heads), _heads(vp, num_heads),
                           mask, bool(is_causal) and am is None, head_dim ** -0.5, drop, step,
                           bool(need_weights))
    out = movement.reshape(movement.transpose(out, (0, 2, 1, 3)), (n, lq, dv))
    out = _project(out, wo, b_o)
    if training and out_drop:
        out = dropout(out, float(out_drop), training=True, seed=next(_SEEDS), step=step)
    if reslink:
        out = ew.add(out, q)
    if not batched:
        out = movement.squeeze(out, 0)
    if not need_weights:
        return out, None
    if average_attn_weights:
        weights = reduce.mean(weights, axis=1)
        return out, (weights if batched else movement.squeeze(weights, 0))
    # (N * num_heads, L, S): unbatched, (num_heads, L, S)
    return out, movement.reshape(weights, (n * num_heads, lq, lk))
