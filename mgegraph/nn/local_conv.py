"""MegEngine's ``LocalConv2d`` (a locally connected layer, ``F.local_conv2d``) and
``RegionRestrictedConv`` (``F.region_restricted_conv``), with MegEngine's weight layouts and
initialisation (normal with std sqrt(1 / fan_in), a zero bias): PyTorch has neither layer.
"""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from . import init
from .conv import _channels
from .layers import _pair
from .module import Module, Parameter


def _normal(shape, fan_in) -> np.ndarray:
    return init.generator().normal(0.0, math.sqrt(1.0 / fan_in), shape).astype(np.float32)


def _window(module, name, kernel_size, stride, padding, dilation, conv_mode):
    module.kernel_size = _pair(name, "kernel_size", kernel_size, 1)
    module.stride = _pair(name, "stride", stride, 1)
    module.padding = _pair(name, "padding", padding, 0)
    module.dilation = _pair(name, "dilation", dilation, 1)
    if getattr(conv_mode, "name", conv_mode).lower() != "cross_correlation":
        raise GraphError(f"{name}: supports conv_mode='cross_correlation' only, got "
                         f"{conv_mode!r}")
    module.conv_mode = conv_mode


class LocalConv2d(Module):
    """MegEngine's locally connected layer over (N, in_channels, input_height, input_width)
    input: each output cell has its own weights, (groups, OH, OW, in/groups, kh, kw,
    out/groups); no bias. OH and OW are MegEngine's (input + 2 padding - kernel) // stride + 1.

    >>> m = nn.LocalConv2d(4, 8, 10, 10, 3, padding=1)
    >>> y = m(x)   # (2, 4, 10, 10) -> (2, 8, 10, 10)
    """

    def __init__(self, in_channels, out_channels, input_height, input_width, kernel_size,
                 stride=1, padding=0, dilation=1, groups=1, conv_mode="cross_correlation"):
        name = "LocalConv2d"
        in_channels, out_channels, groups = _channels(name, in_channels, out_channels, groups)
        _window(self, name, kernel_size, stride, padding, dilation, conv_mode)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        (kh, kw), (sh, sw), (ph, pw) = self.kernel_size, self.stride, self.padding
        self.input_height, self.input_width = input_height, input_width
        oh, ow = (input_height + 2 * ph - kh) // sh + 1, (input_width + 2 * pw - kw) // sw + 1
        if oh < 1 or ow < 1:
            raise GraphError(f"{name}: a {kh}x{kw} kernel over a {input_height}x{input_width} "
                             f"input (padding {self.padding}) leaves no output cell")
        shape = (groups, oh, ow, in_channels // groups, kh, kw, out_channels // groups)
        self.weight = Parameter(_normal(shape, kh * kw * in_channels // groups))
        self.bias = None

    def forward(self, inp):
        return F.local_conv2d(inp, self.weight, None, self.stride, self.padding, self.dilation,
                              self.conv_mode)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, input_height={self.input_height}, "
                f"input_width={self.input_width}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}")


class RegionRestrictedConv(Module):
    """MegEngine's region-restricted convolution layer: ``forward(inp, rin, rout)``, a grouped
    convolution (weight (groups, out/groups, in/groups, kh, kw), bias (1, out, 1, 1)) whose taps
    count only where the input cell's region id equals the output cell's.

    >>> m = nn.RegionRestrictedConv(2, 2, 2, groups=2)
    >>> y = m(x, rin, rout)   # x: (1, 2, 2, 2), rin: (1, 2, 2), rout: (1, 1, 1) int32
    """

    def __init__(self, in_channels, out_channels, kernel_size, groups=1, bias=True, stride=1,
                 padding=0, dilation=1, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros"):
        name = "RegionRestrictedConv"
        in_channels, out_channels, groups = _channels(name, in_channels, out_channels, groups)
        _window(self, name, kernel_size, stride, padding, dilation, conv_mode)
        if padding_mode != "zeros":  # the ids of a reflected or replicated border are undefined
            raise GraphError(f"{name}: supports padding_mode='zeros' only, got "
                             f"{padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.compute_mode, self.padding_mode = compute_mode, padding_mode
        kh, kw = self.kernel_size
        shape = (groups, out_channels // groups, in_channels // groups, kh, kw)
        self.weight = Parameter(_normal(shape, kh * kw * in_channels))
        self.bias = Parameter(np.zeros((1, out_channels, 1, 1), np.float32)) if bias else None

    def forward(self, inp, rin, rout):
        return F.region_restricted_conv(inp, self.weight, rin, rout, self.bias, self.stride,
                                        self.padding, self.dilation, self.groups,
                                        self.conv_mode, self.compute_mode)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, groups={self.groups}, "
                f"bias={self.bias is not None}")
