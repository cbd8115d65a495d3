"""Seeded initialisations. Layers draw from one generator, reseeded by ``manual_seed``."""
from __future__ import annotations

import math

import numpy as np

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
