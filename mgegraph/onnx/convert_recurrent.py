"""The state-carrying sequence ops of opset 27 as compositions of mgegraph ops:
``LinearAttention`` (its recurrence unrolled over the static sequence length) and
``CausalConvWithState`` (a depthwise conv1d over the past state and the input).

LinearAttention's update rules, per step t over a state S (batch, kv heads, d_k, d_v):
linear ``S += k v^T``; gated ``S = exp(g) S + k v^T``; delta ``S += k (beta (v - S^T k))^T``;
gated_delta the delta rule on ``exp(g) S``; the output ``scale * q^T S`` (each kv head's state
read by its group of query heads). The definition computes in float32 and casts back.

Design: the recurrence is a straight line of T steps of small matmuls (mgegraph plans have no
loops); a decode step (T = 1) is one step, a prefill T of them.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from .context import shape_of

_RULES = {"linear": (False, False), "gated": (True, False), "delta": (False, True),
          "gated_delta": (True, True)}  # rule -> (decays, corrects by delta)


def _linear_attention(cx, ins, at):
    ins = list(ins) + [None] * (6 - len(ins))
    rule = at.get("update_rule", b"gated_delta")
    rule = rule.decode() if isinstance(rule, bytes) else rule
    if rule not in _RULES:
        cx.fail(f"update_rule {rule!r} is not one of {sorted(_RULES)}")
    gated, delta = _RULES[rule]
    for name, given, wanted in (("decay", ins[4], gated), ("beta", ins[5], delta)):
        if (given is not None) != wanted:
            cx.fail(f"update_rule {rule!r} {'needs' if wanted else 'takes no'} {name} input")
    if "q_num_heads" not in at or "kv_num_heads" not in at:
        cx.fail("q_num_heads and kv_num_heads are required")
    hq, hkv = int(at["q_num_heads"]), int(at["kv_num_heads"])
    if hq <= 0 or hkv <= 0 or hq % hkv:
        cx.fail(f"q_num_heads {hq} must be a positive multiple of kv_num_heads {hkv}")
    dtype = cx.var(ins[0]).dtype
    q, k, v = (_heads(cx, _f32(cx, x), h, name)
               for x, h, name in ((ins[0], hq, "query"), (ins[1], hkv, "key"),
                                  (ins[2], hkv, "value")))
    b, _, t, dk = q.shape
    if k.shape[3] != dk or not (q.shape[2] == k.shape[2] == v.shape[2]):
        cx.fail(f"query {list(shape_of(ins[0]))}, key {list(shape_of(ins[1]))} and value "
                f"{list(shape_of(ins[2]))} disagree in length or head size")
    dv = v.shape[3]
    if not isinstance(t, (int, np.integer)):
        cx.fail(f"sequence length {t}: the recurrence is unrolled at import and needs a number "
                "(give it with input_shapes=)")
    decay = None if ins[4] is None else _decay(cx, _f32(cx, ins[4]), hkv, dk)
    beta = None if ins[5] is None else _beta(cx, _f32(cx, ins[5]), hkv)
    state = _past(cx, ins[3], (b, hkv, dk, dv))
    scale = float(at.get("scale", 0.0)) or 1.0 / np.sqrt(dk)
    outs = []
    for i in range(t):
        at_i = lambda x, i=i: F.subscript(x, (slice(None), slice(None), slice(i, i + 1)))
        state = _step(state, at_i(k), at_i(v), at_i(decay) if gated else None,
                      at_i(beta) if delta else None)
        read = F.repeat(state, hq // hkv, axis=1) if hq != hkv else state
        outs.append(F.mul(F.matmul(at_i(q), read), np.float32(scale)))
    y = outs[0] if t == 1 else F.concat(outs, axis=2)
    y = F.reshape(F.transpose(y, (0, 2, 1, 3)), (b, t, hq * dv))
    state_dtype = dtype if ins[3] is None else cx.var(ins[3]).dtype
    return [F.astype(y, dtype), F.astype(state, state_dtype)]


def _step(state, k, v, g, beta):
    """One token: k (B, H, 1, d_k), v (B, H, 1, d_v), g (B, H, 1, 1 or d_k), beta (B, H', 1,
    1); the new state."""
    if g is not None:
        state = F.mul(state, F.exp(F.transpose(g, (0, 1, 3, 2))))
    if beta is not None:
        v = F.mul(beta, F.sub(v, F.matmul(k, state)))
    return F.add(state, F.matmul(k, v, transpose_a=True))


def _f32(cx, x):
    x = cx.var(x)
    return x if x.dtype == np.float32 else F.astype(x, np.float32)


def _heads(cx, x, heads: int, name: str):
    if x.ndim != 3 or x.shape[2] % heads:
        cx.fail(f"{name} {list(x.shape)}: it must be (batch, length, heads * size) with "
                f"{heads} heads")
    b, t, hidden = x.shape
    return F.transpose(F.reshape(x, (b, t, heads, hidden // heads)), (0, 2, 1, 3))


def _decay(cx, g, hkv: int, dk: int):
    if g.ndim != 3 or g.shape[2] not in (hkv, hkv * dk):
        cx.fail(f"decay {list(g.shape)}: it must be (batch, length, kv_num_heads) or (batch, "
                f"length, kv_num_heads * d_k) = (.., .., {hkv}) or (.., .., {hkv * dk})")
    return _heads(cx, g, hkv, "decay")


def _beta(cx, beta, hkv: int):
    if beta.ndim != 3 or beta.shape[2] not in (hkv, 1):
        cx.fail(f"beta {list(beta.shape)}: its last axis must be kv_num_heads ({hkv}) or 1")
    return _heads(cx, beta, beta.shape[2], "beta")


def _past(cx, past, shape: tuple):
    if past is None:
        return F.full(shape, 0.0, "float32", graph=cx.g)
    if tuple(shape_of(past)) != shape:
        cx.fail(f"past_state {list(shape_of(past))} must be (batch, kv_num_heads, d_k, d_v) = "
                f"{list(shape)}")
    return _f32(cx, past)


def _causal_conv_with_state(cx, ins, at):
    ins = list(ins) + [None] * (4 - len(ins))
    x, w = cx.var(ins[0]), cx.var(ins[1])
    act = at.get("activation", b"none")
    act = act.decode() if isinstance(act, bytes) else act
    if act not in ("none", "silu", "swish"):
        cx.fail(f"activation {act!r} is not one of 'none', 'silu', 'swish'")
    if x.ndim != 3 or w.ndim != 3 or w.shape[:2] != (x.shape[1], 1):
        cx.fail(f"input {list(x.shape)} and weight {list(w.shape)}: they must be (batch, "
                "channels, length) and (channels, 1, k)")
    b, c, _ = x.shape
    k = w.shape[2]
    past = ins[3]
    if past is not None and tuple(shape_of(past)) != (b, c, k - 1):
        cx.fail(f"past_state {list(shape_of(past))} must be (batch, channels, k - 1) = "
                f"{[b, c, k - 1]}")
    if k == 1:
        padded = x
    else:
        past = F.full((b, c, k - 1), 0.0, x.dtype, graph=cx.g) if past is None \
            else cx.var(past)
        padded = F.concat([past, x], axis=2)
    bias = None if ins[2] is None else cx.var(ins[2])
    y = F.conv1d(padded, w, bias, groups=c)
    if act != "none":
        y = F.mul(y, F.sigmoid(y))
    length = padded.shape[2]
    present = F.subscript(padded, (slice(None), slice(None), slice(length - (k - 1), length)))
    return [y, present]


# ONNX op -> converter
CONVERTERS = {"LinearAttention": _linear_attention,
              "CausalConvWithState": _causal_conv_with_state}
