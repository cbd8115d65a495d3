"""The ONNX converters of the neural-network ops: MatMul and Gemm, Conv, pooling (windows,
global), BatchNormalization, LayerNormalization, Softmax and LogSoftmax; their table is
``CONVERTERS`` (ONNX op -> converter, see ``context`` for the signature), merged with the other
families' in ``converters``.

Design: mgegraph convolves and pools in 2-D; a 1-D input gets a trailing width of 1. The
pooling ops take ONNX's padding (``auto_pad``, asymmetric ``pads``), ``ceil_mode``,
``dilations`` and ``count_include_pad`` as they are, and MaxPool's Indices output is
max_pool2d's own made flat; 3-D pooling, which no kernel computes, is strided window slices over
the explicitly padded input and a constant of window counts. The attributes are checked first
as ONNX Runtime checks them.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import onnx

from .. import functional as F
from ..functional.norms import lrn
from ..ops.builder import apply
from ..ops.conv_api import transposed, transposed3d
from .context import shape_of


def _matmul(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    if a.ndim == 1 and b.ndim == 1:
        return [F.reshape(F.matmul(F.reshape(a, (1, a.shape[0])), F.reshape(b, (b.shape[0], 1))),
                          ())]
    if a.ndim == 1:
        out = F.matmul(F.reshape(a, (1, a.shape[0])), b)
        return [F.reshape(out, out.shape[:-2] + out.shape[-1:])]
    if b.ndim == 1:
        out = F.matmul(a, F.reshape(b, (b.shape[0], 1)))
        return [F.reshape(out, out.shape[:-1])]
    return [F.matmul(a, b)]


def _gemm(cx, ins, at):
    a, b = cx.var(ins[0]), cx.var(ins[1])
    c = ins[2] if len(ins) > 2 else None
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    ta, tb = at.get("transA", 0), at.get("transB", 0)
    if ta:
        a = F.transpose(a, (1, 0))
    n = b.shape[0] if tb else b.shape[1]
    if alpha == 1.0 and beta == 1.0 and (c is None or shape_of(c) == (n,)):
        # nn.Linear's form: one linear node, as mgegraph writes it
        weight = b if tb else F.transpose(b, (1, 0))
        return [F.linear(a, weight, None if c is None else cx.var(c))]
    out = F.matmul(a, b, transpose_b=bool(tb))
    if alpha != 1.0:
        out = F.mul(out, cx.g.const(np.asarray(alpha, out.dtype)))
    if c is not None:
        cv = cx.var(c)
        out = F.add(out, cv if beta == 1.0 else F.mul(cv, cx.g.const(np.asarray(beta, cv.dtype))))
    return [out]


def _pad_mode(at) -> str:
    mode = at.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return mode or "NOTSET"


def _check_window(cx, at, nd: int, kernel=None) -> None:
    """A convolution's or pooling's attributes as ONNX Runtime checks them: ``auto_pad`` or
    ``pads``, not both; ``kernel_shape`` equal to the weight's (``kernel``) where there is one;
    one stride, dilation and kernel dim per spatial axis and two pads; windows of at least 1."""
    mode = _pad_mode(at)
    if mode not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        cx.fail(f"auto_pad {mode!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    if mode != "NOTSET" and "pads" in at:
        cx.fail(f"auto_pad={mode} and pads {list(at['pads'])} together (ONNX allows one)")
    given = at.get("kernel_shape")
    if kernel is None and given is None:
        cx.fail("kernel_shape is required")
    if kernel is not None and given is not None and list(given) != list(kernel):
        cx.fail(f"kernel_shape {list(given)} contradicts the weight's spatial shape "
                f"{list(kernel)}")
    for name, count in (("kernel_shape", nd), ("strides", nd), ("dilations", nd),
                        ("pads", 2 * nd)):
        if name in at and len(at[name]) != count:
            cx.fail(f"{name} {list(at[name])} has {len(at[name])} values for {nd} spatial axes "
                    f"(ONNX needs {count})")
    for name in ("kernel_shape", "strides", "dilations"):
        if any(v < 1 for v in at.get(name, ())):
            cx.fail(f"{name} {list(at[name])} has a value below 1")
    if any(p < 0 for p in at.get("pads", ())):
        cx.fail(f"pads {list(at['pads'])} has a negative value")


def _auto_pad(cx, at, in_hw, kernel, strides, dilations):
    """ONNX pads as ((begin_h, end_h), (begin_w, end_w))."""
    n = len(in_hw)
    mode = _pad_mode(at)
    if mode == "NOTSET":
        pads = list(at.get("pads", [0] * (2 * n)))
        return [(pads[i], pads[i + n]) for i in range(n)]
    if mode == "VALID":
        return [(0, 0)] * n
    out = []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        out.append((small, big) if mode == "SAME_UPPER" else (big, small))
    return out


def _spatial(cx, x, what):
    """x as NCHW: 1-D inputs get a trailing width of 1; 3-D and beyond are refused (pooling
    takes 3-D through its window slices, ``_pool_windows``)."""
    if x.ndim == 3:
        return F.reshape(x, shape_of(x) + (1,)), True
    if x.ndim != 4:
        cx.fail(f"{what} on a {x.ndim}-D input: mgegraph convolves and pools 2-D (and 1-D) only")
    return x, False


def _as2(values, one_d, fill):
    values = list(values)
    return values + [fill] if one_d else values


def _conv(cx, ins, at):
    x, one_d = _spatial(cx, cx.var(ins[0]), "Conv")
    w = cx.var(ins[1])
    if w.ndim != x.ndim - one_d:
        cx.fail(f"a weight of shape {list(shape_of(w))} for an input of shape "
                f"{list(shape_of(x))[:x.ndim - one_d]} (ONNX needs the same rank)")
    _check_window(cx, at, 2 - one_d, shape_of(w)[2:])
    if one_d:
        w = F.reshape(w, shape_of(w) + (1,))
    kernel = list(shape_of(w)[2:])
    strides = _as2(at.get("strides", [1] * (2 - one_d)), one_d, 1)
    dilations = _as2(at.get("dilations", [1] * (2 - one_d)), one_d, 1)
    pads = _auto_pad(cx, at, shape_of(x)[2 - 0:][:2 - one_d], kernel[:2 - one_d],
                     strides[:2 - one_d], dilations[:2 - one_d])
    if one_d:
        pads.append((0, 0))
    bias = cx.var(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    if all(b == e for b, e in pads):
        padding = tuple(b for b, _ in pads)
    else:
        x = F.pad(x, ((0, 0), (0, 0)) + tuple(tuple(p) for p in pads))
        padding = (0, 0)
    y = F.conv2d(x, w, bias, stride=tuple(strides), padding=padding, dilation=tuple(dilations),
                 groups=at.get("group", 1))
    return [F.reshape(y, shape_of(y)[:3]) if one_d else y]


def _pool_geometry(cx, at, in_hw, kernel, strides, dilations):
    """ONNX's pads per axis and the extra end padding ``ceil_mode`` needs, and the output
    size per axis."""
    pads = _auto_pad(cx, at, in_hw, kernel, strides, dilations)
    extra, sizes = [], []
    for (b, e), size, k, s, d in zip(pads, in_hw, kernel, strides, dilations):
        span = (k - 1) * d + 1
        if at.get("ceil_mode", 0):
            out = math.ceil((size + b + e - span) / s) + 1
            if (out - 1) * s >= size + b:  # a window that starts in the end padding is dropped
                out -= 1
        else:
            out = (size + b + e - span) // s + 1
        extra.append(max((out - 1) * s + span - (size + b + e), 0))
        sizes.append(out)
    return pads, extra, sizes


def _window_counts(masks, kernel, strides, dilations, sizes):
    """How many cells of each window the 0/1 mask of each axis counts, as an array of the
    output's spatial shape."""
    per_axis = [np.array([mask[o * s:o * s + (k - 1) * d + 1:d].sum() for o in range(n)],
                         np.float64)
                for mask, k, s, d, n in zip(masks, kernel, strides, dilations, sizes)]
    return functools.reduce(np.multiply.outer, per_axis)


def _dilated_windows(x, kernel, strides, dilations, sizes):
    """The strided slices of a padded input, one per window offset (kh*kw of them in 2-D):
    pooling with dilation, or in 3-D, as elementwise max/add over them."""
    for offsets in itertools.product(*(range(k) for k in kernel)):
        yield F.subscript(x, (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offsets, dilations, sizes, strides)))


def _fold_windows(combine, windows):
    out = next(windows)
    for w in windows:
        out = combine(out, w)
    return out


def _pool(cx, ins, at):
    op = cx.node.op_type
    x = cx.var(ins[0])
    if len(cx.node.output) > 1 and cx.node.output[1]:
        return _max_pool_with_indices(cx, x, at)
    if x.ndim == 5:
        return [_pool_windows(cx, x, op, at)]
    x, one_d = _spatial(cx, x, op)
    window = _window_args(cx, x, at, one_d)
    if op == "MaxPool":
        y = F.max_pool2d(x, *window)
    elif op == "LpPool":
        kernel, strides, pads, dilations, ceil = window
        y = F.lp_pool2d(x, at.get("p", 2), kernel, strides, ceil, padding=pads,
                        dilation=dilations)
    else:
        kernel, strides, pads, dilations, ceil = window
        y = F.avg_pool2d(x, kernel, strides, pads, ceil_mode=ceil, dilation=dilations,
                         count_include_pad=bool(at.get("count_include_pad", 0)))
    return [F.reshape(y, shape_of(y)[:3]) if one_d else y]


def _window_args(cx, x, at, one_d: bool):
    """(kernel, strides, ((top, bottom), (left, right)), dilations, ceil_mode) of a 2-D (or 1-D,
    as a trailing width of 1) pooling node, for the pooling functions."""
    nd = 2 - one_d
    _check_pool(cx, at, nd)
    kernel = _as2(at["kernel_shape"], one_d, 1)
    strides = _as2(at.get("strides", [1] * nd), one_d, 1)
    dilations = _as2(at.get("dilations", [1] * nd), one_d, 1)
    pads = _auto_pad(cx, at, shape_of(x)[2:2 + nd], kernel[:nd], strides[:nd], dilations[:nd])
    if one_d:
        pads.append((0, 0))
    return (tuple(kernel), tuple(strides), tuple(tuple(p) for p in pads), tuple(dilations),
            bool(at.get("ceil_mode", 0)))


def _check_pool(cx, at, nd: int) -> None:
    _check_window(cx, at, nd)
    if any(p >= k for p, k in zip(at.get("pads", ()), list(at["kernel_shape"]) * 2)):
        cx.fail(f"pads {list(at['pads'])} not smaller than kernel_shape "
                f"{list(at['kernel_shape'])} (a window of padding only; ONNX Runtime refuses it)")


def _average(cx, sums, area, include: bool, geometry, in_sizes, window):
    """``sums`` (of windows, or their means over ``area`` cells) divided by the number of
    cells ONNX counts in each window: padding counts only with ``count_include_pad``, the
    ceil-mode overhang never."""
    pads, extra, sizes = geometry
    kernel, strides, dilations = window
    pad_cell = 1 if include else 0
    masks = [np.array([pad_cell] * b + [1] * size + [pad_cell] * e + [0] * x_)
             for (b, e), x_, size in zip(pads, extra, in_sizes)]
    counts = _window_counts(masks, kernel, strides, dilations, sizes)
    return F.mul(sums, cx.g.const((area / np.maximum(counts, 1)).astype(sums.dtype)))


def _max_pool_with_indices(cx, x, at):
    """MaxPool and its Indices output: over the window slices, the first maximum's flat index
    into the input (row-major, or column-major over H and W with ``storage_order=1``), as
    ONNX Runtime picks it (a later cell replaces the maximum only when strictly greater)."""
    nd = x.ndim - 2
    if nd < 1 or any(not isinstance(d, int) for d in shape_of(x)):
        cx.fail(f"the Indices output of a {x.ndim}-D input of shape {list(shape_of(x))} (it "
                "needs a 3-D to 5-D input of fixed shape)")
    order = at.get("storage_order", 0)
    if order and nd != 2:
        cx.fail(f"storage_order=1 on a {nd}-D pooling (ONNX defines it for 2-D)")
    if nd < 3:
        return _max_pool_with_plane_indices(cx, x, at, order)
    _check_pool(cx, at, nd)
    kernel = list(at["kernel_shape"])
    strides, dilations = list(at.get("strides", [1] * nd)), list(at.get("dilations", [1] * nd))
    in_sizes = shape_of(x)[2:]
    pads, extra, sizes = _pool_geometry(cx, at, in_sizes, kernel, strides, dilations)
    full = ((0, 0), (0, 0)) + tuple((b, e + x_) for (b, e), x_ in zip(pads, extra))
    axes = range(nd) if not order else reversed(range(nd))
    step, stride = {}, 1
    for a in reversed(list(axes)):  # the flat index's stride of each spatial axis
        step[a], stride = stride, stride * in_sizes[a]
    windows = _dilated_windows(F.pad(x, full, constant_value=-np.inf), kernel, strides,
                               dilations, sizes)
    y = indices = None
    for offsets, w in zip(itertools.product(*(range(k) for k in kernel)), windows):
        grid = np.zeros(sizes, np.int64)
        for a, (o, (b, _)) in enumerate(zip(offsets, pads)):
            coord = np.arange(sizes[a]) * strides[a] + o * dilations[a] - b
            grid += (coord * step[a]).reshape([-1 if i == a else 1 for i in range(nd)])
        here = cx.g.const(grid.reshape((1, 1) + tuple(sizes)))
        if y is None:
            y, indices = w, here
        else:
            indices = F.where(F.greater(w, y), here, indices)
            y = F.maximum(y, w)
    n, c = shape_of(x)[:2]
    base = np.arange(n * c, dtype=np.int64).reshape((n, c) + (1,) * nd) * stride
    return [y, F.add(F.broadcast_to(indices, shape_of(y)), cx.g.const(base))]


def _max_pool_with_plane_indices(cx, x, at, order):
    """1-D and 2-D MaxPool with its Indices: max_pool2d's own (the cell in its plane, the first
    maximum), made flat over the whole input, column-major over H and W with storage_order=1."""
    shape = shape_of(x)
    x4, one_d = _spatial(cx, x, "MaxPool")
    y, where = F.max_pool2d(x4, *_window_args(cx, x4, at, one_d), return_indices=True)
    h, w = shape_of(x4)[2:]
    if order:  # h * W + w -> w * H + h
        cells = cx.g.const(np.int64(w))
        where = F.add(F.mul(F.mod(where, cells), cx.g.const(np.int64(h))),
                      F.floor_div(where, cells))
    planes = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1, 1)) * h * w
    where = F.add(where, cx.g.const(planes))
    if one_d:
        return [F.reshape(y, shape_of(y)[:3]), F.reshape(where, shape_of(where)[:3])]
    return [y, where]


def _pool_windows(cx, x, op, at):
    """3-D pooling (a 5-D input), which mgegraph has no kernel for, as the elementwise max or
    sum of its window's strided slices (``kd*kh*kw`` of them) over the padded input (of
    |x|^p for LpPool, whose padding adds nothing)."""
    _check_pool(cx, at, 3)
    kernel = list(at["kernel_shape"])
    strides, dilations = list(at.get("strides", [1] * 3)), list(at.get("dilations", [1] * 3))
    pads, extra, sizes = _pool_geometry(cx, at, shape_of(x)[2:], kernel, strides, dilations)
    full = ((0, 0), (0, 0)) + tuple((b, e + x_) for (b, e), x_ in zip(pads, extra))
    if op == "MaxPool":
        return _fold_windows(F.maximum, _dilated_windows(
            F.pad(x, full, constant_value=-np.inf), kernel, strides, dilations, sizes))
    if op == "LpPool":
        p = float(at.get("p", 2))
        if p <= 0:
            cx.fail(f"p={p} (the norm needs p > 0)")
        powered = F.pow(F.abs(x), p)
        return F.pow(_fold_windows(F.add, _dilated_windows(F.pad(powered, full), kernel, strides,
                                                           dilations, sizes)), 1.0 / p)
    sums = _fold_windows(F.add, _dilated_windows(F.pad(x, full), kernel, strides, dilations,
                                                 sizes))
    return _average(cx, sums, 1, bool(at.get("count_include_pad", 0)), (pads, extra, sizes),
                    shape_of(x)[2:], (kernel, strides, dilations))


def _max_unpool(cx, ins, at):
    """MaxUnpool: each value of X put at the flat index I names in a zero tensor of the
    unpooled shape the window attributes give (MaxPool's Indices index so); a larger
    ``output_shape`` pads that with zeros at the end, as ONNX's reference does (ONNX Runtime
    instead reads I as indices into ``output_shape``)."""
    x, where = cx.var(ins[0]), cx.var(ins[1])
    if x.ndim != 4 or any(not isinstance(d, int) for d in shape_of(x)):
        cx.fail(f"an input of shape {list(shape_of(x))} (mgegraph unpools 4-D inputs of fixed "
                "shape)")
    if shape_of(where) != shape_of(x):
        cx.fail(f"indices of shape {list(shape_of(where))} for an input of shape "
                f"{list(shape_of(x))}")
    _check_pool(cx, at, 2)
    kernel, strides = list(at["kernel_shape"]), list(at.get("strides", [1, 1]))
    pads = list(at.get("pads", [0] * 4))
    n, c = shape_of(x)[:2]
    size = [n, c] + [(shape_of(x)[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + 2]
                     for i in range(2)]
    flat = (1, math.prod(shape_of(x)))
    y = F.reshape(apply("scatter_add", (F.reshape(x, flat), F.reshape(F.astype(where, "int64"),
                                                                      flat)),
                        axis=1, shape=(1, math.prod(size))), tuple(size))
    if len(ins) < 3 or ins[2] is None:
        return [y]
    out = cx.ints(ins[2], "output_shape")
    if len(out) != 4 or any(o < s for o, s in zip(out, size)) or out[:2] != size[:2]:
        cx.fail(f"output_shape {out} for an unpooled {size} (it may only be larger)")
    return [F.pad(y, ((0, 0), (0, 0), (0, out[2] - size[2]), (0, out[3] - size[3])))]


def _global_pool(cx, ins, at):
    x = cx.var(ins[0])
    if cx.node.op_type == "GlobalAveragePool" and x.ndim == 4:
        return [F.adaptive_avg_pool2d(x, (1, 1))]
    if cx.node.op_type == "GlobalLpPool":
        return [_global_lp_pool(cx, x, at.get("p", 2))]
    axes = tuple(range(2, x.ndim))
    fn = F.mean if cx.node.op_type == "GlobalAveragePool" else F.max
    return [fn(x, axes, keepdims=True)]


def _global_lp_pool(cx, x, p):
    """(sum of |x|^p over the spatial axes)^(1/p), keeping them as size 1."""
    if p <= 0:
        cx.fail(f"p={p} (the norm needs p > 0)")
    axes = tuple(range(2, x.ndim))
    if p == 2:
        return F.sqrt(F.sum(F.square(x), axes, keepdims=True))
    total = F.sum(F.pow(F.abs(x), float(p)), axes, keepdims=True)
    return total if p == 1 else F.pow(total, 1.0 / p)


def _batch_norm(cx, ins, at):
    x, scale, bias, mean, var = (cx.var(v) for v in ins[:5])
    if x.ndim < 2:
        cx.fail("the input needs a channel axis")
    eps = at.get("epsilon", 1e-5)
    if not at.get("training_mode", 0):
        return [F.batch_norm(x, mean, var, scale, bias, training=False, eps=eps)]
    # training mode: the batch's statistics, and the running ones updated with them
    y = F.batch_norm(x, weight=scale, bias=bias, training=True, eps=eps)
    axes = (0,) + tuple(range(2, x.ndim))
    m = at.get("momentum", 0.9)
    keep, new = cx.g.const(np.asarray(m, x.dtype)), cx.g.const(np.asarray(1 - m, x.dtype))
    running_mean = F.add(F.mul(mean, keep), F.mul(F.mean(x, axes), new))
    running_var = F.add(F.mul(var, keep), F.mul(F.var(x, axes), new))
    return [y, running_mean, running_var]


def _layer_norm(cx, ins, at):
    x = cx.var(ins[0])
    axis = cx.axis(at.get("axis", -1), x.ndim)
    eps = at.get("epsilon", 1e-5)
    norm_shape = shape_of(x)[axis:]
    scale = ins[1]
    bias = ins[2] if len(ins) > 2 else None
    affine_ok = shape_of(scale) == norm_shape and (bias is None or shape_of(bias) == norm_shape)
    if affine_ok:
        y = F.layer_norm(x, norm_shape, weight=cx.var(scale),
                         bias=None if bias is None else cx.var(bias), eps=eps)
    else:
        y = F.mul(F.layer_norm(x, norm_shape, affine=False, eps=eps), cx.var(scale))
        if bias is not None:
            y = F.add(y, cx.var(bias))
    outs = [y]
    names = list(cx.node.output)
    if len(names) > 1:
        axes = tuple(range(axis, x.ndim))
        mean = F.mean(x, axes, keepdims=True)
        outs.append(mean)
        if len(names) > 2:
            var = F.mean(F.square(F.sub(x, mean)), axes, keepdims=True)
            outs.append(F.rsqrt(F.add(var, cx.g.const(np.asarray(eps, x.dtype)))))
    return outs


def _softmax(cx, ins, at):
    x = cx.var(ins[0])
    fn = F.softmax if cx.node.op_type == "Softmax" else F.log_softmax
    return [fn(x, cx.axis(at.get("axis", -1), x.ndim))]


# ONNX op -> converter
CONVERTERS = {
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv,
    "MaxPool": _pool, "AveragePool": _pool,
    "GlobalAveragePool": _global_pool, "GlobalMaxPool": _global_pool,
    "LpPool": _pool, "GlobalLpPool": _global_pool, "MaxUnpool": _max_unpool,
    "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
    "Softmax": _softmax, "LogSoftmax": _softmax,
}


# -- ConvTranspose --------------------------------------------------------------------------------
# Its pads come from ``pads``, ``auto_pad`` or ``output_shape`` as ONNX Runtime computes them
# and the ONNX reference do: an output_shape gives the total padding, cut in two with the larger
# half at the start (at the end under SAME_UPPER), and no padding where the output is larger
# than the full result (its extra cells are zero, plus the bias).
def _transpose_pads(cx, at, in_hw, kernel, strides, dilations, extra):
    """ONNX's ((begin, end), ...) pads and output size per spatial axis."""
    mode = _pad_mode(at)
    wanted = list(at.get("output_shape", ()))[-len(in_hw):] if "output_shape" in at else None
    if wanted is not None and len(wanted) != len(in_hw):
        cx.fail(f"output_shape {list(at['output_shape'])} has fewer values than the "
                f"{len(in_hw)} spatial axes")
    pads, sizes = [], []
    for i, (n, k, s, d, e) in enumerate(zip(in_hw, kernel, strides, dilations, extra)):
        full = (n - 1) * s + e + (k - 1) * d + 1
        if wanted is not None:
            total = max(0, full - wanted[i])
            head = total // 2 if mode == "SAME_UPPER" else total - total // 2
            pads.append((head, total - head))
            sizes.append(wanted[i])
            continue
        if mode in ("SAME_UPPER", "SAME_LOWER"):
            total = max(0, full - n * s)
            head = total // 2 if mode == "SAME_UPPER" else total - total // 2
            pads.append((head, total - head))
        else:
            given = list(at.get("pads", [0] * (2 * len(in_hw))))
            pads.append((given[i], given[i + len(in_hw)]))
        sizes.append(full - sum(pads[-1]))
    return pads, sizes


def _conv_transpose(cx, ins, at):
    if cx.var(ins[0]).ndim == 5:
        return _conv_transpose_3d(cx, ins, at)
    x, one_d = _spatial(cx, cx.var(ins[0]), "ConvTranspose")
    w = cx.var(ins[1])
    nd = 2 - one_d
    if w.ndim != nd + 2:
        cx.fail(f"a weight of shape {list(shape_of(w))} for an input of shape "
                f"{list(shape_of(x))[:nd + 2]} (ONNX needs the same rank)")
    _check_window(cx, at, nd, shape_of(w)[2:])
    if "output_padding" in at and (len(at["output_padding"]) != nd
                                   or any(v < 0 for v in at["output_padding"])):
        cx.fail(f"output_padding {list(at['output_padding'])} needs {nd} values of at least 0")
    strides = list(at.get("strides", [1] * nd))
    dilations = list(at.get("dilations", [1] * nd))
    pads, sizes = _transpose_pads(cx, at, shape_of(x)[2:2 + nd], shape_of(w)[2:], strides,
                                  dilations, at.get("output_padding", [0] * nd))
    if one_d:
        w = F.reshape(w, shape_of(w) + (1,))
    bias = cx.var(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    y = transposed(x, w, bias, tuple(_as2(strides, one_d, 1)), tuple(_as2(pads, one_d, (0, 0))),
                   tuple(_as2(sizes, one_d, 1)), tuple(_as2(dilations, one_d, 1)),
                   at.get("group", 1))
    return [F.reshape(y, shape_of(y)[:3]) if one_d else y]


CONVERTERS["ConvTranspose"] = _conv_transpose


# -- ConvTranspose over volumes (N, C, D, H, W): ops/conv_api.py's transposed3d ------------------
def _conv_transpose_3d(cx, ins, at):
    x, w = cx.var(ins[0]), cx.var(ins[1])
    if w.ndim != 5:
        cx.fail(f"a weight of shape {list(shape_of(w))} for a 5-D input (ONNX needs the same "
                f"rank)")
    _check_window(cx, at, 3, shape_of(w)[2:])
    if "output_padding" in at and (len(at["output_padding"]) != 3
                                   or any(v < 0 for v in at["output_padding"])):
        cx.fail(f"output_padding {list(at['output_padding'])} needs 3 values of at least 0")
    strides = list(at.get("strides", [1] * 3))
    dilations = list(at.get("dilations", [1] * 3))
    pads, sizes = _transpose_pads(cx, at, shape_of(x)[2:], shape_of(w)[2:], strides, dilations,
                                  at.get("output_padding", [0] * 3))
    bias = cx.var(ins[2]) if len(ins) > 2 and ins[2] is not None else None
    return [transposed3d(x, w, bias, tuple(strides), tuple(pads), tuple(sizes),
                         tuple(dilations), at.get("group", 1))]
# -- instance, group, local response, Lp and mean-variance normalisation -------------------------
def _instance_norm(cx, ins, at):
    x = cx.var(ins[0])
    if x.ndim < 3:
        cx.fail(f"the input must be (N, C, D1, ...), got shape {list(x.shape)}")
    return [F.nn.instance_norm(x, True, cx.var(ins[1]), cx.var(ins[2]),
                               at.get("epsilon", 1e-5))]


def _group_norm(cx, ins, at):
    if len(ins) != 3 or any(v is None for v in ins):
        cx.fail(f"takes 3 inputs (X, scale, bias), got {len(ins)}")
    x, scale, bias = (cx.var(v) for v in ins)
    groups = at.get("num_groups")
    if x.ndim < 2 or groups is None or groups < 1 or x.shape[1] % groups:
        cx.fail(f"num_groups {groups} must divide the channels of the input of shape "
                f"{list(x.shape)}")
    # GroupNormalization-18 scales and shifts per group, -21 per channel
    if onnx.defs.get_schema("GroupNormalization", cx.opset, "").since_version < 21:
        if scale.shape != (groups,) or bias.shape != (groups,):
            cx.fail(f"scale and bias must have shape ({groups},) (one per group before opset "
                    f"21), got {list(scale.shape)} and {list(bias.shape)}")
        per_group = x.shape[1] // groups
        scale, bias = F.repeat(scale, per_group, axis=0), F.repeat(bias, per_group, axis=0)
    return [F.nn.group_norm(x, groups, True, scale, bias, at.get("epsilon", 1e-5))]


def _lrn(cx, ins, at):
    x = cx.var(ins[0])
    size = at.get("size")
    if size is None or size < 1:
        cx.fail(f"size must be an int >= 1, got {size}")
    # ONNX's window: floor((size - 1) / 2) channels below c, ceil((size - 1) / 2) above
    return [lrn(x, size, at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0),
                (size - 1) // 2)]


def _lp_norm(cx, ins, at):
    x = cx.var(ins[0])
    p = at.get("p", 2)
    if p not in (1, 2):
        cx.fail(f"p must be 1 or 2, got {p}")
    # ONNX divides by the norm itself; a zero norm gives zeros (as ONNX Runtime), not NaN
    return [F.normalize(x, p, cx.axis(at.get("axis", -1), x.ndim), np.finfo(x.dtype).tiny)]


def _mvn(cx, ins, at):
    x = cx.var(ins[0])
    axes = tuple(cx.axes(at.get("axes", [0, 2, 3]), x.ndim))
    return [F.nn.mean_variance_normalization(x, axes)]


CONVERTERS.update({
    "InstanceNormalization": _instance_norm, "GroupNormalization": _group_norm, "LRN": _lrn,
    "LpNormalization": _lp_norm, "MeanVarianceNormalization": _mvn,
})


# -- Col2Im (opset 18) over images: ops/sliding_window.py's sliding_window_transpose ------------
def _col2im_geometry(cx, ins, at):
    """(image, block, pads, strides, dilations) of a 2-D Col2Im, every list checked."""
    image, block = cx.ints(ins[1], "image_shape"), cx.ints(ins[2], "block_shape")
    if len(image) != 2 or len(block) != 2:
        cx.fail(f"Col2Im over {len(image)} spatial dims: mgegraph's is over images (2)")
    pads = list(at.get("pads", [0, 0, 0, 0]))
    strides, dilations = list(at.get("strides", [1, 1])), list(at.get("dilations", [1, 1]))
    if (len(pads) != 4 or min(pads) < 0 or len(strides) != 2 or min(strides) < 1
            or len(dilations) != 2 or min(dilations) < 1 or min(image + block) < 1):
        cx.fail(f"image_shape {image}, block_shape {block}, pads {pads}, strides {strides}, "
                f"dilations {dilations}: sizes, strides and dilations must be >= 1, pads >= 0")
    return image, block, pads, strides, dilations


def _col2im(cx, ins, at):
    cols = cx.var(ins[0])
    image, block, pads, strides, dilations = _col2im_geometry(cx, ins, at)
    padded = [image[a] + pads[a] + pads[a + 2] for a in range(2)]
    cells = [(padded[a] - dilations[a] * (block[a] - 1) - 1) // strides[a] + 1 for a in range(2)]
    taps = block[0] * block[1]
    if (cols.ndim != 3 or not isinstance(cols.shape[1], int) or cols.shape[1] % taps
            or min(cells) < 1 or cols.shape[2] != cells[0] * cells[1]):
        cx.fail(f"input of shape {list(cols.shape)} does not hold {block} blocks (C * {taps}, "
                f"{cells[0]} * {cells[1]} positions) of the {image} image padded by {pads}")
    windows = F.transpose(F.reshape(cols, (cols.shape[0], cols.shape[1] // taps, *block, *cells)),
                          (0, 1, 4, 5, 2, 3))
    if pads[:2] == pads[2:]:
        return [F.sliding_window_transpose(windows, image, block, pads[:2], strides, dilations)]
    # asymmetric pads: the sums over the whole padded image, cropped
    whole = F.sliding_window_transpose(windows, padded, block, 0, strides, dilations)
    return [whole[:, :, pads[0]:pads[0] + image[0], pads[1]:pads[1] + image[1]]]


CONVERTERS["Col2Im"] = _col2im
