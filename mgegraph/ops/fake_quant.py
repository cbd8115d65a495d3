"""``fake_quant``: quantize and dequantize at once, in floats, with the straight-through gradient
of quantization-aware training (MegEngine's FakeQuant and LSQ ops).

``fake_quant(x, scale, zero_point, qmin, qmax)`` is ``(clip(rint(x / s) + z, qmin, qmax) - z) * s``
computed as the quantize and dequantize kernels compute it: ``x / s`` divided in x's dtype,
rounded half to even, the zero point added, clamped, and one multiplication by ``s``, so its
floats equal ``dequantize(quantize(x, s, z))`` bit for bit. ``scale`` and ``zero_point`` are
tensors (of shape () or (1,) per tensor, (C,) per channel along ``axis``), so a learned step
(LSQ) is an ordinary input. A NaN stays NaN (the loss shows it); a scale that is not positive
and finite fails the run (KernelError: a value is invalid).

Gradients (MegEngine's): x gets the output's gradient where ``rint(x / s) + z`` lies in
``[qmin, qmax]`` and 0 elsewhere (the straight-through estimator). The scale gets none, unless
``lsq_grad_scale`` is given: then LSQ's, ``g * (rint(x / s) - x / s)`` inside the range and
``g * (qmin - z)`` or ``g * (qmax - z)`` outside, times ``lsq_grad_scale`` (LSQ's
``1 / sqrt(N * qmax)``), summed to the scale's shape. The zero point gets none. With ``tqt``
(TQT's learned thresholds, MegEngine's ``TQT_Function``) "inside" is ``x / s + z`` within
``[qmin - 0.5, qmax + 0.5]`` instead, both ends included, and inside the scale's term is
``clip(rint(x / s) + z) - z - x / s``: the two rules differ only where ``x / s + z`` is a tie
just past an odd end (127.5 for qint8, -127.5 for its narrow range), which TQT rounds back in.
MegEngine's megdnn TQT kernels test ``x / s < qmin - 0.5 && x / s > qmax + 0.5``, never true (no
clipping at all); this follows its Python ``TQT_Function`` and its tests' NumPy reference.

Design: an op with a kernel (_kernels/fake_quant.pyx, csrc_cuda/fake_quant.cu, parameter block
kernel_abi/fake_quant.py) rather than a composition: the gradient is a rule about rounding that
no composition of differentiable ops says (rint's gradient is 0), and the rule's mask needs the
same rounded values the forward made. The gradient is made of elementwise ops.

>>> y = fake_quant(x, scale, zero_point, -128, 127)
"""
from __future__ import annotations

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType
from . import reduce
from .builder import apply, graph_of
from .registry import REQUIRED, OpDef, register

__all__ = ["fake_quant"]


def _params_shape(x: TensorType, axis) -> tuple:
    """The shapes a scale or zero point may have for ``x`` quantized along ``axis``."""
    if axis is None:
        return ((), (1,))
    return ((x.shape[axis],),)


def _infer(in_types, attrs):
    if len(in_types) != 3:
        raise ValueError(f"takes (x, scale, zero_point), got {len(in_types)} inputs")
    x, scale, zp = in_types
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"fake_quant takes float32 or float64 values, got {x}")
    if scale.dtype != x.dtype or zp.dtype != x.dtype:
        raise TypeError(f"the scale and zero point must be {x.dtype} as x, got {scale} and {zp}")
    qmin, qmax, axis = attrs["qmin"], attrs["qmax"], attrs["axis"]
    if not (isinstance(qmin, int) and isinstance(qmax, int) and qmin < qmax):
        raise ValueError(f"qmin and qmax must be integers with qmin < qmax, got {qmin}, {qmax}")
    if axis is not None and not (isinstance(axis, int) and 0 <= axis < x.ndim):
        raise ValueError(f"axis {axis!r} is not an axis of x {x.shape}")
    shapes = _params_shape(x, axis)
    if scale.shape not in shapes or zp.shape not in shapes:
        kind = "per tensor" if axis is None else f"per channel along axis {axis}"
        raise ValueError(f"{kind}, the scale and zero point have shape "
                         f"{' or '.join(map(str, shapes))}, got {scale.shape} and {zp.shape}")
    grad_scale = attrs["lsq_grad_scale"]
    if grad_scale is not None and not (isinstance(grad_scale, float) and grad_scale > 0):
        raise ValueError(f"lsq_grad_scale must be None or a positive float, got {grad_scale!r}")
    if not isinstance(attrs["tqt"], bool) or attrs["tqt"] and grad_scale is None:
        raise ValueError(f"tqt must be a bool, and True only with an lsq_grad_scale (the "
                         f"scale's gradient), got tqt={attrs['tqt']!r}, "
                         f"lsq_grad_scale={grad_scale!r}")
    return (TensorType(x.shape, x.dtype),)


def _broadcastable(v, x, axis):
    """A scale or zero point reshaped to broadcast against ``x`` (its channels on ``axis``)."""
    if axis is None:
        return apply("reshape", (v,), shape=())
    shape = tuple(x.shape[axis] if i == axis else 1 for i in range(x.ndim))
    return apply("reshape", (v,), shape=shape)


def _outside(node, scaled, rounded, z):
    """(below, above): where x counts as clipped under the node's rule (module docstring)"""
    const = node.inputs[0].graph.const
    qmin, qmax = (const(np.asarray(node.attr[k], scaled.dtype)) for k in ("qmin", "qmax"))
    if node.attr["tqt"]:
        half = const(np.asarray(0.5, scaled.dtype))
        v = apply("add", (scaled, z))
        return (apply("less", (v, apply("sub", (qmin, half)))),
                apply("greater", (v, apply("add", (qmax, half)))))
    q = apply("add", (rounded, z))
    return apply("less", (q, qmin)), apply("greater", (q, qmax))


def _grad(node, out_grads):
    (x, scale, zp), (g,) = node.inputs, out_grads
    qmin, qmax, axis = node.attr["qmin"], node.attr["qmax"], node.attr["axis"]
    s, z = _broadcastable(scale, x, axis), _broadcastable(zp, x, axis)
    const = x.graph.const
    scaled = apply("div", (x, s))
    rounded = apply("round_half_even", (scaled,))
    below, above = _outside(node, scaled, rounded, z)
    zero = const(np.zeros((), x.dtype))
    dx = apply("where", (below, zero, apply("where", (above, zero, g))))
    if node.attr["lsq_grad_scale"] is None:
        return [dx, None, None]
    low = apply("sub", (const(np.asarray(qmin, x.dtype)), z))
    high = apply("sub", (const(np.asarray(qmax, x.dtype)), z))
    if node.attr["tqt"]:  # a tie past an end is inside, its integer clipped
        rounded = apply("maximum", (apply("minimum", (rounded, high)), low))
    inside = apply("sub", (rounded, scaled))
    step = apply("where", (below, low, apply("where", (above, high, inside))))
    ds = apply("mul", (apply("mul", (g, step)),
                       const(np.asarray(node.attr["lsq_grad_scale"], x.dtype))))
    keep = tuple(i for i in range(x.ndim) if i != axis)
    ds = reduce.sum(ds, keep) if keep else ds
    return [dx, apply("reshape", (ds,), shape=scale.shape), None]


register(OpDef("fake_quant", "elementwise", _infer, grad=_grad, flops_per_element=6.0,
               attrs={"qmin": REQUIRED, "qmax": REQUIRED, "axis": None,
                      "lsq_grad_scale": None, "tqt": False}))


def fake_quant(x, scale, zero_point=0.0, qmin=-128, qmax=127, axis=None, lsq_grad_scale=None,
               tqt=False):
    """``x`` quantized to the integers ``[qmin, qmax]`` with ``scale`` and ``zero_point``
    (numbers or tensors; per channel along ``axis``) and given back as the real numbers they
    stand for; straight-through gradient, and LSQ's for the scale when ``lsq_grad_scale`` is
    given (TQT's edges with ``tqt``).

    >>> y = F.fake_quant(x, 0.05, 0, -128, 127)
    """
    g = graph_of(x, scale, zero_point)
    x = g.lift(x)
    scale, zero_point = (v if hasattr(v, "graph") else g.const(np.asarray(v, x.dtype))
                         for v in (scale, zero_point))
    if axis is not None and -x.ndim <= int(axis) < 0:
        axis = int(axis) + x.ndim
    grad_scale = None if lsq_grad_scale is None else float(lsq_grad_scale)
    return g.add_node("fake_quant", (x, scale, zero_point),
                      {"qmin": int(qmin), "qmax": int(qmax), "axis": axis,
                       "lsq_grad_scale": grad_scale, "tqt": bool(tqt)}).outputs[0]
