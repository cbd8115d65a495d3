"""Layers. Each is a short Module whose forward calls mgegraph.functional."""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from ..ops.conv import check_conv_modes
from . import init
from .module import Buffer, Module, Parameter


def _size(owner: str, what: str, value, low: int = 1) -> int:
    """``value`` as an int >= ``low``, or a GraphError naming the layer and the argument."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value < low:
        raise GraphError(f"{owner}: {what} must be an int >= {low}, got {value!r}")
    return int(value)


def _pair(owner: str, what: str, value, low: int) -> tuple[int, int]:
    pair = (value, value) if not isinstance(value, (tuple, list)) else tuple(value)
    if len(pair) != 2:
        raise GraphError(f"{owner}: {what} must be an int or a pair of ints, got {value!r}")
    return tuple(_size(owner, what, v, low) for v in pair)


def _fraction(owner: str, what: str, value) -> float:
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)) \
            or not 0 <= value <= 1:
        raise GraphError(f"{owner}: {what} must be a number in [0, 1], got {value!r}")
    return float(value)


def conv_repr(module, in_channels: int, out_channels: int, kernel) -> str:
    """MegEngine's text of a convolution: its channels and kernel, then each of stride,
    padding, dilation, groups and bias that is not the default."""
    n = len(kernel) if isinstance(kernel, tuple) else 1

    def sides(value):
        return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n

    text = f"{in_channels}, {out_channels}, kernel_size={kernel}"
    for what, default in (("stride", 1), ("padding", 0), ("dilation", 1)):
        value = sides(getattr(module, what, default))
        if value != (default,) * n:
            text += f", {what}={value if n > 1 else value[0]}"
    if getattr(module, "groups", 1) != 1:
        text += f", groups={module.groups}"
    if getattr(module, "padding_mode", "zeros") != "zeros":
        text += f", padding_mode={module.padding_mode!r}"
    return text + (", bias=False" if module.bias is None else "")


class Sequential(Module):
    """Layers called in order, held as attributes named "0", "1", ... or, given one dict
    (MegEngine's ``Sequential(OrderedDict(...))``), by its keys; so state names read
    ``seq.0.weight``. Indexing, slicing, ``len`` and iteration go by that order.

    >>> net = Sequential(Linear(4, 8), ReLU(), Linear(8, 1)); net[0].weight.shape
    (8, 4)
    """

    def __init__(self, *layers, name: str | None = None):
        super().__init__(name)
        named = list(layers[0].items()) if len(layers) == 1 and isinstance(layers[0], dict) \
            else [(str(i), layer) for i, layer in enumerate(layers)]
        self.layer_keys = []
        for key, layer in named:
            if not isinstance(key, str) or not isinstance(layer, Module):
                raise GraphError(f"Sequential: layer {key!r} must be a Module under a str name, "
                                 f"got {type(layer).__name__}")
            setattr(self, key, layer)
            self.layer_keys.append(key)

    @property
    def layer_values(self) -> list:
        return [getattr(self, key) for key in self.layer_keys]

    layers = layer_values  # mgegraph's earlier name

    def forward(self, x):
        for layer in self.layer_values:
            x = layer(x)
        return x

    def __getitem__(self, i):
        if isinstance(i, slice):
            return Sequential(dict(zip(self.layer_keys[i], self.layer_values[i])))
        return getattr(self, self.layer_keys[i])

    def __setitem__(self, i, layer):
        setattr(self, self.layer_keys[i], layer)

    def __delitem__(self, i):
        for key in self.layer_keys[i] if isinstance(i, slice) else [self.layer_keys[i]]:
            delattr(self, key)
        del self.layer_keys[i]

    def __len__(self):
        return len(self.layer_keys)

    def __iter__(self):
        return iter(self.layer_values)


class Linear(Module):
    """y = x @ weight.T + bias, weight (out_features, in_features), PyTorch's initialisation."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        in_features = _size("Linear", "in_features", in_features)
        out_features = _size("Linear", "out_features", out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.kaiming_uniform((out_features, in_features), a=math.sqrt(5)))
        self.bias = Parameter(init.uniform(out_features, 1 / math.sqrt(in_features))) if bias \
            else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class Conv2d(Module):
    """2-D convolution over NCHW input; weight (out, in/groups, kh, kw). MegEngine's
    ``padding_mode``: "zeros" (the convolution's own padding), "reflect" or "replicate" (the
    input padded by ``F.pad`` first, the convolution then unpadded).

    >>> conv = nn.Conv2d(3, 16, 3, padding=1, padding_mode="reflect")
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, conv_mode="cross_correlation", compute_mode="default",
                 padding_mode="zeros"):
        in_channels = _size("Conv2d", "in_channels", in_channels)
        out_channels = _size("Conv2d", "out_channels", out_channels)
        groups = _size("Conv2d", "groups", groups)
        if in_channels % groups or out_channels % groups:
            raise GraphError(f"Conv2d: in_channels {in_channels} and out_channels {out_channels} "
                             f"must both be divisible by groups {groups}")
        kh, kw = _pair("Conv2d", "kernel_size", kernel_size, 1)
        _pair("Conv2d", "stride", stride, 1)
        _pair("Conv2d", "padding", padding, 0)
        _pair("Conv2d", "dilation", dilation, 1)
        check_conv_modes("Conv2d", conv_mode, compute_mode)
        if padding_mode not in PADDING_MODES:
            raise GraphError(f"Conv2d: padding_mode must be one of {PADDING_MODES}, got "
                             f"{padding_mode!r}")
        shape = (out_channels, in_channels // groups, kh, kw)
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.conv_mode, self.compute_mode = conv_mode, compute_mode
        self.padding_mode = padding_mode
        self.weight = init.grouped(Parameter(init.kaiming_uniform(shape, a=math.sqrt(5))),
                                   groups)
        fan_in, _ = init.fans(shape)
        self.bias = Parameter(init.uniform(out_channels, 1 / math.sqrt(fan_in))) if bias else None

    def calc_conv(self, x, weight, bias):
        """This layer's convolution of ``x`` with ``weight`` and ``bias`` (a QAT layer passes
        its fake-quantized ones), its padding as ``padding_mode`` says."""
        padding = self.padding
        if getattr(self, "padding_mode", "zeros") != "zeros":  # absent: a layer saved before it
            x, padding = pad_input(x, self.padding, self.padding_mode), 0
        return F.conv2d(x, weight, bias, self.stride, padding, self.dilation, self.groups)

    def forward(self, x):
        return self.calc_conv(x, self.weight, self.bias)

    def extra_repr(self):
        o, i, kh, kw = self.weight.shape
        return conv_repr(self, i * self.groups, o, (kh, kw))


PADDING_MODES = ("zeros", "reflect", "replicate")


def pad_input(x, padding, mode: str):
    """NCHW ``x`` padded on its last two axes by ``padding`` (an int or a pair) in ``mode``
    ("reflect" or "replicate", ``F.pad``'s)."""
    ph, pw = (padding, padding) if not isinstance(padding, (tuple, list)) else padding
    return F.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), mode=mode)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, affine: bool = True):
        try:
            dims = (normalized_shape,) if not hasattr(normalized_shape, "__iter__") \
                else tuple(normalized_shape)
        except TypeError:
            dims = (normalized_shape,)
        shape = tuple(_size("LayerNorm", f"normalized_shape {normalized_shape!r}: dimension", d)
                      for d in dims)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(np.ones(shape, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if affine else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight is not None, self.weight,
                            self.bias, self.eps)


class Embedding(Module):
    """A lookup table: integer indices of any shape -> rows of ``weight``. The row
    ``padding_idx`` starts at zero and gets no gradient (PyTorch's rule)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None):
        num_embeddings = _size("Embedding", "num_embeddings", num_embeddings)
        embedding_dim = _size("Embedding", "embedding_dim", embedding_dim)
        if padding_idx is not None and not -num_embeddings <= padding_idx < num_embeddings:
            raise GraphError(f"Embedding: padding_idx {padding_idx} is no row of "
                             f"{num_embeddings}")
        rng = init.generator()
        table = rng.standard_normal((num_embeddings, embedding_dim)).astype(np.float32)
        if padding_idx is not None:
            table[padding_idx] = 0.0
        self.weight, self.padding_idx = Parameter(table), padding_idx

    def forward(self, indices):
        return F.embedding(indices, indices.graph.bind(self.weight), self.padding_idx)


class Dropout(Module):
    """Inverted dropout in training, identity in eval. A step counter (a Buffer the training
    step advances) makes every step draw a new mask; the seed makes runs reproducible."""

    def __init__(self, drop_prob: float = 0.5, seed: int = 0):
        self.drop_prob, self.seed = _fraction("Dropout", "drop_prob", drop_prob), seed
        self.steps = Buffer(np.zeros((), np.int64))

    def forward(self, x):
        if not self.training or self.drop_prob == 0:
            return x
        g = x.graph
        step = g.bind(self.steps)
        g.assign(step, step + 1)
        return F.dropout(x, self.drop_prob, seed=self.seed, step=step)

    def extra_repr(self):
        return f"drop_prob={self.drop_prob}"


class _Activation(Module):
    fn = None

    def forward(self, x):
        return type(self).fn(x)


class ReLU(_Activation):
    fn = staticmethod(F.relu)


class Sigmoid(_Activation):
    fn = staticmethod(F.sigmoid)


class Tanh(_Activation):
    fn = staticmethod(F.tanh)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, approximate=self.approximate)


class MaxPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}"


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, mode="average_count_exclude_padding",
                 *, ceil_mode=False, count_include_pad=None):
        self.kernel_size, self.stride, self.padding, self.mode = kernel_size, stride, padding, mode
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.mode,
                            ceil_mode=self.ceil_mode, count_include_pad=self.count_include_pad)

    def extra_repr(self):
        stride = self.kernel_size if self.stride is None else self.stride
        return f"kernel_size={self.kernel_size}, stride={stride}, padding={self.padding}, " \
               f"mode={self.mode}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, oshp):
        self.oshp = oshp

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.oshp)


class Flatten(Module):
    def __init__(self, start_axis: int = 1, end_axis: int = -1):
        self.start_axis, self.end_axis = start_axis, end_axis

    def forward(self, x):
        return F.flatten(x, self.start_axis, self.end_axis)
