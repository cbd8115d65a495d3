"""MegEngine's ``megengine.module.linear_bn``: a linear layer and the batch norm after it as one
module (``LinearBn1d``, ``LinearBnRelu1d``), the float forms that quantization-aware training
folds (``module.qat``) and deploys in int8 (``module.quantized``).

>>> head = LinearBnRelu1d(256, 128)
"""
from __future__ import annotations

from .. import functional as F
from ..ir.errors import GraphError
from ..nn.layers import Linear
from ..nn.module import Module
from ..nn.norm import BatchNorm1d
from ..ops.conv import COMPUTE_MODES

__all__ = ["LinearBn1d", "LinearBnRelu1d"]


class _LinearBnActivation1d(Module):
    def __init__(self, in_features, out_features, bias=True, compute_mode="default", eps=1e-5,
                 momentum=0.9, affine=True, track_running_stats=True, name=None):
        super().__init__(name)
        check_linear_mode(type(self).__name__, compute_mode)
        self.linear = Linear(in_features, out_features, bias)
        self.bn = BatchNorm1d(out_features, eps, momentum, affine, track_running_stats)


def check_linear_mode(owner: str, compute_mode) -> None:
    if compute_mode not in COMPUTE_MODES:
        raise GraphError(f"{owner}: compute_mode must be one of {COMPUTE_MODES}, got "
                         f"{compute_mode!r}")


class LinearBn1d(_LinearBnActivation1d):
    """``bn(linear(x))`` over an (N, in_features) input."""

    def forward(self, x):
        return self.bn(self.linear(x))


class LinearBnRelu1d(_LinearBnActivation1d):
    """``relu(bn(linear(x)))``."""

    def forward(self, x):
        return F.relu(self.bn(self.linear(x)))
