"""What observers, fake quantizers and QAT modules share (MegEngine's
``megengine.quantization.utils``): ``QuantMode``, ``QParams`` (a mode, a dtype and the scale and
zero point as tensors, so a graph computes them; defined in ``mgegraph.dtype``, below the eager
tensors that carry them), ``create_qparams``, ``fake_quant_tensor``, and ``qparams_of`` and
``fake_quant_bias`` (defined beside the QAT modules that use them, ``module.qat.qparams``).

>>> qp = create_qparams(QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.05))
>>> y = fake_quant_tensor(x, qp)
"""
from __future__ import annotations

import abc

import numpy as np

from ..dtype import (
    LSQParams,
    QParams,
    QuantMode,
    create_qparams,
    create_quantized_dtype,
    quant_dtype_meta,
)
from ..ir.errors import GraphError
from ..module.qat.qparams import fake_quant_bias, qparams_of
from ..nn.module import Module
from ..ops.builder import graph_of
from ..ops.fake_quant import fake_quant

__all__ = ["LSQParams", "QParams", "QParamsModuleMixin", "QuantMode", "create_qparams",
           "fake_quant_bias", "fake_quant_tensor", "qparams_of", "quant_dtype_meta"]


class QuantizerSwitch(Module):
    """What observers and fake quantizers share: the quantized dtype whose range (``qmin``,
    ``qmax``) they work to, and a switch (``enable``, ``disable``)."""

    def __init__(self, dtype="qint8", enable: bool = True, **kwargs):
        super().__init__()
        kwargs.pop("narrow_range", None)  # MegEngine ignores it too
        if kwargs:
            raise GraphError(f"{type(self).__name__}: unknown arguments {sorted(kwargs)}")
        self.dtype = quant_dtype_meta(dtype)
        self.qmin, self.qmax = self.dtype.qmin, self.dtype.qmax
        self.enabled = enable

    def enable(self):
        self.enabled = True

    def disable(self):
        self.enabled = False


class QParamsModuleMixin(abc.ABC):
    """An observer or fake quantizer that can say its parameters (``get_qparams``) and the
    quantized dtype they make."""

    def get_quantized_dtype(self) -> np.dtype:
        qparams = self.get_qparams()
        zero_point = None if qparams.zero_point is None else int(np.asarray(qparams.zero_point))
        scale = float(np.asarray(qparams.scale))
        if not qparams.dtype_meta.is_unsigned:
            zero_point = None
        return create_quantized_dtype(qparams.dtype_meta, scale, zero_point)

    @abc.abstractmethod
    def get_qparams(self) -> QParams:
        pass


def _zero_point(qparams: QParams, like):
    if qparams.mode == QuantMode.ASYMMERTIC and qparams.zero_point is not None:
        return qparams.zero_point
    return like.graph.const(np.zeros((), like.dtype))


def fake_quant_tensor(inp, qparams: QParams, lsq_grad_scale=None, tqt=False):
    """``inp`` fake-quantized with ``qparams`` (a symmetric mode's zero point is 0).

    >>> y = fake_quant_tensor(x, observer.get_qparams())
    """
    g = graph_of(inp, qparams.scale)
    inp, scale = g.lift(inp), g.lift(qparams.scale)
    meta = qparams.dtype_meta
    return fake_quant(inp, scale, g.lift(_zero_point(qparams, inp)), meta.qmin, meta.qmax,
                      lsq_grad_scale=lsq_grad_scale, tqt=tqt)
