"""sliding_window and its transpose on CUDA (csrc_cuda/sliding_window.cu), from the shared
parameter block (mgegraph/kernel_abi/sliding_window.py): a thread per output element.

>>> sorted(KERNELS)
['sliding_window_f32', 'sliding_window_f64', 'sliding_window_transpose_f32', \
'sliding_window_transpose_f64']
"""
from __future__ import annotations

import math

from ...ir.types import short_name
from ...kernel_abi import sliding_window as abi
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types):
        return elementwise_steps(entry, math.prod(types[-1].shape))  # one thread per output
    return steps


def implement(table) -> None:
    """Register sliding_window and sliding_window_transpose on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "sliding_window.cu", _steps)
