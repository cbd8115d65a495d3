"""What observers, fake quantizers and QAT modules share (MegEngine's
``megengine.quantization.utils``): ``QuantMode``, ``QParams`` (a mode, a dtype and the scale and
zero point as tensors, so a graph computes them), ``create_qparams``, ``fake_quant_tensor`` and
``fake_quant_bias``.

>>> qp = create_qparams(QuantMode.SYMMERTIC, "qint8", scale=mg.tensor(0.05))
>>> y = fake_quant_tensor(x, qp)
"""
from __future__ import annotations

import abc
from enum import Enum

import numpy as np

from ..dtype import QuantDtypeMeta, _builtin_quant_dtypes, create_quantized_dtype
from ..ir.errors import GraphError
from ..nn.module import Module
from ..ops.builder import graph_of
from ..ops.fake_quant import fake_quant

__all__ = ["LSQParams", "QParams", "QParamsModuleMixin", "QuantMode", "create_qparams",
           "fake_quant_bias", "fake_quant_tensor", "quant_dtype_meta"]


class QuantMode(Enum):
    """Symmetric (zero point 0) or asymmetric quantization; MegEngine's spelling, with the
    correct one as an alias."""

    SYMMERTIC = 1
    ASYMMERTIC = 2
    SYMMETRIC = 1  # noqa: PIE796  (an alias: the same member)
    ASYMMETRIC = 2  # noqa: PIE796


def quant_dtype_meta(dtype) -> QuantDtypeMeta:
    """The ``QuantDtypeMeta`` a name ("qint8", "quint8", "qint8_narrow", ...) or meta gives."""
    if isinstance(dtype, QuantDtypeMeta):
        return dtype
    if dtype not in _builtin_quant_dtypes:
        raise ValueError(f"unknown dtype: {dtype}, only support {sorted(_builtin_quant_dtypes)}")
    return _builtin_quant_dtypes[dtype]


class QParams:
    """A quantization's mode, dtype meta, scale and zero point (tensors or graph values; the
    zero point None when symmetric)."""

    __slots__ = ("dtype_meta", "mode", "scale", "zero_point")

    def __init__(self, mode, dtype_meta, scale, zero_point):
        self.mode, self.dtype_meta = mode, dtype_meta
        self.scale, self.zero_point = scale, zero_point

    def update(self, qparams: QParams) -> None:
        for key in self.__slots__:
            setattr(self, key, getattr(qparams, key))

    def __eq__(self, other):
        """Equal modes, dtypes and values (tensors compared by value)."""
        return type(self) is type(other) and all(
            _same(getattr(self, k), getattr(other, k)) for k in self.__slots__)

    def __repr__(self):
        return "QParams(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


def _same(a, b) -> bool:
    if a is None or b is None or isinstance(a, (Enum, QuantDtypeMeta)):
        return a is b or a == b
    return np.array_equal(np.asarray(a), np.asarray(b))


class LSQParams(QParams):
    """LSQ's parameters: a ``grad_scale`` beside the others."""

    __slots__ = ("dtype_meta", "grad_scale", "mode", "scale", "zero_point")

    def __init__(self, mode, dtype_meta, scale, zero_point, grad_scale):
        super().__init__(mode, dtype_meta, scale, zero_point)
        self.grad_scale = grad_scale


def create_qparams(mode: QuantMode = QuantMode.SYMMERTIC, dtype_meta=None, scale=None,
                   zero_point=None) -> QParams:
    """``QParams`` of ``mode`` and ``dtype_meta`` (a name or a meta)."""
    if isinstance(dtype_meta, str):
        dtype_meta = quant_dtype_meta(dtype_meta)
    if mode is not None and not isinstance(mode, QuantMode):
        raise GraphError(f"create_qparams: mode must be a QuantMode, got {mode!r}")
    return QParams(mode, dtype_meta, scale, zero_point)


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


def fake_quant_tensor(inp, qparams: QParams, lsq_grad_scale=None):
    """``inp`` fake-quantized with ``qparams`` (a symmetric mode's zero point is 0).

    >>> y = fake_quant_tensor(x, observer.get_qparams())
    """
    g = graph_of(inp, qparams.scale)
    inp, scale = g.lift(inp), g.lift(qparams.scale)
    meta = qparams.dtype_meta
    return fake_quant(inp, scale, g.lift(_zero_point(qparams, inp)), meta.qmin, meta.qmax,
                      lsq_grad_scale=lsq_grad_scale)


def fake_quant_bias(bias, inp_qparams: QParams | None, w_qparams: QParams | None):
    """``bias`` fake-quantized to qint32 with scale input scale x weight scale, as the int8
    layers store it; unchanged unless both are symmetric qint8 (MegEngine's rule).

    Design: MegEngine reads the parameters off its tensors (``inp.qparams``); mgegraph's values
    carry none, so they are passed."""
    if bias is None or inp_qparams is None or w_qparams is None:
        return bias
    if inp_qparams.scale is None or w_qparams.scale is None:
        return bias
    if inp_qparams.mode != QuantMode.SYMMERTIC or w_qparams.mode != QuantMode.SYMMERTIC:
        return bias
    if "int8" != inp_qparams.dtype_meta.np_dtype_str or \
            w_qparams.dtype_meta.np_dtype_str != "int8":
        return bias
    g = graph_of(bias, inp_qparams.scale, w_qparams.scale)
    scale = g.lift(inp_qparams.scale) * g.lift(w_qparams.scale)
    return fake_quant_tensor(bias, create_qparams(w_qparams.mode, "qint32", scale=scale))
