"""Observers (MegEngine's ``megengine.quantization.observer``): modules that watch the values
passing through them and say the scale and zero point to quantize them with.

``MinMaxObserver`` keeps the running minimum and maximum; ``ExponentialMovingAverageObserver``
their moving averages; ``PassiveObserver`` a scale set by hand. Each keeps its statistics as
Buffers that its forward updates through the graph's assigns (``Graph.assign``), so the same
module observes eagerly (the update lands when the outermost module call ends) and inside a
compiled training step (when the run ends). ``observe(x)`` gives the parameters of the updated
statistics at once, as MegEngine's forward-then-``get_qparams`` does.

>>> ob = MinMaxObserver(dtype="qint8"); ob(x); ob.get_qparams().scale
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from ..nn.module import Buffer, Module
from ..ops.builder import graph_of
from .utils import QParamsModuleMixin, QuantMode, create_qparams, quant_dtype_meta

__all__ = ["ExponentialMovingAverageObserver", "MinMaxObserver", "Observer", "PassiveObserver"]

_F32 = np.finfo(np.float32)


class Observer(Module, QParamsModuleMixin):
    """The base of observers: ``dtype`` names the quantized dtype (its ``qmin`` and ``qmax``).
    An observer observes while enabled; as MegEngine's, ``train()`` enables it and ``eval()``
    disables it, and ``enable_observer`` after ``eval()`` makes it observe in eval mode (post-
    training calibration)."""

    def __init__(self, dtype="qint8", **kwargs):
        super().__init__()
        kwargs.pop("narrow_range", None)  # MegEngine ignores it too
        if kwargs:
            raise GraphError(f"{type(self).__name__}: unknown arguments {sorted(kwargs)}")
        self.dtype = quant_dtype_meta(dtype)
        self.qmin, self.qmax = self.dtype.qmin, self.dtype.qmax
        self.enabled = True

    def enable(self):
        self.enabled = True

    def disable(self):
        self.enabled = False

    @property
    def training(self) -> bool:
        return vars(self).get("_training", True)

    @training.setter
    def training(self, mode: bool) -> None:
        # Module.train and eval set each module's ``training``: the switch MegEngine makes
        self._training = mode
        self.enabled = mode

    @property
    def observing(self) -> bool:
        return self.enabled

    def observe(self, x):
        """Update the statistics with ``x`` (while observing) and give the parameters they now
        make, as values of ``x``'s graph."""
        raise NotImplementedError

    def forward(self, x):
        self.observe(x)
        return x


class MinMaxObserver(Observer):
    """The running minimum and maximum; scale ``max(|min|, |max|) / ((qmax - qmin) / 2)``
    (symmetric) or ``(max - min) / (qmax - qmin)`` with zero point ``qmin - round(min /
    scale)`` (asymmetric), never below ``eps``; the range always holds 0."""

    def __init__(self, mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001,
                 dtype="qint8", **kwargs):
        super().__init__(dtype, **kwargs)
        self.mode = mode
        self.min_val = Buffer(np.asarray(_F32.max, np.float32))
        self.max_val = Buffer(np.asarray(_F32.min, np.float32))
        self.scale_limit = float(eps)

    def _calculate_qparams(self, inp_min_val, inp_max_val):
        min_val = F.minimum(inp_min_val, 0.0)
        max_val = F.maximum(inp_max_val, 0.0)
        if self.mode == QuantMode.SYMMERTIC:
            largest = F.maximum(-min_val, max_val)
            scale = F.maximum(largest / ((self.qmax - self.qmin) / 2), self.scale_limit)
            zero_point = None
        else:
            scale = F.maximum((max_val - min_val) / (self.qmax - self.qmin), self.scale_limit)
            zero_point = self.qmin - F.round(min_val / scale)
        return create_qparams(self.mode, self.dtype, scale=scale, zero_point=zero_point)

    def _updated(self, x, old_min, old_max):
        """The new (min, max) after seeing ``x``."""
        return F.minimum(old_min, x.min()), F.maximum(old_max, x.max())

    def observe(self, x):
        g = graph_of(x)
        old_min, old_max = g.lift(self.min_val), g.lift(self.max_val)
        if not self.observing:
            return self._calculate_qparams(old_min, old_max)
        new_min, new_max = self._updated(x, old_min, old_max)
        g.assign(old_min, new_min)
        g.assign(old_max, new_max)
        return self._calculate_qparams(new_min, new_max)

    def get_qparams(self):
        """The parameters of the statistics kept (eager tensors)."""
        return self._calculate_qparams(self.min_val, self.max_val)


class ExponentialMovingAverageObserver(MinMaxObserver):
    """Moving averages of the minimum and maximum: ``momentum * old + (1 - momentum) * new``
    (the first observation taken as it is)."""

    def __init__(self, momentum: float = 0.9, mode: QuantMode = QuantMode.SYMMERTIC,
                 eps: float = 0.00001, dtype="qint8", **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.momentum = float(momentum)
        # 0 until the first observation: no branch on it, so a compiled step keeps one graph
        self.runtime_momentum = Buffer(np.asarray(0.0, np.float32))

    def set_momentum(self, momentum: float) -> None:
        self.momentum = float(momentum)

    def _updated(self, x, old_min, old_max):
        g = graph_of(x)
        m = g.lift(self.runtime_momentum)
        new = [old * m + (1 - m) * now for old, now in ((old_min, x.min()), (old_max, x.max()))]
        g.assign(m, g.const(np.asarray(self.momentum, np.float32)))
        return new[0], new[1]


class PassiveObserver(Observer):
    """An observer whose scale is set (``set_qparams``, or ``scale = ...``), not observed:
    MegEngine's for parameters found elsewhere (EasyQuant's search)."""

    def __init__(self, dtype="qint8", **kwargs):
        super().__init__(dtype, **kwargs)
        self.qparams = None

    @property
    def scale(self):
        return self.qparams.scale

    @scale.setter
    def scale(self, value):
        if self.qparams is None:
            raise GraphError("PassiveObserver: set_qparams before setting the scale")
        self.qparams.scale = Buffer(np.asarray(value, np.float32))

    def set_qparams(self, qparams) -> None:
        self.orig_scale = float(np.asarray(qparams.scale))
        self.qparams = create_qparams(qparams.mode, self.dtype,
                                      scale=Buffer(np.asarray(self.orig_scale, np.float32)),
                                      zero_point=qparams.zero_point)

    def get_qparams(self):
        if self.qparams is None:
            raise GraphError("PassiveObserver: its parameters were never set (set_qparams)")
        return self.qparams

    def observe(self, x):
        qparams = self.get_qparams()
        g = graph_of(x)
        return create_qparams(qparams.mode, qparams.dtype_meta, scale=g.lift(qparams.scale),
                              zero_point=None if qparams.zero_point is None
                              else g.lift(qparams.zero_point))
