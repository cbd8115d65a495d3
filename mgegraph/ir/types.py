"""Tensor types: dtypes mgegraph supports and the NumPy rules it follows."""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import cached_property

import ml_dtypes
import numpy as np

from . import facts
from .dims import Dim, DimError, is_known_nonnegative, parse_dim
from .errors import GraphError, user_location
from .quant import QuantParams

# Design: the engine's dtypes are a closed set; each has a short code used in
# the IR text form and an integer code shared with the Cython kernels (abi.pxd).
SUPPORTED = {
    np.dtype(np.float32): ("f32", 0),
    np.dtype(np.float64): ("f64", 1),
    np.dtype(np.int32): ("i32", 2),
    np.dtype(np.int64): ("i64", 3),
    np.dtype(np.bool_): ("bool", 4),
    np.dtype(np.uint8): ("u8", 5),
    np.dtype(np.int8): ("i8", 6),
    np.dtype(np.int16): ("i16", 7),
    np.dtype(np.float16): ("f16", 8),
    np.dtype(ml_dtypes.bfloat16): ("bf16", 9),  # BFLOAT16 below
}
# the floats the kernels compute in
FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
INT_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
# Design: the small integers (images arrive as uint8) have kernels for casts, movement,
# comparisons, where and integer arithmetic only; an op table opts in with SMALL_INT_DTYPES, so
# an op without their kernels refuses them in its dtype rule instead of at dispatch.
SMALL_INT_DTYPES = (np.dtype(np.uint8), np.dtype(np.int8), np.dtype(np.int16))
# Design: the half-precision floats are storage formats. Casts and the ops that move bytes have
# kernels for them; every other op computes in float32 and rounds its result to the half type
# once (ops.registry: HALF_NATIVE_OPS; planner.passes.half widens the nodes before planning), as
# PyTorch's CPU kernels do. NumPy has no bfloat16: ml_dtypes (ONNX's and JAX's) gives its dtype.
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
HALF_DTYPES = (np.dtype(np.float16), BFLOAT16)
# the dtypes every kernel family implements
CORE_DTYPES = tuple(d for d in SUPPORTED if d not in SMALL_INT_DTYPES + HALF_DTYPES)


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
    """"f32" for float32 (the raw bytes of workspaces are uint8, "u8")."""
    return SUPPORTED[dtype][0]


def dtype_code(dtype: np.dtype) -> int:
    return SUPPORTED[dtype][1]


def is_float(dtype: np.dtype) -> bool:
    """A floating-point dtype, half precision included (what gradients flow through)."""
    return dtype in FLOAT_DTYPES or dtype in HALF_DTYPES


def result_type(*dtypes: np.dtype) -> np.dtype:
    """NumPy's promotion restricted to the supported dtypes (int32+float32 -> float64 as NumPy)."""
    return as_dtype(np.result_type(*dtypes))


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy broadcasting; raises ValueError naming the shapes when they do not broadcast.

    A named dimension meeting another size that is not 1 is taken to equal it (as ONNX
    Runtime and ``torch.export`` take it): the fact is recorded (``ir.facts``) and checked
    when shapes are bound, so a batch of 1 meeting a batch of 8 is a ``FeedError`` then,
    never a silent broadcast.
    """
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = list(dict.fromkeys(s[axis] for s in shapes if len(s) >= -axis and s[axis] != 1))
        fixed = [d for d in sizes if not isinstance(d, Dim)]
        if len(fixed) > 1:
            raise ValueError(f"shapes {_shapes_text(shapes)} do not broadcast")
        if not sizes:
            out.append(1)
            continue
        # the fixed size if there is one, else the simplest expression: the result's name
        chosen = fixed[0] if fixed else min(sizes, key=lambda d: (len(str(d)), str(d)))
        for d in sizes:
            if d != chosen:
                facts.require_equal(d, chosen, f"broadcasting {_shapes_text(shapes)}")
        out.append(chosen)
    return tuple(out)


def _shapes_text(shapes) -> str:
    return ", ".join("(" + ", ".join(map(str, s)) + ("," if len(s) == 1 else "") + ")"
                     for s in shapes)


@dataclass(frozen=True)
class TensorType:
    """A shape and a dtype. A dimension is an int, or a ``Dim`` (a named size such as
    ``batch``, or an expression of names) in a graph with flexible input shapes; ``size`` and
    ``nbytes`` are then expressions too, and ``symbolic`` says so. A quantized tensor's type
    also has its ``quant`` parameters (``ir.quant``); ``dtype`` is then the storage dtype."""

    shape: tuple[int | Dim, ...]
    dtype: np.dtype
    quant: QuantParams | None = None

    def __post_init__(self):
        if self.quant is not None:
            try:
                self.quant.check(self.shape, self.dtype)
            except ValueError as exc:
                raise DTypeError(f"type {self.dtype}{list(self.shape)}: {exc}") from None
        if self.symbolic:
            return  # checked again with numbers when the graph is specialised
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
            h = self.__dict__["_hash"] = hash((self.shape, self.dtype, self.quant))
            return h

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @cached_property
    def symbolic(self) -> bool:
        """Whether a dimension is named (known only when shapes are bound)."""
        return any(isinstance(d, Dim) for d in self.shape)

    @cached_property  # planners ask for sizes many times per buffer
    def size(self) -> int:
        return math.prod(self.shape)

    @cached_property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        # a named shape reads with spaces (f32[batch, 10]); a fixed one as it always has
        sep = ", " if self.symbolic else ","
        name = short_name(self.dtype) if self.quant is None else self.quant.text(self.dtype)
        return f"{name}[{sep.join(map(str, self.shape))}]"


def _is_int(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_))


def as_dim(d, shape=None) -> int | Dim:
    """A user's dimension: an int (NumPy's too), a ``Dim``, or a name or expression as text
    (``"batch"``, ``"2*seq"``), read by ``parse_dim`` (never evaluated as Python)."""
    if _is_int(d):
        return int(d)
    if isinstance(d, str):
        try:
            return parse_dim(d)
        except DimError as exc:
            raise GraphError(f"shape {shape!r}: {exc} (at {user_location()})") from None
    if isinstance(d, Dim):
        return d
    raise GraphError(f"shape {shape!r}: dimension {d!r} is not an int or a name "
                     f"(at {user_location()})")


def tensor_type(shape, dtype, quant: QuantParams | None = None) -> TensorType:
    """The type of a user's shape and dtype; a shape is a sequence of non-negative ints
    (NumPy integers too; no floats or bools) or named dimensions (``"batch"``, ``mg.Dim``),
    whose tensor's bytes can be addressed; ``quant`` the quantization of its integers."""
    if isinstance(shape, (str, Dim)):
        raise GraphError(f"shape {shape!r} is one dimension, not a sequence of them; write "
                         f"({shape!r},) (at {user_location()})")
    try:
        dims = tuple(shape)
    except TypeError:
        raise GraphError(f"shape {shape!r} is not a sequence of ints (at {user_location()})") \
            from None
    if not all(type(d) is int for d in dims):  # (ints alone, the common case, as they are)
        dims = tuple(as_dim(d, shape) for d in dims)
    if any(isinstance(d, int) and d < 0 for d in dims):
        raise GraphError(f"negative dimension in shape {dims} (at {user_location()})")
    unsure = [d for d in dims if isinstance(d, Dim) and is_known_nonnegative(d) is not True]
    if unsure:
        raise GraphError(f"dimension {unsure[0]} of shape ({', '.join(map(str, dims))}) may "
                         f"be negative (at {user_location()})")
    dtype = as_dtype(dtype)
    if quant is not None and not isinstance(quant, QuantParams):
        raise GraphError(f"quant must be an ir.quant.QuantParams, got {type(quant).__name__} "
                         f"(at {user_location()})")
    try:
        return TensorType(dims, dtype, quant)
    except GraphError as exc:
        raise GraphError(f"{exc} (at {user_location()})") from None
