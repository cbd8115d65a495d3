"""Random draws as ops: ``rng_uniform``, ``rng_gamma`` and ``rng_poisson``.

Each is a pure function of its attributes and inputs: element i of a draw depends on the
``seed`` attribute, the ``step`` input (one int64, the stream's counter) and i only
(``_kernels/rng_sample.h``, shared by the CPU kernels ``_kernels/rng.pyx`` and CUDA's
``csrc_cuda/rng.cu``). So a plan that reads its step from a Buffer and assigns it the next value
draws new numbers at each run, two nodes of the same seed and step are the same draw (the CSE
pass may merge them, as dropout's), and CPU and GPU draw the same numbers. Normals,
exponentials, betas, permutations and multinomial samples are compositions over these
(``mgegraph/random.py``); none has a gradient (MegEngine's random ops have none either).

>>> u = apply("rng_uniform", (step,), shape=(2, 3), dtype="float32", seed=7)
"""
from __future__ import annotations

import operator

import numpy as np

from ..ir.types import TensorType
from .registry import FLOAT_DTYPES, REQUIRED, OpDef, register, require_dtypes

__all__ = ["RANDOM_OPS"]

RANDOM_OPS = ("rng_uniform", "rng_gamma", "rng_poisson")
INT64 = np.dtype(np.int64)


def _check_step(step: TensorType) -> None:
    if step.dtype != INT64 or step.size != 1:
        raise TypeError(f"the step input must be one int64, got {step}")


def _check_seed(attrs) -> None:
    seed = attrs["seed"]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) \
            or not -2**63 <= seed < 2**64:
        raise TypeError(f"seed must be an int of 64 bits, got {seed!r}")


def _uniform_infer(in_types, attrs):
    (step,) = in_types
    _check_step(step)
    _check_seed(attrs)
    try:
        shape = tuple(operator.index(d) for d in attrs["shape"])
    except TypeError:
        raise TypeError(f"shape must be ints, got {attrs['shape']!r}") from None
    if any(d < 0 for d in shape):
        raise ValueError(f"shape must not be negative, got {shape}")
    dtype = np.dtype(attrs["dtype"])
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {dtype}")
    return (TensorType(shape, dtype),)


def _parametrised_infer(name: str):
    def infer(in_types, attrs):
        param, step = in_types
        require_dtypes(name, param, FLOAT_DTYPES)
        _check_step(step)
        _check_seed(attrs)
        return (param,)
    return infer


# Uniform in [0, 1): multiples of 2**-24 (float32) or 2**-53 (float64).
register(OpDef("rng_uniform", "nn", _uniform_infer,
               attrs={"shape": REQUIRED, "dtype": "float32", "seed": 0}, flops_per_element=4))
# Gamma(alpha, 1) per element of alpha (> 0); Poisson(lam) per element of lam (>= 0), as floats.
register(OpDef("rng_gamma", "nn", _parametrised_infer("rng_gamma"), attrs={"seed": 0},
               flops_per_element=40))
register(OpDef("rng_poisson", "nn", _parametrised_infer("rng_poisson"), attrs={"seed": 0},
               flops_per_element=40))
