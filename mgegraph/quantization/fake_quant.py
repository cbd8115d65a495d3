"""Fake quantizers (MegEngine's ``megengine.quantization.fake_quant``): modules that quantize
and dequantize in floats during quantization-aware training, with the straight-through
gradient (``ops/fake_quant.py``).

``FakeQuantize`` takes its parameters from an observer; ``LSQ`` learns its step size (a
Parameter trained with LSQ's gradient, "Learned Step Size Quantization", Esser et al. 2019);
``TQT`` learns the base-2 logarithm of its scale ("Trained Quantization Thresholds", Jain et
al. 2019).
Disabled, each passes its input through.

>>> fq = FakeQuantize("qint8"); y = fq(x, observer.get_qparams())
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..eager.tensor import Tensor
from ..ir.errors import GraphError
from ..nn.module import Buffer, Parameter
from ..ops.builder import graph_of
from .utils import (
    LSQParams,
    QParamsModuleMixin,
    QuantizerSwitch,
    QuantMode,
    create_qparams,
    fake_quant_tensor,
)

__all__ = ["LSQ", "TQT", "FakeQuantize"]


class _FakeQuantize(QuantizerSwitch):
    def fake_quant_forward(self, inp, qparams=None):
        raise NotImplementedError

    def normal_forward(self, inp, qparams=None):
        return inp

    def forward(self, inp, qparams=None):
        if self.enabled:
            return self.fake_quant_forward(inp, qparams)
        return self.normal_forward(inp, qparams)


class FakeQuantize(_FakeQuantize):
    """Quantize and dequantize with the parameters an observer gives (``qparams``)."""

    def fake_quant_forward(self, inp, qparams=None):
        if qparams is None:
            raise GraphError("FakeQuantize needs the parameters of an observer (qparams)")
        if qparams.dtype_meta is not self.dtype:
            raise GraphError(f"FakeQuantize of {self.dtype.name} was given parameters of "
                             f"{getattr(qparams.dtype_meta, 'name', qparams.dtype_meta)}")
        return fake_quant_tensor(inp, qparams)


class LSQ(_FakeQuantize, QParamsModuleMixin):
    """A learned step size ``|step_size| + eps`` (a Parameter), its gradient LSQ's times
    ``grad_scale`` (the paper's ``1 / sqrt(N * qmax)``; 1 by default)."""

    def __init__(self, dtype="qint8", enable: bool = True, eps: float = 1e-5, **kwargs):
        super().__init__(dtype, enable, **kwargs)
        self.eps = float(eps)
        self.step_size = Parameter(np.asarray(1.0, np.float32))
        self.mode = QuantMode.SYMMERTIC
        self.zero_point = Buffer(np.asarray(0.0, np.float32))
        self.grad_scale = 1.0

    def set_qparams(self, qparams) -> None:
        """Start from an observer's parameters."""
        if qparams.scale is None:
            raise GraphError("LSQ.set_qparams: the parameters have no scale")
        self.mode = qparams.mode
        zero_point = qparams.zero_point if qparams.mode == QuantMode.ASYMMERTIC else 0.0
        self.zero_point = Buffer(np.asarray(np.asarray(zero_point), np.float32))
        self.step_size = Parameter(np.asarray(max(float(np.asarray(qparams.scale)) - self.eps,
                                                  0.0), np.float32))
        if isinstance(qparams, LSQParams):
            self.grad_scale = float(np.asarray(qparams.grad_scale))

    def _step(self, g):
        return F.abs(g.lift(self.step_size)) + self.eps

    def fake_quant_forward(self, inp, qparams=None):
        g = graph_of(inp)
        params = LSQParams(self.mode, self.dtype, self._step(g), g.lift(self.zero_point),
                           self.grad_scale)
        return fake_quant_tensor(inp, params, lsq_grad_scale=self.grad_scale)

    def get_qparams(self):
        step = F.abs(self.step_size.detach()) + self.eps
        return LSQParams(self.mode, self.dtype, step, self.zero_point, self.grad_scale)


class TQT(_FakeQuantize, QParamsModuleMixin):
    """A learned scale ``2 ** scale`` (``scale`` a Parameter: the base-2 logarithm), symmetric.

    Design: TQT's gradient of the log-threshold is LSQ's gradient of the scale times
    ``2 ** scale * ln 2``, which the walker's chain rule through ``2 ** scale`` gives: the
    fake_quant op's LSQ rule with a factor of 1 and TQT's edges (``tqt``: a tie just past the
    range is inside, as in MegEngine's ``TQT_Function``) is TQT's."""

    def __init__(self, dtype="qint8", enable: bool = True, **kwargs):
        super().__init__(dtype, enable, **kwargs)
        self.scale = Parameter(np.asarray(0.0, np.float32))

    def set_qparams(self, qparams) -> None:
        """Start from an observer's (symmetric) parameters."""
        if qparams.mode != QuantMode.SYMMERTIC:
            raise GraphError("TQT quantizes symmetrically: give it symmetric parameters")
        if qparams.scale is None:
            raise GraphError("TQT.set_qparams: the parameters have no scale")
        self.scale = Parameter(np.log2(np.asarray(qparams.scale, np.float32)))

    def _scale(self, g):
        return F.pow(g.const(np.asarray(2.0, np.float32)), g.lift(self.scale))

    def fake_quant_forward(self, inp, qparams=None):
        g = graph_of(inp)
        params = create_qparams(QuantMode.SYMMERTIC, self.dtype, scale=self._scale(g))
        return fake_quant_tensor(inp, params, lsq_grad_scale=1.0, tqt=True)

    def get_qparams(self):
        scale = F.pow(Tensor(np.asarray(2.0, np.float32)), self.scale.detach())
        return create_qparams(QuantMode.SYMMERTIC, self.dtype, scale=scale)
