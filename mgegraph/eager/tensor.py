"""Eager tensors: values that hold an array, made and computed op by op as in NumPy.

Design: a Tensor is a Var of the one eager graph (``eager.dispatch.EAGER``), so every function
of ``mgegraph.functional`` builds it with the same code as a graph value, and the eager graph's
``add_node`` runs each node's CPU kernel at once instead of keeping it. A Tensor's array is
C-contiguous and never written after it is made, except a Parameter's or a state buffer's (which
optimisers and batch norm update in place, as plans do).
"""
from __future__ import annotations

import copy
import itertools
import threading
from dataclasses import dataclass

import numpy as np

from ..device import Device, check_name, get_default_device
from ..dtype import (
    QParams,
    create_qparams,
    get_scale,
    get_zero_point,
    is_quantize,
    quantized_dtype,
    to_quant_params,
)
from ..ir.errors import GraphError, user_location
from ..ir.graph import DEFAULT_NARROWING, Var, _as_array
from ..ir.types import TensorType, as_dtype
from ..ops import indexing
from ..ops.builder import apply
from ..ops.quantize import dequantize, quantize
from .mode import MODE, value_detached, value_read

try:  # a C count the tokens change without running Python code (eager death is cheap)
    from .._kernels.launch import Held, held_bytes
    from . import fastpath  # eager dispatch's C path (Python's operators below)
except ImportError:  # without the CPU build (the reference backend's tests): the same in Python
    fastpath = None

    class Held:
        """``nbytes`` counted as held while this token lives."""

        now = peak = 0
        lock = threading.Lock()

        def __init__(self, nbytes: int):
            self.nbytes = nbytes
            with Held.lock:
                Held.now += nbytes
                Held.peak = max(Held.peak, Held.now)

        def __del__(self):
            with Held.lock:
                Held.now -= self.nbytes

    def held_bytes(reset_peak: bool = False):
        with Held.lock:
            result = (Held.now, Held.peak)
            if reset_peak:
                Held.peak = Held.now
        return result


@dataclass(frozen=True)
class MemoryStats:
    current: int  # bytes held by live tensors (and running eager kernels' workspaces)
    peak: int     # the most held at once since the last reset_peak


def memory_stats(reset_peak: bool = False) -> MemoryStats:
    """Bytes held by live eager tensors now and at the peak (Parameters and optimiser state
    included; a view holds no bytes of its own). ``reset_peak=True`` starts a new peak from
    now, after reading this one.

    >>> mg.memory_stats(reset_peak=True); step(x, y); mg.memory_stats().peak
    """
    return MemoryStats(*held_bytes(reset_peak))


_IDS = itertools.count(1)  # ids never repeat, so a map keyed by one never meets a new tensor
_TYPES: dict[tuple, TensorType] = {}  # one TensorType per (shape, dtype, quant) of an eager value


def type_of(shape: tuple, dtype: np.dtype, quant=None) -> TensorType:
    key = (shape, dtype, quant)
    t = _TYPES.get(key)
    if t is None:
        t = _TYPES[key] = TensorType(shape, dtype, quant)
    return t


FORMATS = ("default", "nchw", "nhwc")  # MegEngine's memory-format tags


class Tensor(Var):
    """An eager value: ``mg.tensor([1., 2.]) * 3`` computes at once (``mg.tensor`` is this
    class). ``data`` is copied; without ``dtype=``, floats become float32 and ints int32 (NumPy
    float64 and int64 arrays too, as in MegEngine; ``dtype="float64"`` keeps them). ``device``
    is MegEngine's: eager values live in host memory, so it may name the CPU ("cpu0", "cpux",
    "xpux") or be None; a GPU runs compiled plans (``mg.compile(device=)``). ``name`` is
    MegEngine's tensor name (``.name``).

    ``.numpy()`` (a copy the caller owns), ``.item()``, ``float()``, ``int()``, ``bool()``,
    ``len()`` and printing read the value; the Python operators, comparisons, indexing and the
    methods of ``Var`` (``reshape``, ``sum``, ``T``...) run ops. ``.grad`` is set by a
    ``GradManager``'s ``backward``. A Tensor cannot be mixed with a graph's ``Var`` in one op.
    """

    # _held: the token counting the bytes of _value while this tensor owns them (None for a
    # view, whose _base owns them, and a pending lazy value); _name, _device and _format:
    # MegEngine's name=, device= and format=, unset (read as "", the default device and
    # "default") on the tensors ops make; _qparams: MegEngine's qparams, made on first read
    __slots__ = ("__weakref__", "_base", "_device", "_format", "_held", "_lazy", "_name",
                 "_qparams", "_value", "grad")

    def __init__(self, data, dtype=None, device=None, is_const=False, no_cache=False,
                 name=None, format="default"):
        # is_const and no_cache are MegEngine's hints to its tracer and constant cache: every
        # eager value here is already both, so they change nothing
        check_eager_device(device)
        if isinstance(data, Tensor):
            _check_rewrap(data, dtype, device)
            dtype, device = data.dtype, device or getattr(data, "_device", None)
            data = data.numpy()
        if dtype is not None and is_quantize(dtype):
            set_array(self, quantized_storage(data, dtype), owns=True,
                      type=type_of(np.shape(data), np.dtype(dtype.str), to_quant_params(dtype)))
        else:
            set_array(self, default_array(data, dtype), owns=True)
        if device is not None:
            self._device = Device(device)
        if name is not None:
            self.name = name
        if format != "default":
            self.format = format

    @property
    def format(self) -> str:
        """MegEngine's memory-format tag: "default", "nchw" or "nhwc" (``amp.convert_tensor_format``
        sets "nhwc"). A tag only: the shape stays the logical (N, C, H, W) and every op computes
        as without it (the CPU kernels pick their own layouts)."""
        return getattr(self, "_format", "default")

    @format.setter
    def format(self, format) -> None:
        if format not in FORMATS:
            raise GraphError(f"Tensor.format must be one of {FORMATS}, got {format!r}")
        self._format = format

    @property
    def name(self):
        """MegEngine's tensor name (``Tensor(x, name="w")``; "" until given)."""
        return getattr(self, "_name", "")

    @name.setter
    def name(self, name):
        self._name = name

    @property
    def qparams(self) -> QParams:
        """MegEngine's quantization parameters of this value (``mgegraph.dtype.QParams``: mode,
        dtype meta, scale, zero point), set by the QAT module or fake quantizer that made it and
        read by the next one (the bias's fake quantization); an empty symmetric one until set.
        The ops that compute with the tensor never read them.

        >>> x.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", mg.tensor(0.05)))
        """
        qparams = getattr(self, "_qparams", None)
        if qparams is None:
            qparams = self._qparams = create_qparams()
        return qparams

    @property
    def device(self) -> Device:
        """The device this tensor was made for (MegEngine's name: "cpu0", "xpux"...): the
        default device unless ``device=`` said; its bytes are in host memory either way."""
        return getattr(self, "_device", None) or get_default_device()

    def to(self, device) -> Tensor:
        """A copy made for ``device`` (a CPU name, or "xpu": eager values live in host memory).

        >>> y = x.to("cpu0")
        """
        check_eager_device(check_name(device, "Tensor.to"))
        moved = apply("copy", (self,))
        moved._device = Device(device)
        return moved

    # -- reading the value ----------------------------------------------------------------
    @property
    def value(self) -> np.ndarray:
        """The array itself, read-only (``numpy()`` gives a copy to write): a tensor's value
        never changes, as a GradManager's tape and ``mg.lazy()`` read it later."""
        array = self._read().view()
        array.flags.writeable = False
        return array

    def _read(self) -> np.ndarray:
        """The array, for Python code that reads the value (a trace is told)."""
        value_read(self)
        return self._array()

    def _array(self) -> np.ndarray:
        """The array, computing it first if it is pending in a lazy graph."""
        if self._value is None:
            self._lazy.materialize()
        return self._value

    def numpy(self) -> np.ndarray:
        """A copy of the value; a quantized tensor's stored integers, of its MegEngine dtype
        (``get_scale(t.numpy().dtype)``), as MegEngine gives them."""
        array = self._read().copy()
        return array if self.type.quant is None else array.view(self.dtype)

    @property
    def dtype(self) -> np.dtype:
        """The dtype; a value quantized per tensor has MegEngine's (``qint8(0.05)``: its
        storage dtype with the scale and zero point in its metadata, ``mgegraph.dtype``)."""
        t = self.type
        return t.dtype if t.quant is None else quantized_dtype(t.dtype, t.quant)

    def astype(self, dtype) -> Tensor:
        """A cast; to a quantized dtype (``qint8(s)``) it quantizes (a quantized value is
        dequantized first), from a quantized value to a float dtype it dequantizes.

        >>> q = x.astype(mgegraph.dtype.qint8(0.05)); y = q.astype("float32")
        """
        quantized = self.type.quant is not None
        if is_quantize(dtype):
            real = dequantize(self) if quantized else self
            if not np.issubdtype(real.dtype, np.floating):
                real = real.astype("float32")
            return quantize(real, get_scale(dtype), get_zero_point(dtype), dtype.str)
        if quantized:
            target = np.dtype(dtype)
            if not np.issubdtype(target, np.floating):
                raise GraphError(f"astype({target}) of a quantized {self.type}: its integers "
                                 f"stand for real numbers; astype a float dtype (dequantize) "
                                 f"or a quantized one (at {user_location()})")
            return dequantize(self, target)
        return super().astype(dtype)

    def __array__(self, dtype=None, copy=None):
        array = self._read()
        return array.astype(dtype) if dtype is not None else array.copy()

    def item(self):
        array = self._read()
        if array.size != 1:
            raise GraphError(f"item(): the tensor has {array.size} elements, not 1 "
                             f"({self.type}, at {user_location()})")
        return array.item()

    def __float__(self): return float(self.item())
    def __int__(self): return int(self.item())
    def __index__(self): return int(self.item())
    def __bool__(self): return bool(self.item())

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        body = np.array2string(self._read(), separator=", ", prefix="Tensor(")
        return f"Tensor({body}, dtype={self.dtype})"

    if fastpath is not None:
        # Python's operators run a cached kernel in C (eager/fastpath.pyx), or call
        # mgegraph.functional's function as Var's do (the first time, a cast, a recorder)
        __add__, __radd__ = fastpath.add, fastpath.radd
        __sub__, __rsub__ = fastpath.sub, fastpath.rsub
        __mul__, __rmul__ = fastpath.mul, fastpath.rmul
        __truediv__, __rtruediv__ = fastpath.truediv, fastpath.rtruediv

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """``np.add(x, y)`` and NumPy's other ufuncs of mgegraph's functions give a Tensor, as
        MegEngine's; any other ufunc or form computes on the arrays, as before."""
        name = _UFUNCS.get(ufunc.__name__, ufunc.__name__)
        if method == "__call__" and not kwargs and name in _UFUNC_FUNCTIONS:
            return getattr(self._F(), name)(*inputs)
        arrays = [np.asarray(v) if isinstance(v, Tensor) else v for v in inputs]
        return getattr(ufunc, method)(*arrays, **kwargs)

    def prod(self, axis=None, keepdims=False):
        return self._F().prod(self, axis, keepdims)

    def __floordiv__(self, o): return self._F().floor_div(self, o)
    def __rfloordiv__(self, o): return self._F().floor_div(o, self)
    def __mod__(self, o): return self._F().mod(self, o)
    def __rmod__(self, o): return self._F().mod(o, self)

    def __getitem__(self, index):
        """NumPy's indexing, advanced forms too: ``x[1, :, [0, 2]]``, ``x[mask]``, ``x[idx]``
        (``ops/indexing.py``)."""
        return indexing.getitem(self, index)

    def __setitem__(self, index, value):
        """``x[index] = value`` as MegEngine's: ``x`` becomes a new value (the old one with
        ``value`` written where ``index`` says), made by ops that GradManagers and traces record
        like any other, so gradients reach the old ``x`` and ``value``. The old value does not
        change: a tape or a view that holds it keeps it. A Parameter is written in place
        instead (plans share its array), as an optimiser's step writes it.

        A GradManager knows an attached tensor by its value: writing into one while it records
        is refused, and one written outside a recording is attached no longer (attach it
        again)."""
        new = indexing.setitem(self, index, value)
        if hasattr(self, "bind_to"):  # a Parameter: its array is the one plans read
            self.value = new.numpy()
            return
        if any(self is p for r in MODE.recorders for p in
               getattr(r, "attached_tensors", tuple)()):
            raise GraphError(f"x[index] = value on a tensor attached to a recording "
                             f"GradManager ({self.type}): its gradient is that of the value it "
                             f"was attached as; write into a copy (y = x * 1; y[index] = "
                             f"value) (at {user_location()})")
        rebind(self, new)

    def __deepcopy__(self, memo) -> Tensor:
        """A tensor owning a copy of the value, with the name, device and format tags and the
        qparams."""
        new = Tensor(self, name=getattr(self, "_name", None), format=self.format)
        if getattr(self, "_device", None) is not None:
            new._device = self._device
        if getattr(self, "_qparams", None) is not None:  # as MegEngine's state keeps them
            new._qparams = copy.deepcopy(self._qparams, memo)
        memo[id(self)] = new
        return new

    def detach(self) -> Tensor:
        """The same value, not recorded by any GradManager (a new tensor sharing the bytes)."""
        detached = wrap_view(self._array(), self)
        value_detached(detached, self)
        return detached

    __hash__ = Var.__hash__

    @property
    def owns_bytes(self) -> bool:
        """Whether the array is this tensor's own (not a view of another's)."""
        return self._held is not None


# NumPy's ufuncs that are mgegraph functions (NumPy's name -> mgegraph's where they differ)
_UFUNCS = {"subtract": "sub", "multiply": "mul", "true_divide": "div", "divide": "div",
           "negative": "neg", "absolute": "abs", "power": "pow", "floor_divide": "floor_div",
           "remainder": "mod"}
_UFUNC_FUNCTIONS = frozenset({
    "add", "sub", "mul", "div", "neg", "abs", "pow", "floor_div", "mod", "equal", "not_equal",
    "less", "less_equal", "greater", "greater_equal", "maximum", "minimum", "exp", "log",
    "sqrt", "square", "sin", "cos", "tanh", "floor", "ceil", "sign"})

# the eager graph every Tensor belongs to (eager.dispatch sets it when it is imported)
EAGER_GRAPH = None


def set_array(t: Tensor, array: np.ndarray, owns: bool, base: Tensor | None = None,
              type: TensorType | None = None) -> None:
    """Make ``t`` hold ``array`` (C-contiguous, of a supported dtype; ``type`` when the caller
    knows it); ``owns``: its bytes are ``t``'s own (counted by memory_stats); ``base``: the
    tensor whose bytes a view reads."""
    t.graph, t.id, t.node, t.index = EAGER_GRAPH, next(_IDS), None, 0
    t.type = type or type_of(array.shape, array.dtype)
    t._value, t._base, t._lazy, t.grad = array, base, None, None
    t._held = Held(array.nbytes) if owns else None


def rebind(t: Tensor, new: Tensor) -> None:
    """Make ``t`` stand for ``new``'s value (its id, array and bytes): MegEngine's in-place
    update of a tensor, which leaves the value ``t`` had to whoever recorded it."""
    t.graph, t.id, t.type, t.node, t.index = new.graph, new.id, new.type, new.node, new.index
    t._value, t._base, t._lazy, t._held = new._value, new._base, new._lazy, new._held
    new._held = None  # the bytes are t's now (new dies without uncounting them)


def wrap(array: np.ndarray, type: TensorType | None = None) -> Tensor:
    """A new Tensor owning ``array`` (just made by a kernel or a copy), of ``type`` if given."""
    t = Tensor.__new__(Tensor)
    set_array(t, array, True, None, type)
    return t


def wrap_view(array: np.ndarray, base: Tensor, type: TensorType | None = None) -> Tensor:
    """A Tensor over ``array``, a view of ``base``'s bytes (kept alive by it); ``type`` when
    the caller knows it (a quantized view's)."""
    t = Tensor.__new__(Tensor)
    set_array(t, array, owns=False, base=base if base._held is not None else base._base,
              type=type)
    return t


def snapshot(t: Tensor) -> Tensor:
    """A copy of ``t``'s value now that keeps ``t``'s id (what a tape recorded ``t`` as)."""
    copy = wrap(t._array().copy())
    copy.id = t.id
    return copy


_INT32 = np.iinfo(np.int32)


def quantized_storage(data, dtype: np.dtype) -> np.ndarray:
    """``data``, the stored integers of a value of quantized ``dtype`` (MegEngine's
    ``Tensor(ints, dtype=qint8(s))``), as a new array of its plain storage dtype."""
    array = np.asarray(data)
    storage = np.dtype(dtype.str)
    if array.dtype.kind not in "iub":
        raise GraphError(f"Tensor(data of {array.dtype}, dtype={dtype}): a quantized dtype reads "
                         f"data as its stored integers; quantize real numbers with "
                         f"Tensor(data).astype(dtype) (at {user_location()})")
    info = np.iinfo(storage)
    if array.size and (array.min() < info.min or array.max() > info.max):
        raise GraphError(f"Tensor(dtype={dtype}): integers from {array.min()} to {array.max()} "
                         f"do not fit {storage} (at {user_location()})")
    return np.ascontiguousarray(array.astype(storage))


def default_array(data, dtype=None) -> np.ndarray:
    """``data`` as a new C-contiguous array: of ``dtype``, else of MegEngine's default dtype
    (float32 for floats, int32 for ints, others as NumPy infers)."""
    array = _as_array(data, None if dtype is None else as_dtype(dtype))
    narrow = DEFAULT_NARROWING.get(array.dtype) if dtype is None else None
    if narrow is None:
        return array
    if narrow.kind == "i" and array.size and (array.min() < _INT32.min or
                                               array.max() > _INT32.max):
        raise GraphError(f"tensor(): integers outside int32's range (from {array.min()} to "
                         f"{array.max()}) without dtype=: ints become int32 by default, as in "
                         f"MegEngine; pass dtype='int64' (at {user_location()})")
    return array.astype(narrow)


# MegEngine's spelling: ``mge.tensor`` is the class, so ``isinstance(x, mge.tensor)`` works.
tensor = Tensor


class RewrapError(GraphError, RuntimeError):
    """``Tensor(t, dtype=, device=)`` asked a Tensor made from Tensor ``t`` to change its dtype
    or device: MegEngine's RuntimeError (cast with ``t.astype``, move with ``t.to``)."""


def _check_rewrap(data: Tensor, dtype, device) -> None:
    if dtype is not None and as_dtype(dtype) != data.dtype:
        raise RewrapError(f"Tensor(a {data.type} Tensor, dtype={as_dtype(dtype)}): a Tensor made "
                          f"from a Tensor keeps its dtype; cast with .astype (at "
                          f"{user_location()})")
    made_for = getattr(data, "_device", None)  # unset: the default, any device
    if device is not None and made_for is not None and Device(device) != made_for:
        raise RewrapError(f"Tensor(a Tensor on {data.device}, device={device!r}): a Tensor made "
                          f"from a Tensor keeps its device; move it with .to (at "
                          f"{user_location()})")


def check_eager_device(device) -> None:
    """Refuses a ``device=`` an eager tensor cannot live on (anything but the CPU's names)."""
    if device is None or (isinstance(device, str) and device.lower().startswith(("cpu", "xpu"))):
        return
    raise GraphError(f"tensor(device={device!r}): eager tensors live in host memory (device "
                     f"'cpu0', 'cpux' or 'xpux'); compile a plan with mg.compile(..., "
                     f"device='cuda') to run on a GPU (at {user_location()})")
