"""MegEngine's quantized dtypes (``megengine.core.tensor.dtype``): NumPy dtypes carrying their
scale and zero point in the metadata key "mgb_dtype".

``qint8(0.05)`` is an ``np.dtype`` of int8 storage whose values stand for ``0.05 * q``;
``quint8(0.1, 128)`` of uint8 storage standing for ``0.1 * (q - 128)``; ``qint32(s)`` of int32
(a bias in units of input scale times weight scale). ``get_scale``, ``get_zero_point`` and
``is_quantize`` read them; ``convert_to_qint8`` and friends quantize NumPy arrays as the
quantize op does (ties to even, saturated) and ``convert_from_*`` give the real numbers back.

Design: NumPy's metadata is invisible to ``==`` and ``hash`` (``qint8(0.1) == qint8(0.2)``), so
the IR cannot use these dtypes: ``to_quant_params`` turns one into ``ir.quant.QuantParams`` (a
``TensorType``'s ``quant``) at the Tensor's boundary and ``quantized_dtype`` turns a type back.
MegEngine's 4-, 2- and 1-bit dtypes are left out (no ``qint4(scale)``): their values would need
sub-byte storage and kernels, which mgegraph has not; the 4-bit metas stay for fake quantization
in training (``quantization.ema_lowbit_fakequant_qconfig``), without a storage form.

``QParams`` (MegEngine's ``quantization.utils.QParams``, re-exported there) is what a value's
quantization is in training: a mode, a dtype meta, and the scale and zero point as tensors; an
eager tensor carries one (``Tensor.qparams``), so it lives here, below eager mode.

>>> dt = qint8(0.05); get_scale(dt)
0.05
"""
from __future__ import annotations

from collections import namedtuple
from enum import Enum

import numpy as np

from .ir.errors import GraphError
from .ir.quant import QuantParams, per_tensor

__all__ = ["LSQParams", "QParams", "QuantDtypeMeta", "QuantMode", "convert_from_qint8",
           "convert_from_qint32", "convert_from_quint8", "convert_to_qint8", "convert_to_qint32",
           "convert_to_quint8", "create_quantized_dtype", "get_dtype_bit", "get_scale",
           "get_zero_point", "is_differentible_dtype", "is_lowbit", "is_quantize", "qint8",
           "qint32", "quant_dtype_meta", "quint8"]


class QuantDtypeMeta(namedtuple("QuantDtypeMeta",
                                ["name", "cname", "np_dtype_str", "qmin", "qmax",
                                 "is_unsigned"])):
    """What one quantized dtype is: its name, MegEngine's C name (the metadata's "name"), the
    storage dtype and the integer range. A singleton per dtype (copies give itself back), so
    ``qparams.dtype_meta is fake_quantizer.dtype`` holds after ``deepcopy``."""

    def __new__(cls, name, cname, np_dtype_str, qmin, qmax, is_unsigned=None):
        if is_unsigned is None:
            is_unsigned = np_dtype_str.startswith("u")
        return super().__new__(cls, name, cname, np_dtype_str, qmin, qmax, is_unsigned)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


_builtin_quant_dtypes = {
    "quint8": QuantDtypeMeta("quint8", "Quantized8Asymm", "uint8", 0, 255),
    "qint8": QuantDtypeMeta("qint8", "QuantizedS8", "int8", -128, 127),
    # the symmetric range MegEngine's weights may use: int8 storage, -127 never made
    "qint8_narrow": QuantDtypeMeta("qint8_narrow", "QuantizedS8", "int8", -127, 127),
    # 7-bit weights in int8 storage (ONNX Runtime's and PyTorch's reduce_range): every pair of
    # them sums within vpmaddubsw's int16, so AVX2 without VNNI runs the int8 GEMM's faster tile
    # (_kernels/qgemm.h's qg_pairs_fit proves it from the packed bytes)
    "qint7": QuantDtypeMeta("qint7", "QuantizedS8", "int8", -64, 63),
    "qint7_narrow": QuantDtypeMeta("qint7_narrow", "QuantizedS8", "int8", -63, 63),
    "qint32": QuantDtypeMeta("qint32", "QuantizedS32", "int32", -(2 ** 31), 2 ** 31 - 1),
    # fake quantization only (quantization-aware training to 4 bits): no storage form
    "quint4": QuantDtypeMeta("quint4", None, "uint8", 0, 15),
    "qint4": QuantDtypeMeta("qint4", None, "int8", -8, 7),
}
# ranges inside int8 storage: a stored dtype reads back as qint8
_NARROWED = {"qint8_narrow", "qint7", "qint7_narrow"}
_BY_CNAME = {m.cname: m for m in _builtin_quant_dtypes.values()
             if m.cname is not None and m.name not in _NARROWED}


def _metadata(dtype) -> dict | None:
    meta = getattr(dtype, "metadata", None)
    return None if meta is None else meta.get("mgb_dtype")


def is_quantize(dtype) -> bool:
    """Whether ``dtype`` is one of these quantized dtypes (carries "mgb_dtype" metadata)."""
    return _metadata(dtype) is not None


def is_lowbit(dtype) -> bool:
    """Whether ``dtype`` is a sub-byte type: never here (no 1-, 2- or 4-bit storage)."""
    return False


def is_differentible_dtype(dtype) -> bool:
    return dtype in (np.float32, np.float16)


def get_dtype_bit(dtype_name: str) -> int:
    """Bits of one value of the dtype named ``dtype_name`` ("qint8": 8, "bool": 1)."""
    if dtype_name == "bool":
        return 1
    digits = "".join(c if c.isdigit() else " " for c in dtype_name).split()
    if len(digits) != 1:
        raise ValueError(f"cannot tell the bits of dtype {dtype_name!r}")
    return int(digits[0])


def _require_quantized(dtype, what: str) -> dict:
    meta = _metadata(dtype)
    if meta is None:
        raise ValueError(f"{what}: {dtype!r} is not a quantized dtype (make one with qint8, "
                         f"quint8 or qint32)")
    return meta


def get_scale(dtype) -> float:
    """The scale of quantized dtype ``dtype``."""
    return float(_require_quantized(dtype, "get_scale")["scale"])


def get_zero_point(dtype) -> int:
    """The zero point of quantized dtype ``dtype`` (0 for the symmetric ones)."""
    return int(_require_quantized(dtype, "get_zero_point").get("zero_point", 0))


def dtype_meta(dtype) -> QuantDtypeMeta:
    """The ``QuantDtypeMeta`` of quantized dtype ``dtype``."""
    return _BY_CNAME[_require_quantized(dtype, "dtype_meta")["name"]]


def create_quantized_dtype(meta: QuantDtypeMeta, scale: float, zp) -> np.dtype:
    """The NumPy dtype of ``meta`` with ``scale`` (and ``zp`` for an unsigned type; a signed
    type is symmetric and takes None)."""
    if meta.cname is None:
        raise ValueError(f"dtype {meta.name} has no storage form")
    scale = float(scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"{meta.name}: the scale must be positive and finite, got {scale}")
    fields = {"name": meta.cname, "scale": scale}
    if meta.is_unsigned:
        if zp is None or int(zp) != zp:
            raise ValueError(f"{meta.name}: the zero point must be an integer, got {zp!r}")
        if not meta.qmin <= zp <= meta.qmax:
            raise ValueError(f"zero_point should be within [{meta.qmin}, {meta.qmax}] for "
                             f"{meta.name}, got {zp}")
        fields["zero_point"] = int(zp)
    elif zp is not None:
        raise ValueError(f"'{meta.name}' only supports symmetric quantization, zero_point "
                         f"should be None, but actually got '{zp}'")
    return np.dtype(meta.np_dtype_str, metadata={"mgb_dtype": fields})


def quint8(scale: float, zero_point: int) -> np.dtype:
    """uint8 values q standing for ``scale * (q - zero_point)``."""
    return create_quantized_dtype(_builtin_quant_dtypes["quint8"], scale, zero_point)


def qint8(scale: float) -> np.dtype:
    """int8 values q standing for ``scale * q``."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint8"], scale, None)


def qint32(scale: float) -> np.dtype:
    """int32 values q standing for ``scale * q`` (a bias of input scale times weight scale)."""
    return create_quantized_dtype(_builtin_quant_dtypes["qint32"], scale, None)


def to_quant_params(dtype) -> QuantParams:
    """The IR's parameters of quantized dtype ``dtype`` (``TensorType.quant``)."""
    return per_tensor(get_scale(dtype), get_zero_point(dtype))


def quantized_dtype(storage: np.dtype, quant: QuantParams) -> np.dtype:
    """MegEngine's dtype of a per-tensor quantized value stored as ``storage``; a per-channel
    value has none (MegEngine's dtypes carry one scale) and keeps its storage dtype."""
    if quant.per_channel:
        return np.dtype(storage)
    meta = {np.dtype(np.int8): "qint8", np.dtype(np.uint8): "quint8",
            np.dtype(np.int32): "qint32"}[np.dtype(storage)]
    meta = _builtin_quant_dtypes[meta]
    return create_quantized_dtype(meta, quant.scale,
                                  quant.zero_point if meta.is_unsigned else None)


def _convert_to(arr, dtype, name: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr should be a NumPy array")  # noqa: TRY004  (MegEngine's type)
    meta = _builtin_quant_dtypes[name]
    if _require_quantized(dtype, f"convert_to_{name}")["name"] != meta.cname:
        raise ValueError(f"dtype parameter should be a {name} dtype, got {dtype!r}")
    # as the quantize op: divided in the array's float type by the scale rounded to it
    floats = arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float32)
    q = np.rint(floats / floats.dtype.type(get_scale(dtype))) + get_zero_point(dtype)
    if np.isnan(q).any():
        raise ValueError(f"convert_to_{name}: NaN has no quantized value")
    # saturated in float64, where int32's bounds are exact
    return np.clip(q.astype(np.float64), meta.qmin, meta.qmax).astype(dtype)


def _convert_from(arr, name: str) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        raise ValueError("arr should be a NumPy array")  # noqa: TRY004  (MegEngine's type)
    meta = _builtin_quant_dtypes[name]
    if _metadata(arr.dtype) is None or _metadata(arr.dtype)["name"] != meta.cname:
        raise ValueError(f"arr's dtype should be a {name} dtype, got {arr.dtype!r}")
    centred = arr.astype(np.float32) - np.float32(get_zero_point(arr.dtype))
    return centred * np.float32(get_scale(arr.dtype))


def convert_to_qint8(arr: np.ndarray, q: np.dtype) -> np.ndarray:
    """Float array ``arr`` quantized to qint8 dtype ``q``."""
    return _convert_to(arr, q, "qint8")


def convert_from_qint8(arr: np.ndarray) -> np.ndarray:
    """The float32 values qint8 array ``arr`` stands for."""
    return _convert_from(arr, "qint8")


def convert_to_quint8(arr: np.ndarray, q: np.dtype) -> np.ndarray:
    """Float array ``arr`` quantized to quint8 dtype ``q``."""
    return _convert_to(arr, q, "quint8")


def convert_from_quint8(arr: np.ndarray) -> np.ndarray:
    """The float32 values quint8 array ``arr`` stands for."""
    return _convert_from(arr, "quint8")


def convert_to_qint32(arr: np.ndarray, q: np.dtype) -> np.ndarray:
    """Float array ``arr`` quantized to qint32 dtype ``q``."""
    return _convert_to(arr, q, "qint32")


def convert_from_qint32(arr: np.ndarray) -> np.ndarray:
    """The float32 values qint32 array ``arr`` stands for."""
    return _convert_from(arr, "qint32")


# -- the parameters of a value's quantization in training ---------------------------------------
class QuantMode(Enum):
    """Symmetric (zero point 0) or asymmetric quantization; MegEngine's spelling, with the
    correct one as an alias."""

    SYMMERTIC = 1
    ASYMMERTIC = 2
    SYMMETRIC = 1  # noqa: PIE796  (an alias: the same member)
    ASYMMETRIC = 2  # noqa: PIE796


def quant_dtype_meta(dtype) -> QuantDtypeMeta:
    """The ``QuantDtypeMeta`` a name ("qint8", "quint8", "qint8_narrow", ...) or meta gives."""
    if isinstance(dtype, QuantDtypeMeta):
        return dtype
    if dtype not in _builtin_quant_dtypes:
        raise ValueError(f"unknown dtype: {dtype}, only support {sorted(_builtin_quant_dtypes)}")
    return _builtin_quant_dtypes[dtype]


class QParams:
    """A quantization's mode, dtype meta, scale and zero point (tensors or graph values; the
    zero point None when symmetric)."""

    __slots__ = ("dtype_meta", "mode", "scale", "zero_point")

    def __init__(self, mode, dtype_meta, scale, zero_point):
        self.mode, self.dtype_meta = mode, dtype_meta
        self.scale, self.zero_point = scale, zero_point

    def update(self, qparams: QParams) -> None:
        for key in self.__slots__:
            setattr(self, key, getattr(qparams, key))

    def __eq__(self, other):
        """Equal modes, dtypes and values (tensors compared by value)."""
        return type(self) is type(other) and all(
            _same(getattr(self, k), getattr(other, k)) for k in self.__slots__)

    def __repr__(self):
        return "QParams(" + ", ".join(f"{k}={getattr(self, k)}" for k in self.__slots__) + ")"


def _same(a, b) -> bool:
    if a is None or b is None or isinstance(a, (Enum, QuantDtypeMeta)):
        return a is b or a == b
    return np.array_equal(np.asarray(a), np.asarray(b))


class LSQParams(QParams):
    """LSQ's parameters: a ``grad_scale`` beside the others."""

    __slots__ = ("dtype_meta", "grad_scale", "mode", "scale", "zero_point")

    def __init__(self, mode, dtype_meta, scale, zero_point, grad_scale):
        super().__init__(mode, dtype_meta, scale, zero_point)
        self.grad_scale = grad_scale


def create_qparams(mode: QuantMode = QuantMode.SYMMERTIC, dtype_meta=None, scale=None,
                   zero_point=None) -> QParams:
    """``QParams`` of ``mode`` and ``dtype_meta`` (a name or a meta)."""
    if isinstance(dtype_meta, str):
        dtype_meta = quant_dtype_meta(dtype_meta)
    if mode is not None and not isinstance(mode, QuantMode):
        raise GraphError(f"create_qparams: mode must be a QuantMode, got {mode!r}")
    return QParams(mode, dtype_meta, scale, zero_point)
