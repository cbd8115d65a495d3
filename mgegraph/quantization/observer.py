"""Observers (MegEngine's ``megengine.quantization.observer``): modules that watch the values
passing through them and say the scale and zero point to quantize them with.

``MinMaxObserver`` keeps the running minimum and maximum; ``ExponentialMovingAverageObserver``
their moving averages; ``HistogramObserver`` (calibration) a histogram whose range is searched
for the least quantization error; ``PassiveObserver`` a scale set by hand. Each keeps its
statistics as Buffers that its forward updates through the graph's assigns (``Graph.assign``),
so the same module observes eagerly (the update lands when the outermost module call ends) and
inside a compiled training step (when the run ends); the histogram's are NumPy's (eager only).
``observe(x)`` gives the parameters of the updated statistics at once, as MegEngine's
forward-then-``get_qparams`` does.

>>> ob = MinMaxObserver(dtype="qint8"); ob(x); ob.get_qparams().scale
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..eager.tensor import Tensor
from ..ir.errors import GraphError
from ..nn.module import Buffer
from ..ops.builder import graph_of
from .utils import QParamsModuleMixin, QuantizerSwitch, QuantMode, create_qparams

__all__ = ["ExponentialMovingAverageObserver", "HistogramObserver", "MinMaxObserver", "Observer",
           "PassiveObserver", "SyncExponentialMovingAverageObserver", "SyncMinMaxObserver"]

_F32 = np.finfo(np.float32)


class Observer(QuantizerSwitch, QParamsModuleMixin):
    """The base of observers: ``dtype`` names the quantized dtype (its ``qmin`` and ``qmax``).
    An observer observes while enabled; as MegEngine's, ``train()`` enables it and ``eval()``
    disables it, and ``enable_observer`` after ``eval()`` makes it observe in eval mode (post-
    training calibration)."""

    def __init__(self, dtype="qint8", **kwargs):
        super().__init__(dtype, True, **kwargs)

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


class SyncMinMaxObserver(MinMaxObserver):
    """MegEngine's MinMaxObserver for distributed training, whose batch minimum and maximum are
    reduced over the workers first; mgegraph trains in one process, where it is MinMaxObserver."""


class SyncExponentialMovingAverageObserver(ExponentialMovingAverageObserver):
    """MegEngine's ExponentialMovingAverageObserver for distributed training (its batch statistics
    reduced over the workers first); in one process, ExponentialMovingAverageObserver."""


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


class HistogramObserver(MinMaxObserver):
    """Post-training calibration's observer: a histogram of the values seen (``bins`` bins over
    the running [min, max]), whose ``get_qparams`` picks the range that minimises the L2 error
    of quantizing to ``qmax - qmin + 1`` levels (MegEngine's search: the histogram's ends are
    trimmed, the emptier side first, while the error falls).

    It observes eager values only (its statistics are NumPy's): calibrate by running the model
    eagerly. When the range grows, the old counts are spread over the new bins as if uniform
    within each old bin (``upsample_rate`` is MegEngine's argument, kept for its signature)."""

    def __init__(self, bins: int = 2048, upsample_rate: int = 128,
                 mode: QuantMode = QuantMode.SYMMERTIC, eps: float = 0.00001, dtype="qint8",
                 **kwargs):
        super().__init__(mode, eps, dtype, **kwargs)
        self.bins, self.upsample_rate = int(bins), int(upsample_rate)
        self.dst_nbins = self.qmax - self.qmin + 1
        self.histogram = Buffer(np.zeros(self.bins, np.float32))

    def observe(self, x):
        g = graph_of(x)
        if self.observing:
            if not getattr(g, "eager", False):
                raise GraphError("HistogramObserver observes eager values only: calibrate by "
                                 "running the model eagerly (its statistics are NumPy's)")
            self._add(np.asarray(x.numpy(), np.float64))
        qparams = self.get_qparams()
        scale = g.const(np.asarray(qparams.scale, np.float32))
        zero_point = None if qparams.zero_point is None else g.const(
            np.asarray(qparams.zero_point, np.float32))
        return create_qparams(qparams.mode, qparams.dtype_meta, scale=scale,
                              zero_point=zero_point)

    def _edges(self, lo: float, hi: float) -> np.ndarray:
        return np.linspace(lo, hi, self.bins + 1)

    def _add(self, values: np.ndarray) -> None:
        if values.size == 0:
            return
        old = self.histogram.numpy().astype(np.float64)
        lo, hi = float(values.min()), float(values.max())
        if old.sum() > 0:
            old_lo, old_hi = float(self.min_val.numpy()), float(self.max_val.numpy())
            lo, hi = min(lo, old_lo), max(hi, old_hi)
        hi = max(hi, lo + self.scale_limit)  # a constant still has a bin's width
        edges = self._edges(lo, hi)
        counts = np.histogram(values, edges)[0].astype(np.float64)
        if old.sum() > 0:
            cumulative = np.concatenate(([0.0], np.cumsum(old)))
            spread = np.interp(edges, self._edges(old_lo, old_hi), cumulative)
            counts += np.diff(spread)
        self.histogram.value = counts.astype(np.float32)
        self.min_val.value = np.asarray(lo, np.float32)
        self.max_val.value = np.asarray(hi, np.float32)

    def _error(self, hist, width: float, start: int, end: int) -> float:
        """L2 error of quantizing the histogram's values to ``dst_nbins`` levels spread over
        bins ``start`` to ``end``, each bin's values uniform within it."""
        step = width * (end - start + 1) / self.dst_nbins
        if step == 0:
            return 0.0
        begin = (np.arange(self.bins) - start) * width
        finish = begin + width
        last = self.dst_nbins - 1
        first_level = np.clip(np.floor(begin / step), 0, last)
        last_level = np.clip(np.floor(finish / step), 0, last)
        density = hist / width

        def norm(a, b):
            return density * (b ** 3 - a ** 3) / 3

        first_centre = first_level * step + step / 2
        inside = first_level == last_level
        half = step / 2
        head = norm(begin - first_centre, np.where(inside, finish - first_centre, half))
        middle = (last_level - first_level - 1) * norm(-half, half)
        tail = norm(-half, finish - (last_level * step + half))
        return float(np.sum(head + np.where(inside, 0.0, middle + tail)))

    def _searched_range(self) -> tuple[float, float]:
        hist = self.histogram.numpy().astype(np.float64)
        lo, hi = float(self.min_val.numpy()), float(self.max_val.numpy())
        width, total = (hi - lo) / self.bins, hist.sum()
        cdf = np.cumsum(hist)
        start, end, best = 0, self.bins - 1, float("inf")
        alpha, beta, stride = 0.0, 1.0, 1e-5
        while alpha < beta:
            next_alpha, next_beta = alpha + stride, beta - stride
            left = min(max(int(np.searchsorted(cdf, next_alpha * total)), start), end)
            right = min(max(int(np.searchsorted(cdf, next_beta * total, "right")) - 1, start), end)
            new_start, new_end = start, end
            if left - start > end - right:
                new_start, alpha = left, next_alpha
            else:
                new_end, beta = right, next_beta
            if (new_start, new_end) == (start, end):
                continue
            error = self._error(hist, width, new_start, new_end)
            if error > best:
                break
            best, start, end = error, new_start, new_end
        return lo + width * start, lo + width * (end + 1)

    def get_qparams(self):
        """The parameters of the searched range (eager tensors); the running min and max'
        before anything was observed."""
        if self.histogram.numpy().sum() == 0:
            return super().get_qparams()
        lo, hi = (np.asarray(v, np.float32) for v in self._searched_range())
        return self._calculate_qparams(Tensor(lo), Tensor(hi))
