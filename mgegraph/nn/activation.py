"""Activation modules: one class per activation function of ``mgegraph.functional``, named and
parametrised as PyTorch's and MegEngine's (``ReLU``, ``Sigmoid``, ``Tanh`` and ``GELU`` live in
``layers``). Each holds its arguments and calls its function; ``PReLU`` alone learns a weight.

>>> act = nn.PReLU(num_parameters=3)
>>> y = act(x)  # x: (N, 3, H, W), one learned slope per channel
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from .module import Module, Parameter


class _Function(Module):
    """An activation with keyword arguments: ``fn(x, **self.kwargs)``."""

    fn = None

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def forward(self, x):
        return type(self).fn(x, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.kwargs.items())


class ELU(_Function):
    fn = staticmethod(F.elu)

    def __init__(self, alpha: float = 1.0):
        super().__init__(alpha=alpha)


class SELU(_Function):
    fn = staticmethod(F.selu)


class CELU(_Function):
    fn = staticmethod(F.celu)

    def __init__(self, alpha: float = 1.0):
        if alpha == 0:
            raise GraphError("CELU: alpha must not be 0 (celu divides by it)")
        super().__init__(alpha=alpha)


class Softsign(_Function):
    fn = staticmethod(F.softsign)


class Hardsigmoid(_Function):
    """``relu6(x + 3) / 6``, computed as ``clip(x / 6 + 1 / 2, 0, 1)``."""

    fn = staticmethod(F.hardsigmoid)


class Hardtanh(_Function):
    fn = staticmethod(F.hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0):
        if not min_val <= max_val:
            raise GraphError(f"Hardtanh: min_val {min_val} is greater than max_val {max_val}")
        super().__init__(min_val=min_val, max_val=max_val)


class Mish(_Function):
    fn = staticmethod(F.mish)


class LogSigmoid(_Function):
    fn = staticmethod(F.logsigmoid)


class Softplus(_Function):
    fn = staticmethod(F.softplus)


class _Shrink(_Function):
    def __init__(self, lambd: float = 0.5):
        if not lambd >= 0:
            raise GraphError(f"{type(self).__name__}: lambd must be >= 0, got {lambd}")
        super().__init__(lambd=lambd)


class Softshrink(_Shrink):
    fn = staticmethod(F.softshrink)


class Hardshrink(_Shrink):
    fn = staticmethod(F.hardshrink)


class ReLU6(_Function):
    fn = staticmethod(F.relu6)


class LeakyReLU(_Function):
    fn = staticmethod(F.leaky_relu)

    def __init__(self, negative_slope: float = 0.01):
        super().__init__(negative_slope=negative_slope)


class SiLU(_Function):
    fn = staticmethod(F.silu)


class Hardswish(_Function):
    fn = staticmethod(F.hardswish)


class Softmax(_Function):
    """Softmax along ``axis`` (None: MegEngine's default, see ``F.softmax``)."""

    fn = staticmethod(F.softmax)

    def __init__(self, axis: int | None = None):
        super().__init__(axis=axis)


class LogSoftmax(_Function):
    fn = staticmethod(F.log_softmax)

    def __init__(self, axis: int | None = None):
        super().__init__(axis=axis)


class Identity(Module):
    """Its input, unchanged (the same value: no node)."""

    def forward(self, x):
        return x


class PReLU(Module):
    """``x`` above 0, ``weight * x`` at or below, with a learned weight of ``num_parameters``
    slopes starting at ``init``: one for every element, or one per channel (axis 1), held as
    MegEngine's (1, C, 1, 1) (its state dict holds (C,) and loads any C values, so PyTorch's
    (C,) checkpoints load too)."""

    flat_state = True

    def __init__(self, num_parameters: int = 1, init: float = 0.25):
        if isinstance(num_parameters, bool) or not isinstance(num_parameters, (int, np.integer)) \
                or num_parameters < 1:
            raise GraphError(f"PReLU: num_parameters must be an int >= 1, got {num_parameters!r}")
        self.num_parameters = n = int(num_parameters)
        self.weight = Parameter(np.full((1, n, 1, 1) if n > 1 else (1,), init, np.float32))

    def forward(self, x):
        n, weight = self.num_parameters, x.graph.bind(self.weight)
        if n == 1:
            return F.prelu(x, weight)
        if x.ndim < 2 or x.shape[1] != n:
            raise GraphError(f"PReLU: {n} slopes, one per channel (axis 1), for an input of "
                             f"shape {tuple(x.shape)}")
        return F.prelu(x, F.reshape(weight, (n,) + (1,) * (x.ndim - 2)))

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
