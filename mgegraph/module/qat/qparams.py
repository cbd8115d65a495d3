"""A value's quantization parameters as the QAT modules read them (``qparams_of``), and the
bias's fake quantization (``fake_quant_bias``, MegEngine's ``quantization.utils`` function,
re-exported there).

Design: MegEngine reads the parameters off its tensors (``inp.qparams``), set by the QAT
module or fake quantizer that made them. An eager tensor here carries them the same way; a
graph's values carry none, so in a graph they are read from the fake quantizer that made the
value, which holds the same scale and zero point. Both ways give the parameters only of a value
a fake quantizer made (a pooling's output has none, as in MegEngine).
"""
from __future__ import annotations

import numpy as np

from ...dtype import QParams, QuantMode, _builtin_quant_dtypes, create_qparams, quant_dtype_meta
from ...ops.builder import graph_of
from ...ops.fake_quant import fake_quant

__all__ = ["fake_quant_bias", "qparams_of"]


def _from_fake_quant(var) -> QParams | None:
    """The parameters of the per-tensor fake quantizer that made graph value ``var``: its scale
    and zero point (symmetric where that is the constant 0), the dtype its range is."""
    node = var.node
    if node is None or node.op.name != "fake_quant" or node.attr["axis"] is not None:
        return None
    qrange = (node.attr["qmin"], node.attr["qmax"])
    meta = next((m for m in _builtin_quant_dtypes.values() if (m.qmin, m.qmax) == qrange), None)
    _, scale, zero_point = node.inputs
    zero = zero_point.node.op.name == "const" and zero_point.node.attr.get("value") == 0
    mode = QuantMode.SYMMERTIC if zero else QuantMode.ASYMMERTIC
    return create_qparams(mode, meta, scale, None if zero else zero_point)


def qparams_of(value) -> QParams | None:
    """The quantization parameters ``value`` carries, None where it carries none: an eager
    tensor's ``qparams`` (set by the QAT module or fake quantizer that made it); in a graph,
    whose values carry none, those of the fake quantizer that made it (the same ones).

    >>> qparams_of(qat_conv(x)).scale
    """
    if isinstance(value, QParams):
        return value
    if hasattr(value, "qparams"):
        return value.qparams if value.qparams.scale is not None else None
    return _from_fake_quant(value) if hasattr(value, "node") else None


def _symmetric_int8(qparams: QParams | None) -> bool:
    return (qparams is not None and qparams.scale is not None
            and qparams.mode == QuantMode.SYMMERTIC and qparams.dtype_meta is not None
            and qparams.dtype_meta.np_dtype_str == "int8")


def fake_quant_bias(bias, inp, w_qat):
    """``bias`` fake-quantized to qint32 with scale input scale x weight scale, as the int8
    layers store it (per output channel where the weight's scale is); unchanged unless the input
    and the weight (values, whose ``qparams_of`` is read, or QParams) are both symmetric int8:
    MegEngine's rule. The result carries the qint32 parameters.

    >>> b_qat = fake_quant_bias(bias, inp, w_qat)
    """
    inp_qparams, w_qparams = qparams_of(inp), qparams_of(w_qat)
    if bias is None or not (_symmetric_int8(inp_qparams) and _symmetric_int8(w_qparams)):
        return bias
    g = graph_of(bias, inp_qparams.scale, w_qparams.scale)
    bias = g.lift(bias)
    scale = g.lift(inp_qparams.scale) * g.lift(w_qparams.scale)
    per_channel = int(np.prod(scale.shape)) > 1
    meta = quant_dtype_meta("qint32")
    b_qat = fake_quant(bias, scale.reshape((-1,)) if per_channel else scale,
                       g.const(np.zeros((), bias.dtype)), meta.qmin, meta.qmax,
                       axis=0 if per_channel else None)
    if hasattr(b_qat, "qparams"):
        b_qat.qparams.update(create_qparams(w_qparams.mode, meta, scale=scale))
    return b_qat
