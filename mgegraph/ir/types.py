"""Tensor types: dtypes mgegraph supports and the NumPy rules it follows."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .errors import GraphError, user_location

# Design: the engine's dtypes are a closed set; each has a short code used in
# the IR text form and an integer code shared with the Cython kernels (abi.pxd).
SUPPORTED = {
    np.dtype(np.float32): ("f32", 0),
    np.dtype(np.float64): ("f64", 1),
    np.dtype(np.int32): ("i32", 2),
    np.dtype(np.int64): ("i64", 3),
    np.dtype(np.bool_): ("bool", 4),
}
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class DTypeError(GraphError, TypeError):
    """A dtype mgegraph does not support (a GraphError, and a TypeError as before)."""


# The most bytes one tensor may hold: NumPy's limit (an index of the C ``Py_ssize_t`` type).
MAX_BYTES = sys.maxsize


def as_dtype(dtype) -> np.dtype:
    """Normalise a user dtype ("float32", np.float32, np.dtype) to a supported np.dtype."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise DTypeError(f"not a dtype: {dtype!r} (at {user_location()})") from exc
    if dt not in SUPPORTED:
        names = ", ".join(str(d) for d in SUPPORTED)
        raise DTypeError(f"dtype {dt} is not supported (supported: {names}) "
                         f"(at {user_location()})")
    return dt


def short_name(dtype: np.dtype) -> str:
    """"f32" for float32; the raw bytes of workspaces print as "u8"."""
    return "u8" if dtype == np.uint8 else SUPPORTED[dtype][0]


def dtype_code(dtype: np.dtype) -> int:
    return SUPPORTED[dtype][1]


def is_float(dtype: np.dtype) -> bool:
    return dtype in FLOAT_DTYPES


def result_type(*dtypes: np.dtype) -> np.dtype:
    """NumPy's promotion restricted to the supported dtypes (int32+float32 -> float64 as NumPy)."""
    return as_dtype(np.result_type(*dtypes))


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting; raises ValueError naming the shapes when they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            raise ValueError(f"shapes {', '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


@dataclass(frozen=True)
class TensorType:
    shape: tuple[int, ...]
    dtype: np.dtype

    def __post_init__(self):
        # a type whose bytes cannot be addressed would overflow C long in planning or at run;
        # an op's rule raising here becomes an OpError naming the op and the user's line
        if math.prod(self.shape) * self.dtype.itemsize > MAX_BYTES:
            raise GraphError(f"shape {self.shape} of {self.dtype} needs "
                             f"{math.prod(self.shape) * self.dtype.itemsize} bytes, more than "
                             f"can be addressed ({MAX_BYTES})")

    def __hash__(self) -> int:
        # cached: eager dispatch and the planners key dicts by types many times per value
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = self.__dict__["_hash"] = hash((self.shape, self.dtype))
            return h

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @cached_property  # planners ask for sizes many times per buffer
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{short_name(self.dtype)}[{','.join(map(str, self.shape))}]"


def _is_dim(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))


def tensor_type(shape, dtype) -> TensorType:
    """The type of a user's shape and dtype; a shape is a sequence of non-negative ints
    (NumPy integers too; no floats or bools) whose tensor's bytes can be addressed."""
    try:
        dims = tuple(shape)
    except TypeError:
        raise GraphError(f"shape {shape!r} is not a sequence of ints (at {user_location()})") \
            from None
    bad = [d for d in dims if not _is_dim(d)]
    if bad:
        raise GraphError(f"shape {shape!r}: dimension {bad[0]!r} is not an int "
                         f"(at {user_location()})")
    dims = tuple(int(d) for d in dims)
    if any(d < 0 for d in dims):
        raise GraphError(f"negative dimension in shape {dims} (at {user_location()})")
    dtype = as_dtype(dtype)
    try:
        return TensorType(dims, dtype)
    except GraphError as exc:
        raise GraphError(f"{exc} (at {user_location()})") from None
