"""MegEngine's ``megengine.module.conv_transpose_bn``: a transposed convolution and the batch
norm after it as one module (``ConvTransposeBn2d``, ``ConvTransposeBnRelu2d``), and
``ConvTransposeRelu2d`` (MegEngine's ``module.conv``): the float forms that quantization-aware
training folds (``module.qat``) and deploys (``module.quantized``).

>>> up = ConvTransposeBnRelu2d(16, 8, 2, stride=2)
"""
from __future__ import annotations

from .. import functional as F
from ..nn.conv import ConvTranspose2d
from ..nn.module import Module
from ..nn.norm import BatchNorm2d
from ..ops.conv import check_conv_modes

__all__ = ["ConvTransposeBn2d", "ConvTransposeBnRelu2d", "ConvTransposeRelu2d"]


class ConvTransposeRelu2d(ConvTranspose2d):
    """``relu(conv_transpose2d(x))``, one module to quantize."""

    def forward(self, x):
        return F.relu(super().forward(x))


class _ConvTransposeBnActivation2d(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, groups=1, bias=True,
                 conv_mode="cross_correlation", compute_mode="default", eps=1e-5, momentum=0.9,
                 affine=True, track_running_stats=True, name=None):
        super().__init__(name)
        check_conv_modes(type(self).__name__, conv_mode, compute_mode)
        self.conv_transpose2d = ConvTranspose2d(in_channels, out_channels, kernel_size, stride,
                                                padding, output_padding, dilation, groups, bias)
        self.bn = BatchNorm2d(out_channels, eps, momentum, affine, track_running_stats)


class ConvTransposeBn2d(_ConvTransposeBnActivation2d):
    """``bn(conv_transpose2d(x))``."""

    def forward(self, x):
        return self.bn(self.conv_transpose2d(x))


class ConvTransposeBnRelu2d(_ConvTransposeBnActivation2d):
    """``relu(bn(conv_transpose2d(x)))``."""

    def forward(self, x):
        return F.relu(self.bn(self.conv_transpose2d(x)))
