"""Automatic mixed precision's switch (``mgegraph.amp.autocast``), read by the public functions.

While it is on (per thread, so one thread's autocast block never changes another's numbers),
the ops that are GEMMs at heart (matmul, linear, the convolutions) take their float operands in
the low-precision type, where half-width storage halves their memory traffic and a GPU has
tensor cores; the ops whose accuracy needs the range (softmax, the norms, the losses) take a
half input in the high-precision type, except batch norm, which takes its data in the low type
and its parameters in the high one (MegEngine's rule: ``ops.nn.batch_norm``). Everything else
follows its inputs, as without autocast.
Only the public functions cast: gradient rules build their ops directly, so a backward pass
runs in the dtypes its forward pass had.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from ..ir.types import HALF_DTYPES, as_dtype, is_float
from .builder import cast_to, graph_of, promote

FLOAT16, FLOAT32 = np.dtype(np.float16), np.dtype(np.float32)


@dataclass(frozen=True)
class Autocast:
    enabled: bool = False
    low: np.dtype = FLOAT16
    high: np.dtype = FLOAT32


_LOCAL = threading.local()


def current() -> Autocast:
    """This thread's autocast state."""
    return getattr(_LOCAL, "state", None) or Autocast()


def set_current(state: Autocast) -> Autocast:
    """Make ``state`` this thread's; returns the one it replaces."""
    before = current()
    if state.low not in HALF_DTYPES or not is_float(state.high) or state.high in HALF_DTYPES:
        raise ValueError(f"autocast: low_prec_dtype must be float16 or bfloat16 and "
                         f"high_prec_dtype float32 or float64, got {state.low}, {state.high}")
    _LOCAL.state = state
    return before


def make(enabled: bool, low, high) -> Autocast:
    return Autocast(bool(enabled), as_dtype(low), as_dtype(high))


def low_precision(*operands):
    """The float operands in the low-precision type while autocast is on (others as given)."""
    state = current()
    if not state.enabled:
        return operands
    return tuple(v if v is None or not _is_float_value(v) or v.dtype == state.low
                 else cast_to(graph_of(v).lift(v), state.low) for v in operands)


def gemm_operands(*operands) -> list:
    """The operands of a GEMM-like function (a None bias dropped), in the low-precision type
    while autocast is on, promoted to one dtype."""
    return promote(*[v for v in low_precision(*operands) if v is not None])


def high_precision(x):
    """``x`` in the high-precision type when autocast is on and ``x`` is a half type."""
    state = current()
    if state.enabled and _is_float_value(x) and x.dtype in HALF_DTYPES:
        return cast_to(graph_of(x).lift(x), state.high)
    return x


def _is_float_value(v) -> bool:
    dtype = getattr(v, "dtype", None)
    return dtype is not None and is_float(np.dtype(dtype))
