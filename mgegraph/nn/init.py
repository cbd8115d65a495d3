"""Seeded initialisations. Layers draw from one generator, reseeded by ``manual_seed``."""
from __future__ import annotations

import math

import numpy as np

from ..eager.tensor import set_array
from .module import Parameter

_generator = np.random.default_rng(0)


def manual_seed(seed: int) -> None:
    """Reseed the generator that layers use for their initial weights."""
    global _generator
    _generator = np.random.default_rng(seed)


def generator() -> np.random.Generator:
    return _generator


def fans(shape) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shaped (out, in, *kernel) as in Linear and Conv2d."""
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def uniform(shape, bound: float, rng=None) -> np.ndarray:
    return (rng or _generator).uniform(-bound, bound, shape).astype(np.float32)


def kaiming_uniform(shape, a: float = 0.0, rng=None) -> np.ndarray:
    """He initialisation for a leaky-ReLU slope ``a``; a=sqrt(5) gives PyTorch's default."""
    fan_in, _ = fans(shape)
    gain = math.sqrt(2.0 / (1 + a * a))
    return uniform(shape, gain * math.sqrt(3.0 / fan_in), rng)


def kaiming_normal(shape, a: float = 0.0, rng=None) -> np.ndarray:
    fan_in, _ = fans(shape)
    std = math.sqrt(2.0 / (1 + a * a)) / math.sqrt(fan_in)
    return ((rng or _generator).standard_normal(shape) * std).astype(np.float32)


def xavier_uniform(shape, gain: float = 1.0, rng=None) -> np.ndarray:
    fan_in, fan_out = fans(shape)
    return uniform(shape, gain * math.sqrt(6.0 / (fan_in + fan_out)), rng)


def xavier_normal(shape, gain: float = 1.0, rng=None) -> np.ndarray:
    fan_in, fan_out = fans(shape)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    return ((rng or _generator).standard_normal(shape) * std).astype(np.float32)


# -- MegEngine's in-place initialisers (``M.init.fill_(w, 0.5)``) ---------------------------------
def _reset(tensor, array) -> None:
    """Give ``tensor`` the value ``array`` (in its dtype), as MegEngine's ``_reset``: a
    Parameter is written where plans read it, a plain Tensor holds a new array."""
    array = np.asarray(array, dtype=tensor.dtype)
    if isinstance(tensor, Parameter):
        tensor.value = array
    else:
        set_array(tensor, np.ascontiguousarray(array), owns=True)


def fill_(tensor, val) -> None:
    """Fill ``tensor`` with ``val`` in place."""
    _reset(tensor, np.full(tuple(tensor.shape), val))


def zeros_(tensor) -> None:
    fill_(tensor, 0)


def ones_(tensor) -> None:
    fill_(tensor, 1)


def uniform_(tensor, a: float = 0.0, b: float = 1.0) -> None:
    """Fill ``tensor`` with draws from U(a, b) (the layers' generator)."""
    _reset(tensor, _generator.uniform(a, b, tuple(tensor.shape)))


def normal_(tensor, mean: float = 0.0, std: float = 1.0) -> None:
    _reset(tensor, _generator.normal(mean, std, tuple(tensor.shape)))


_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "conv_transpose1d": 1.0,
          "conv_transpose2d": 1.0, "conv_transpose3d": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3,
          "relu": math.sqrt(2.0)}


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The gain that keeps activations' scale through ``nonlinearity`` (``leaky_relu`` takes
    its slope ``param``, default 0.01)."""
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: leaky_relu's slope must be a number, got {param!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r} (one of "
                         f"{sorted([*_GAINS, 'leaky_relu'])})")
    return _GAINS[nonlinearity]


def grouped(weight, groups: int):
    """``weight`` marked as a convolution's of ``groups`` groups (for its fans); returns it."""
    weight.conv_groups = groups
    return weight


def calculate_fan_in_and_fan_out(tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight: (in, out) for Linear's (out, in); for a convolution's
    (out, in/groups, *kernel) (a transposed one's (in, out/groups, *kernel)) dim 1 and dim 0
    over its groups, each times the kernel's size. That is MegEngine's rule, whose grouped
    weights are (groups, out/groups, in/groups, *kernel); PyTorch's fan_out is not divided by
    the groups. mgegraph keeps PyTorch's layout and knows the groups of the weights its
    convolution layers make."""
    shape = tuple(tensor.shape)
    if len(shape) < 2:
        raise ValueError(f"calculate_fan_in_and_fan_out: a tensor of shape {shape} has no fans "
                         "(it needs at least 2 dims)")
    fan_in, fan_out = fans(shape)
    return fan_in, fan_out // getattr(tensor, "conv_groups", 1)


def calculate_correct_fan(tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"calculate_correct_fan: mode must be 'fan_in' or 'fan_out', got "
                         f"{mode!r}")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def xavier_uniform_(tensor, gain: float = 1.0) -> None:
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain: float = 1.0) -> None:
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor)
    normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))


def msra_uniform_(tensor, a: float = 0, mode: str = "fan_in",
                  nonlinearity: str = "leaky_relu") -> None:
    """He (MSRA) initialisation, uniform: bound = gain * sqrt(3 / fan)."""
    std = calculate_gain(nonlinearity, a) / math.sqrt(calculate_correct_fan(tensor, mode))
    uniform_(tensor, -math.sqrt(3.0) * std, math.sqrt(3.0) * std)


def msra_normal_(tensor, a: float = 0, mode: str = "fan_in",
                 nonlinearity: str = "leaky_relu") -> None:
    std = calculate_gain(nonlinearity, a) / math.sqrt(calculate_correct_fan(tensor, mode))
    normal_(tensor, 0.0, std)
