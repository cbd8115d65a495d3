"""MegEngine's ``megengine.module.conv_bn``: a convolution and the batch norm after it as one
module (``ConvBn2d``, ``ConvBnRelu2d``), and ``ConvRelu2d`` (MegEngine's ``module.conv``), the
float forms that quantization-aware training folds (``module.qat``) and deploys in int8
(``module.quantized``).

>>> block = ConvBnRelu2d(3, 16, 3, padding=1)
"""
from __future__ import annotations

from .. import functional as F
from ..nn.layers import Conv2d
from ..nn.module import Module
from ..nn.norm import BatchNorm2d

__all__ = ["ConvBn2d", "ConvBnRelu2d", "ConvRelu2d"]


class ConvRelu2d(Conv2d):
    """``relu(conv2d(x))``, one module to quantize."""

    def forward(self, x):
        return F.relu(super().forward(x))


class _ConvBnActivation2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros", eps=1e-5, momentum=0.9, affine=True,
                 track_running_stats=True, name=None):
        super().__init__(name)
        self.conv = Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation,
                           groups, bias, conv_mode, compute_mode, padding_mode)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvBn2d(_ConvBnActivation2d):
    """``bn(conv2d(x))``."""

    def forward(self, x):
        return self.bn(self.conv(x))


class ConvBnRelu2d(_ConvBnActivation2d):
    """``relu(bn(conv2d(x)))``."""

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))
