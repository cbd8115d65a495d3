"""Normalisation layers: batch norm (1-d and 2-d, MegEngine's options), group, instance and local
response norm, under MegEngine's names and argument orders.

>>> norm = nn.GroupNorm(32, 64)
>>> y = norm(x)  # x (N, 64, H, W)
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from .layers import _fraction, _size
from .module import Buffer, Module, Parameter

# The shapes a batch norm keeps its weight, bias and running statistics in: MegEngine's
# (1, C, 1, 1) (its ``param_dim="dim_1c11"``, the default) or (C,), PyTorch's. Either way the
# state dict holds them as (C,) and loads any array of C values (``Module.flat_state``), as
# MegEngine's does, so MegEngine's and PyTorch's checkpoints load by name.
PARAM_DIMS = ("dim_c", "dim_1c11")


def _eps(owner: str, eps) -> float:
    if isinstance(eps, (bool, str)) or not isinstance(eps, (int, float, np.number)) \
            or not 0 < eps < float("inf"):
        raise GraphError(f"{owner}: eps must be a finite number > 0, got {eps!r}")
    return float(eps)


def _flag(owner: str, what: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise GraphError(f"{owner}: {what} must be True or False, got {value!r}")
    return bool(value)


class _BatchNorm(Module):
    """Batch norm over every axis but 1. Training normalises with the batch's statistics and
    updates the running ones (MegEngine's convention: running = momentum * running +
    (1 - momentum) * batch, with the unbiased batch variance); eval with the running ones.

    ``track_running_stats=False`` keeps no running statistics and always normalises with the
    batch's; ``freeze=True`` (MegEngine) normalises with the running statistics in training too
    and trains neither weight nor bias: they stay Parameters (``parameters()`` lists them, so an
    optimiser may be given them) but the forward reads them detached, so they get no gradient
    and an optimiser's step leaves them as they are."""

    ndims: tuple[int, ...] = ()
    flat_state = True

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True, freeze: bool = False,
                 param_dim: str = "dim_1c11"):
        owner = type(self).__name__
        num_features = _size(owner, "num_features", num_features)
        self.eps, self.momentum = _eps(owner, eps), _fraction(owner, "momentum", momentum)
        self.affine = _flag(owner, "affine", affine)
        self.track_running_stats = _flag(owner, "track_running_stats", track_running_stats)
        self.freeze = _flag(owner, "freeze", freeze)
        if param_dim not in PARAM_DIMS:
            raise GraphError(f"{owner}: param_dim must be one of {PARAM_DIMS}, got {param_dim!r}")
        if self.freeze and not self.track_running_stats:
            raise GraphError(f"{owner}: freeze=True needs track_running_stats=True (it "
                             "normalises with the running statistics)")
        self.num_features, self.param_dim = num_features, param_dim
        # MegEngine's rule: running statistics not made at construction cannot be asked for later
        self._tracked_at_init = self.track_running_stats
        shape = (num_features,) if param_dim == "dim_c" else (1, num_features, 1, 1)
        self.weight = Parameter(np.ones(shape, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(shape, np.float32)) if affine else None
        self.running_mean = Buffer(np.zeros(shape, np.float32)) if track_running_stats else None
        self.running_var = Buffer(np.ones(shape, np.float32)) if track_running_stats else None

    def _check_input(self, x):
        if x.ndim not in self.ndims or x.shape[1] != self.num_features:
            dims = " or ".join(f"{n}-d" for n in self.ndims)
            raise GraphError(f"{type(self).__name__}({self.num_features}): needs a {dims} input "
                             f"with {self.num_features} channels on axis 1, got shape "
                             f"{tuple(x.shape)}")

    def _per_channel(self, x, p, detached: bool = False):
        """A weight, bias or statistic as a Var of x's graph that batch_norm takes: as kept
        when it is (C,) or (1, C, 1, ...) of x's rank, else (C,) (None stays None);
        ``detached``: a value no gradient reaches."""
        if p is None:
            return None
        v = _detached(x.graph, p) if detached else x.graph.bind(p)
        broadcast = (1, self.num_features) + (1,) * (x.ndim - 2)
        return v if v.ndim == 1 or v.shape == broadcast else F.reshape(v, (self.num_features,))

    def forward(self, x):
        self._check_input(x)
        if self.track_running_stats and not self._tracked_at_init:
            raise GraphError(f"{type(self).__name__}({self.num_features}): track_running_stats "
                             "was False at construction, so there are no running statistics "
                             "to track; make a new module with track_running_stats=True")
        weight = self._per_channel(x, self.weight, detached=self.freeze)
        bias = self._per_channel(x, self.bias, detached=self.freeze)
        batch_stats = not self.track_running_stats or (self.training and not self.freeze)
        if not batch_stats:
            return F.batch_norm(x, self._per_channel(x, self.running_mean),
                                self._per_channel(x, self.running_var), weight, bias,
                                training=False, eps=self.eps)
        # MegEngine's rule: an empty batch has no statistics and leaves the running ones be
        # (F.batch_norm's update); running statistics of another shape take the batch's reshaped
        update = self.training and self.track_running_stats
        return F.batch_norm(x, self.running_mean if update else None,
                            self.running_var if update else None, weight, bias,
                            training=True, momentum=self.momentum, eps=self.eps)

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, " \
               f"affine={self.affine}, track_running_stats={self.track_running_stats}"


def _detached(graph, p: Parameter):
    """``p`` as a Var of ``graph`` that no gradient reaches: eagerly its ``detach()``; in a
    graph a second param node sharing its array (so plans read the values it has when they run,
    as they read ``p``), which ``grad`` with respect to ``p`` does not walk through."""
    if getattr(graph, "eager", False):
        return graph.bind(p.detach())
    graph.bind(p)  # binds p's array for good: later writes land in it in place
    name = f"{p.name or 'param'}.detached"
    while name in graph.params or name in graph.inputs:
        name += "_"
    return graph.param(name, p.value, share=True)


class BatchNorm1d(_BatchNorm):
    """Batch norm over an (N, C) or (N, C, L) input. ``nn.BatchNorm1d(64)``"""

    ndims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch norm over an (N, C, H, W) input (or (N, C), as mgegraph has always taken).
    ``nn.BatchNorm2d(64, freeze=True)``"""

    ndims = (4, 2)


class GroupNorm(Module):
    """Group norm: the channels in ``num_groups`` groups, each normalised over its channels and
    positions per sample, then a per-channel affine. ``nn.GroupNorm(32, 64)``"""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True):
        num_groups = _size("GroupNorm", "num_groups", num_groups)
        num_channels = _size("GroupNorm", "num_channels", num_channels)
        if num_channels % num_groups:
            raise GraphError(f"GroupNorm: num_channels {num_channels} must be divisible by "
                             f"num_groups {num_groups}")
        self.num_groups, self.num_channels = num_groups, num_channels
        self.eps, self.affine = _eps("GroupNorm", eps), _flag("GroupNorm", "affine", affine)
        self.weight = Parameter(np.ones(num_channels, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, np.float32)) if affine else None

    def forward(self, x):
        return F.nn.group_norm(x, self.num_groups, self.affine, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"


class InstanceNorm(Module):
    """Instance norm: each channel of each sample normalised over its positions, then a
    per-channel affine (MegEngine's ``InstanceNorm``). ``nn.InstanceNorm(64)``"""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True):
        num_channels = _size(type(self).__name__, "num_channels", num_channels)
        self.num_channels, self.eps = num_channels, _eps(type(self).__name__, eps)
        self.affine = _flag(type(self).__name__, "affine", affine)
        self.weight = Parameter(np.ones(num_channels, np.float32)) if affine else None
        self.bias = Parameter(np.zeros(num_channels, np.float32)) if affine else None

    def forward(self, x):
        if x.ndim < 3 or x.shape[1] != self.num_channels:
            raise GraphError(f"{type(self).__name__}({self.num_channels}): needs an (N, "
                             f"{self.num_channels}, ...) input of at least 3 dims, got shape "
                             f"{tuple(x.shape)}")
        return F.nn.instance_norm(x, self.affine, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.num_channels}, eps={self.eps}, affine={self.affine}"


class InstanceNorm2d(InstanceNorm):
    """PyTorch's name and arguments: ``affine`` defaults to False there, and running statistics
    (``track_running_stats=True``) are not kept. ``nn.InstanceNorm2d(64, affine=True)``"""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = False, track_running_stats: bool = False):
        if track_running_stats:
            raise GraphError("InstanceNorm2d: track_running_stats=True is not supported: "
                             "instance norm here always normalises with each sample's statistics")
        super().__init__(num_features, eps, affine)


class LocalResponseNorm(Module):
    """MegEngine's LRN across channels: x / (k + alpha * sum of x^2 over the ``kernel_size``
    (odd) channels centred on each)^beta. PyTorch's takes (size, alpha, beta, k) and divides
    alpha by the size. ``nn.LocalResponseNorm(kernel_size=5)``"""

    def __init__(self, kernel_size: int = 5, k: float = 2.0, alpha: float = 1e-4,
                 beta: float = 0.75):
        kernel_size = _size("LocalResponseNorm", "kernel_size", kernel_size)
        if kernel_size % 2 == 0:
            raise GraphError(f"LocalResponseNorm: kernel_size must be odd, got {kernel_size}")
        self.kernel_size, self.k, self.alpha, self.beta = kernel_size, k, alpha, beta

    def forward(self, x):
        return F.nn.local_response_norm(x, self.kernel_size, self.k, self.alpha, self.beta)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, k={self.k}, alpha={self.alpha}, " \
               f"beta={self.beta}"


class RMSNorm(Module):
    """PyTorch's RMSNorm: ``x / sqrt(mean(x**2) + eps) * weight`` over the trailing
    ``normalized_shape`` dims; ``eps=None`` is the machine epsilon of the computing type.
    ``nn.RMSNorm(4096)``"""

    def __init__(self, normalized_shape, eps: float | None = None,
                 elementwise_affine: bool = True):
        dims = tuple(normalized_shape) if hasattr(normalized_shape, "__iter__") \
            else (normalized_shape,)
        shape = tuple(_size("RMSNorm", f"normalized_shape {normalized_shape!r}: dimension", d)
                      for d in dims)
        self.normalized_shape, self.eps = shape, eps
        self.weight = Parameter(np.ones(shape, np.float32)) if elementwise_affine else None

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}"
