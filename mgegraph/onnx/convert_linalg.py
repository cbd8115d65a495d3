"""ONNX ops of linear algebra on small static sizes, as compositions of mgegraph ops: ``DFT``
(opsets 17 and 20) as products with the DFT's cosine and sine matrices, ``Det`` by cofactor
expansion, ``OneHot`` as a comparison with the class positions.

Design: mgegraph has no FFT or LU kernel. A DFT of length n is two (N, n) matrix products per
input part, computed in float64 (a float32 result is rounded once, as from an exact
transform) and cheap at the lengths models use on an axis they know (spectrogram frames); a determinant of an n x n matrix by cofactors costs n! products, so it is
taken up to ``MAX_DET`` and refused above.
"""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from .context import shape_of

MAX_DET = 4  # 4! = 24 products of 4 factors; a 5 x 5 would be 120


def _dft(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        cx.fail(f"input {list(x.shape)}: its last axis must be 1 (real) or 2 (complex)")
    if cx.opset >= 20:
        axis = -2 if len(ins) < 3 or ins[2] is None else cx.ints(ins[2], "axis")[0]
    else:
        axis = int(at.get("axis", 1))
    axis = cx.axis(axis, x.ndim)  # over the input's axes, its last (the parts) excluded
    if axis == x.ndim - 1:
        cx.fail(f"axis {axis} is the axis of the real and imaginary parts, not of the signal")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    given = x.shape[axis]
    if not isinstance(given, (int, np.integer)):
        cx.fail(f"signal length {given}: the DFT matrix is built at import and needs a number")
    length = None if len(ins) < 2 or ins[1] is None else cx.ints(ins[1], "dft_length")[0]
    if length is None:
        length = 2 * (given - 1) if inverse and onesided else given
    if length < 1:
        cx.fail(f"dft_length {length} must be at least 1")
    if onesided and not inverse and x.shape[-1] == 2:
        cx.fail("onesided applies to a real input (last axis 1), got a complex one")
    re, im = _parts(F.astype(x, np.float64) if x.dtype != np.float64 else x)
    re, im = (None if p is None else F.transpose(p, _to_last(x.ndim - 1, axis)) for p in (re, im))
    re, im = _transform(re, im, given, length, inverse, onesided)
    back = _to_last(x.ndim - 1, axis)
    back = tuple(int(i) for i in np.argsort(back))
    parts = [F.transpose(p, back) for p in (re, im) if p is not None]
    y = F.stack(parts, axis=-1)
    return [F.astype(y, x.dtype) if x.dtype != y.dtype else y]


def _parts(x):
    """The real and imaginary parts (None for a real input), the last axis removed."""
    last = (slice(None),) * (x.ndim - 1)
    if x.shape[-1] == 1:
        return F.subscript(x, last + (0,)), None
    return F.subscript(x, last + (0,)), F.subscript(x, last + (1,))


def _to_last(ndim: int, axis: int) -> tuple:
    return tuple(i for i in range(ndim) if i != axis) + (axis,)


def _transform(re, im, given: int, n: int, inverse: bool, onesided: bool):
    """The transform along the last axis: (real, imaginary) of the result, imaginary None
    for an inverse one-sided (real) result."""
    dtype = re.dtype
    if inverse and onesided:  # the Hermitian half: each inner frequency counts twice
        k = np.arange(min(given, n // 2 + 1))
        weight = np.where((k == 0) | (2 * k == n), 1.0, 2.0)[:, None] / n
        cos, sin = _trig(k, n)
        out = F.matmul(_rows(re, len(k)), (weight * cos).astype(dtype))
        if im is not None:
            out = F.sub(out, F.matmul(_rows(im, len(k)), (weight * sin).astype(dtype)))
        return out, None
    t = np.arange(min(given, n))
    cos, sin = _trig(t, n, n // 2 + 1 if onesided else n)
    sign, scale = (1.0, 1.0 / n) if inverse else (-1.0, 1.0)
    cos, sin = (cos * scale).astype(dtype), (sign * sin * scale).astype(dtype)
    # (re + i im)(cos + i sin) over the rows the signal has (the rest are its zero padding)
    re, im = _rows(re, len(t)), None if im is None else _rows(im, len(t))
    out_re, out_im = F.matmul(re, cos), F.matmul(re, sin)
    if im is not None:
        out_re = F.sub(out_re, F.matmul(im, sin))
        out_im = F.add(out_im, F.matmul(im, cos))
    return out_re, out_im


def _trig(rows: np.ndarray, n: int, cols: int | None = None):
    """cos and sin of 2 pi r c / n over the given rows and ``cols`` columns (n by default),
    the product reduced mod n first so that long transforms keep their angles exact."""
    angle = 2 * np.pi * (np.outer(rows, np.arange(n if cols is None else cols)) % n) / n
    return np.cos(angle), np.sin(angle)


def _rows(x, count: int):
    """The first ``count`` positions of the last axis (a longer signal is truncated)."""
    if x.shape[-1] == count:
        return x
    return F.subscript(x, (slice(None),) * (x.ndim - 1) + (slice(0, count),))


def _det(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        cx.fail(f"input {list(x.shape)}: Det takes (..., n, n) square matrices")
    n = x.shape[-1]
    if not isinstance(n, (int, np.integer)):
        cx.fail(f"matrix size {n}: the cofactor expansion needs a number")
    if n > MAX_DET:
        cx.fail(f"a {n} x {n} determinant: mgegraph expands it by cofactors, up to "
                f"{MAX_DET} x {MAX_DET} (no LU kernel)")
    lead = (slice(None),) * (x.ndim - 2)
    entry = {(i, j): F.subscript(x, lead + (i, j)) for i in range(n) for j in range(n)}
    return [_cofactors(entry, list(range(n)), list(range(n)))]


def _cofactors(entry: dict, rows: list, cols: list):
    """The determinant of the minor ``rows`` x ``cols``, expanded along its first row."""
    if len(rows) == 1:
        return entry[rows[0], cols[0]]
    total = None
    for at, col in enumerate(cols):
        term = F.mul(entry[rows[0], col], _cofactors(entry, rows[1:], cols[:at] + cols[at + 1:]))
        total = term if total is None else (F.sub if at % 2 else F.add)(total, term)
    return total


def _one_hot(cx, ins, at):
    indices, values = cx.var(ins[0]), ins[2]
    depth = cx.known(ins[1], "depth")
    if depth.size != 1:
        cx.fail(f"depth of shape {list(depth.shape)}: it must hold one number")
    depth = math.floor(float(depth.reshape(-1)[0]))
    if depth < 1:
        cx.fail(f"depth {depth} must be at least 1")
    if tuple(shape_of(values)) != (2,):
        cx.fail(f"values of shape {list(shape_of(values))}: it must be [off_value, on_value]")
    axis = cx.axis(at.get("axis", -1), indices.ndim + 1)
    # a negative index counts from the end; one out of range stays unmatched (all off)
    wrapped = F.where(F.less(indices, 0), F.add(indices, np.asarray(depth, indices.dtype)),
                      indices)
    positions = np.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
    hit = F.equal(F.expand_dims(wrapped, axis), positions.astype(indices.dtype))
    values = cx.var(values)
    return [F.where(hit, F.subscript(values, 1), F.subscript(values, 0))]


# ONNX op -> converter
CONVERTERS = {"DFT": _dft, "Det": _det, "OneHot": _one_hot}
