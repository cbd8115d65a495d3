"""Converters of the ops of sequence models, onto ops/sequence.py's functions:
RMSNormalization and RotaryEmbedding (opset 23), SwiGLU (opset 28); their table is
``CONVERTERS``, merged with the other families' in ``converters``.

Design: the exporter writes opsets 13 to 21, before these ops: rotary_embedding and swiglu are
compositions, written as the ONNX ops they are made of (Slice, Mul, Concat...), and the
rms_norm op's writer spells RMSNormalization's definition (ReduceMean, Sqrt, Div, Mul).
"""
from __future__ import annotations

import numpy as np
import onnx

from .. import functional as F
from ..ops.sequence import swish
from .context import shape_of


def _rms_norm(cx, ins, at):
    x, scale = cx.var(ins[0]), cx.var(ins[1])
    axis = cx.axis(at.get("axis", -1), x.ndim)
    stash = at.get("stash_type", onnx.TensorProto.FLOAT)
    if stash != onnx.TensorProto.FLOAT:
        cx.fail(f"stash_type {stash}: only 1 (float32 statistics) is supported")
    shape = tuple(shape_of(x)[axis:])
    eps = float(at.get("epsilon", 1e-5))
    if tuple(shape_of(scale)) == shape:
        return [F.rms_norm(x, shape, weight=scale, eps=eps)]
    try:
        np.broadcast_shapes(shape_of(scale), shape)
    except ValueError:
        cx.fail(f"scale of shape {list(shape_of(scale))} does not broadcast to the normalized "
                f"shape {list(shape)}")
    return [F.mul(F.rms_norm(x, shape, eps=eps), scale)]


def _rotary_embedding(cx, ins, at):
    x, cos, sin = (cx.var(v) for v in ins[:3])
    ids = cx.var(ins[3]) if len(ins) > 3 and ins[3] is not None else None
    return [F.rotary_embedding(x, cos, sin, ids, interleaved=bool(at.get("interleaved", 0)),
                               rotary_dim=int(at.get("rotary_embedding_dim", 0)),
                               num_heads=int(at.get("num_heads", 0)))]


def _swiglu(cx, ins, at):
    gate, value = cx.var(ins[0]), cx.var(ins[1])
    if gate.shape != value.shape:
        cx.fail(f"A {list(gate.shape)} and B {list(value.shape)} must have one shape (SwiGLU "
                "does not broadcast)")
    return [F.mul(swish(gate, float(at.get("alpha", 1.0))), value)]


# ONNX op -> converter
CONVERTERS = {
    "RMSNormalization": _rms_norm, "RotaryEmbedding": _rotary_embedding, "SwiGLU": _swiglu,
}
