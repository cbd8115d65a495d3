"""Pooling layers beyond nn/layers.py's MaxPool2d, AvgPool2d and AdaptiveAvgPool2d: adaptive
max, global, Lp and 1-D pooling. Each forward is one call of mgegraph.functional.

>>> pool = nn.LPPool2d(2, 3, stride=2)
>>> y = pool(x)   # (N, C, 9, 9) -> (N, C, 4, 4)
"""
from __future__ import annotations

from .. import functional as F
from .module import Module


class AdaptiveMaxPool2d(Module):
    """MegEngine's AdaptiveMaxPool2d: the maximum over PyTorch's adaptive windows."""

    def __init__(self, oshp):
        self.oshp = oshp

    def forward(self, x):
        return F.adaptive_max_pool2d(x, self.oshp)


class GlobalAvgPool2d(Module):
    """The mean of each plane, as (N, C, 1, 1)."""

    def forward(self, x):
        return F.global_avg_pool2d(x)


class GlobalMaxPool2d(Module):
    """The maximum of each plane, as (N, C, 1, 1)."""

    def forward(self, x):
        return F.global_max_pool2d(x)


class LPPool2d(Module):
    """The p-norm of each sliding window (PyTorch's argument order)."""

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False, *, padding=0,
                 dilation=1):
        self.norm_type, self.kernel_size, self.stride = norm_type, kernel_size, stride
        self.ceil_mode, self.padding, self.dilation = ceil_mode, padding, dilation

    def forward(self, x):
        return F.lp_pool2d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode,
                           padding=self.padding, dilation=self.dilation)


class LPPool1d(LPPool2d):
    """LPPool2d over the last axis of an (N, C, L) input."""

    def forward(self, x):
        return F.lp_pool1d(x, self.norm_type, self.kernel_size, self.stride, self.ceil_mode,
                           padding=self.padding, dilation=self.dilation)


class MaxPool1d(Module):
    """max_pool1d: MaxPool2d over the last axis of an (N, C, L) input."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return F.max_pool1d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)


class AvgPool1d(Module):
    """avg_pool1d: AvgPool2d over the last axis of an (N, C, L) input, with its ``mode``
    (PyTorch's ``count_include_pad``, whose default there counts padding: pass it to match)."""

    def __init__(self, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding",
                 *, ceil_mode=False, count_include_pad=None):
        self.kernel_size, self.stride, self.padding, self.mode = kernel_size, stride, padding, mode
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.mode,
                            ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad)


class MaxUnpool2d(Module):
    """max_unpool2d: each value put back at the cell its index names (PyTorch's MaxUnpool2d)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x, indices, output_size=None):
        return F.max_unpool2d(x, indices, self.kernel_size, self.stride, self.padding,
                              output_size)
