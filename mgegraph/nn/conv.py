"""Convolution layers besides Conv2d (layers.py): Conv1d, Conv3d, ConvTranspose2d,
ConvTranspose1d, ConvTranspose3d.

Each holds PyTorch's weight layout and initialisation, so a PyTorch state dict loads as it is:
Conv1d (out, in/groups, k), Conv3d (out, in/groups, kd, kh, kw); the transposed ones (in, out/groups, *kernel), whose fan-in
PyTorch reads from dim 1 (out/groups x kernel), as ``init.fans`` does.
"""
from __future__ import annotations

import math

from .. import functional as F
from ..ir.errors import GraphError
from ..ops.conv import check_conv_modes
from . import init
from .layers import _pair, _size, conv_repr
from .module import Module, Parameter


def _channels(owner, in_channels, out_channels, groups) -> tuple[int, int, int]:
    in_channels = _size(owner, "in_channels", in_channels)
    out_channels = _size(owner, "out_channels", out_channels)
    groups = _size(owner, "groups", groups)
    if in_channels % groups or out_channels % groups:
        raise GraphError(f"{owner}: in_channels {in_channels} and out_channels {out_channels} "
                         f"must both be divisible by groups {groups}")
    return in_channels, out_channels, groups


def _sides(owner, what, value, low, ndim) -> tuple[int, ...]:
    """An int or ``ndim`` ints >= ``low``, as a tuple (GraphError naming the layer)."""
    if ndim == 2:
        return _pair(owner, what, value, low)
    if ndim == 3:
        values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * 3
        if len(values) != 3:
            raise GraphError(f"{owner}: {what} must be an int or 3 ints, got {value!r}")
        return tuple(_size(owner, what, v, low) for v in values)
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise GraphError(f"{owner}: {what} must be an int or one int, got {value!r}")
        value = value[0]
    return (_size(owner, what, value, low),)


def _parameters(module, shape, out_channels, bias):
    """PyTorch's default: kaiming_uniform(a=sqrt(5)) weight, bias uniform in 1/sqrt(fan_in)."""
    module.weight = init.grouped(Parameter(init.kaiming_uniform(shape, a=math.sqrt(5))),
                                 module.groups)
    fan_in, _ = init.fans(shape)
    module.bias = Parameter(init.uniform(out_channels, 1 / math.sqrt(fan_in))) if bias else None


class Conv1d(Module):
    """1-D convolution over (N, C, L) input; weight (out, in/groups, k).

    >>> y = nn.Conv1d(3, 16, 5, padding=2)(x)   # (8, 3, 100) -> (8, 16, 100)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True):
        in_channels, out_channels, groups = _channels("Conv1d", in_channels, out_channels, groups)
        (k,) = _sides("Conv1d", "kernel_size", kernel_size, 1, 1)
        self.stride = _sides("Conv1d", "stride", stride, 1, 1)[0]
        self.padding = _sides("Conv1d", "padding", padding, 0, 1)[0]
        self.dilation = _sides("Conv1d", "dilation", dilation, 1, 1)[0]
        self.groups = groups
        shape = (out_channels, in_channels // groups, k)
        _parameters(self, shape, out_channels, bias)

    def forward(self, x):
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        o, i, k = self.weight.shape
        return conv_repr(self, i * self.groups, o, k)


class Conv3d(Module):
    """3-D convolution over (N, C, D, H, W) input; weight (out, in/groups, kd, kh, kw).

    >>> y = nn.Conv3d(3, 8, 3, padding=1)(x)   # (2, 3, 8, 16, 16) -> (2, 8, 8, 16, 16)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True):
        in_channels, out_channels, groups = _channels("Conv3d", in_channels, out_channels, groups)
        kernel = _sides("Conv3d", "kernel_size", kernel_size, 1, 3)
        self.stride = _sides("Conv3d", "stride", stride, 1, 3)
        self.padding = _sides("Conv3d", "padding", padding, 0, 3)
        self.dilation = _sides("Conv3d", "dilation", dilation, 1, 3)
        self.groups = groups
        shape = (out_channels, in_channels // groups, *kernel)
        _parameters(self, shape, out_channels, bias)

    def forward(self, x):
        return F.conv3d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        o, i = self.weight.shape[:2]
        return conv_repr(self, i * self.groups, o, tuple(self.weight.shape[2:]))


class _ConvTranspose(Module):
    NAME, NDIM = "", 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, dilation=1, groups=1, bias=True):
        name, nd = self.NAME, self.NDIM
        in_channels, out_channels, groups = _channels(name, in_channels, out_channels, groups)
        kernel = _sides(name, "kernel_size", kernel_size, 1, nd)
        self.stride = _sides(name, "stride", stride, 1, nd)
        self.padding = _sides(name, "padding", padding, 0, nd)
        self.output_padding = _sides(name, "output_padding", output_padding, 0, nd)
        self.dilation = _sides(name, "dilation", dilation, 1, nd)
        if any(o >= max(s, d) for o, s, d in zip(self.output_padding, self.stride,
                                                 self.dilation)):
            raise GraphError(f"{name}: output_padding {self.output_padding} must be smaller "
                             f"than the stride {self.stride} or the dilation {self.dilation}")
        self.groups = groups
        shape = (in_channels, out_channels // groups, *kernel)
        _parameters(self, shape, out_channels, bias)

    def _args(self):
        return (self.stride, self.padding, self.output_padding, self.dilation, self.groups)

    def extra_repr(self):
        i, o = self.weight.shape[:2]
        return f"{i}, {o * self.groups}, kernel_size={tuple(self.weight.shape[2:])}, " \
               f"stride={self.stride}, padding={self.padding}, " \
               f"output_padding={self.output_padding}"


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution over NCHW input; weight (in, out/groups, kh, kw).

    >>> up = nn.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1)
    >>> y = up(x)   # (1, 64, 32, 32) -> (1, 32, 64, 64)
    """
    NAME, NDIM = "ConvTranspose2d", 2

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, *self._args())


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution over (N, C, L) input; weight (in, out/groups, k).

    >>> y = nn.ConvTranspose1d(16, 8, 4, stride=2, padding=1)(x)   # L -> 2 L
    """
    NAME, NDIM = "ConvTranspose1d", 1

    def forward(self, x):
        return F.conv_transpose1d(x, self.weight, self.bias, *self._args())


class DeformableConv2d(Module):
    """MegEngine's modulated deformable convolution layer over NCHW input
    (``F.vision.deformable_conv2d``); ``forward(inp, offset, mask)``. Its weight is
    (out, in/groups, kh, kw) (the memory order of MegEngine's grouped 5-D one), initialised as
    Conv2d's.

    >>> dcn = nn.DeformableConv2d(4, 8, 3, padding=1)
    >>> y = dcn(x, offset, mask)   # x: (2, 4, 9, 9), offset: (2, 18, 9, 9), mask: (2, 9, 9, 9)
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default"):
        name = "DeformableConv2d"
        in_channels, out_channels, groups = _channels(name, in_channels, out_channels, groups)
        kernel = _sides(name, "kernel_size", kernel_size, 1, 2)
        self.stride = _sides(name, "stride", stride, 1, 2)
        self.padding = _sides(name, "padding", padding, 0, 2)
        self.dilation = _sides(name, "dilation", dilation, 1, 2)
        check_conv_modes(name, conv_mode, compute_mode)
        self.groups, self.conv_mode, self.compute_mode = groups, conv_mode, compute_mode
        _parameters(self, (out_channels, in_channels // groups, *kernel), out_channels, bias)

    def forward(self, inp, offset, mask):
        return F.vision.deformable_conv2d(inp, self.weight, offset, mask, self.bias, self.stride,
                                          self.padding, self.dilation, self.groups)

    def extra_repr(self):
        o, i, kh, kw = self.weight.shape
        return f"{i * self.groups}, {o}, kernel_size=({kh}, {kw}), stride={self.stride}, " \
               f"padding={self.padding}"


class ConvTranspose3d(_ConvTranspose):
    """Transposed 3-D convolution over (N, C, D, H, W) input; weight (in, out/groups, kd, kh,
    kw).

    >>> up = nn.ConvTranspose3d(16, 8, 2, stride=2)
    >>> y = up(x)   # (1, 16, 4, 8, 8) -> (1, 8, 8, 16, 16)
    """
    NAME, NDIM = "ConvTranspose3d", 3

    def forward(self, x):
        return F.conv_transpose3d(x, self.weight, self.bias, *self._args())
