"""NumPy references of the int8 compute ops (mgegraph/ops/quantized.py), from their docstring's
definition: the integers every backend's kernels must give.

Each takes the stored integers and the quantization parameters as NumPy arrays and numbers:
``xp`` and friends are ``QuantParams`` (``TensorType.quant``).
"""
from __future__ import annotations

import numpy as np

RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int32": (-(2 ** 31), 2 ** 31 - 1)}

# The transposed convolutions every backend's kernels are checked on (the CPU's, CUDA's): x shape,
# (out/groups, kh, kw), stride, padding, output_padding, dilation, groups
CONV_TRANSPOSE_CASES = [
    ((2, 5, 7, 6), (3, 3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1),
    ((1, 4, 5, 5), (6, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),    # the U-Net's up-sampling
    ((2, 3, 4, 6), (5, 2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 1),    # k == stride: no overlap
    ((1, 6, 5, 4), (2, 3, 2), (3, 2), (1, 0), (2, 1), (1, 1), 3),    # groups, stride 3
    ((1, 7, 6, 5), (4, 3, 3), (2, 3), (2, 1), (1, 0), (2, 2), 1),    # dilation with stride
    ((2, 4, 3, 3), (4, 5, 4), (1, 2), (3, 2), (0, 1), (1, 1), 2),    # padding past the kernel
    ((1, 8, 9, 9), (8, 1, 1), (1, 1), (0, 0), (0, 0), (1, 1), 8),    # depthwise 1x1
    ((1, 70, 2, 3), (9, 3, 3), (2, 2), (1, 1), (0, 1), (1, 1), 1),   # K 70, GEMM of 6 columns
]


def _per_channel(values, count: int) -> np.ndarray:
    values = np.asarray(values)
    return np.broadcast_to(values, (count,)) if values.size == 1 else values


def multipliers(sx: float, sw, sy: float) -> np.ndarray:
    """float32(sx) * float32(sw[o]) / float32(sy), each step in float32 (ONNX Runtime's)."""
    return (np.float32(sx) * np.asarray(sw, np.float32)) / np.float32(sy)


def requantize(acc: np.ndarray, m: np.ndarray, zy: int, out_dtype: str, relu: bool,
               channel_axis: int) -> np.ndarray:
    """clamp(rint(float32(acc) * m[o]) + zy): ``m`` broadcast along ``channel_axis``."""
    lo, hi = RANGES[out_dtype]
    if relu:
        lo = max(lo, zy)
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    scaled = acc.astype(np.float32) * np.asarray(m, np.float32).reshape(shape)
    return np.clip(np.rint(scaled).astype(np.int64) + zy, lo, hi).astype(out_dtype)


def _accumulate_conv(x, zx, w, zw, stride, padding, dilation, groups) -> np.ndarray:
    n, _c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    xs = np.pad(x.astype(np.int64) - zx, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    ws = w.astype(np.int64) - _per_channel(zw, oc).reshape(oc, 1, 1, 1)
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    acc = np.zeros((n, oc, oh, ow), np.int64)
    per_group = oc // groups
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (oh - 1) + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + stride[1] * (ow - 1) + 1, stride[1])
            patch = xs[:, :, rows, cols]  # (n, c, oh, ow)
            for g in range(groups):
                o = slice(g * per_group, (g + 1) * per_group)
                acc[:, o] += np.einsum("nchw,oc->nohw", patch[:, g * cg:(g + 1) * cg],
                                       ws[o, :, i, j])
    return acc


def _finish(acc, bias, sx, wp, attrs, channel_axis) -> np.ndarray:
    if bias is not None:
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        acc = acc + np.asarray(bias, np.int64).reshape(shape)
    acc = acc.astype(np.uint32).view(np.int32)  # the bias is added modulo 2^32
    if attrs["out_dtype"] == "int32":
        return acc.astype(np.int32)
    m = multipliers(sx, wp.scales, attrs["out_scale"])
    return requantize(acc, m, attrs["out_zero_point"], attrs["out_dtype"], attrs["relu"],
                      channel_axis)


def quantized_conv2d(x, xp, w, wp, bias=None, **attrs) -> np.ndarray:
    """``attrs``: the op's (stride, padding, dilation, groups, out_dtype, out_scale,
    out_zero_point, relu), all given."""
    acc = _accumulate_conv(x, xp.zero_point, w, wp.zero_points, attrs["stride"],
                           attrs["padding"], attrs["dilation"], attrs["groups"])
    return _finish(acc, bias, xp.scale, wp, attrs, channel_axis=1)


def quantized_linear(x, xp, w, wp, bias=None, **attrs) -> np.ndarray:
    ws = w.astype(np.int64) - _per_channel(wp.zero_points, w.shape[0])[:, None]
    acc = (x.astype(np.int64) - xp.zero_point) @ ws.T
    return _finish(acc, bias, xp.scale, wp, attrs, channel_axis=x.ndim - 1)


def _accumulate_conv_transpose(x, zx, w, zw, stride, padding, output_padding, dilation,
                               groups) -> np.ndarray:
    """Every input cell's products scattered to the output cells its taps reach, in int64."""
    n, c_in, h, wd = x.shape
    _, per_group, kh, kw = w.shape
    sizes = [(h - 1) * stride[0] + dilation[0] * (kh - 1) + 1,
             (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1]
    out = [sizes[a] - 2 * padding[a] + output_padding[a] for a in range(2)]
    full = np.zeros((n, per_group * groups, max(sizes[0], padding[0] + out[0]),
                     max(sizes[1], padding[1] + out[1])), np.int64)
    cg = c_in // groups
    xs = x.astype(np.int64) - zx
    # w[c, o] belongs to output channel (c // cg) * per_group + o
    zws = _per_channel(zw, per_group * groups).reshape(groups, per_group)[np.arange(c_in) // cg]
    ws = w.astype(np.int64) - zws[:, :, None, None]
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dilation[0], i * dilation[0] + stride[0] * (h - 1) + 1, stride[0])
            cols = slice(j * dilation[1], j * dilation[1] + stride[1] * (wd - 1) + 1, stride[1])
            for g in range(groups):
                part = np.einsum("nchw,co->nohw", xs[:, g * cg:(g + 1) * cg],
                                 ws[g * cg:(g + 1) * cg, :, i, j])
                full[:, g * per_group:(g + 1) * per_group, rows, cols] += part
    return full[:, :, padding[0]:padding[0] + out[0], padding[1]:padding[1] + out[1]]


def quantized_conv_transpose2d(x, xp, w, wp, bias=None, **attrs) -> np.ndarray:
    """``attrs``: the op's (stride, padding, output_padding, dilation, groups, out_dtype,
    out_scale, out_zero_point, relu), all given; a per-channel ``wp`` is along axis 1."""
    acc = _accumulate_conv_transpose(x, xp.zero_point, w, wp.zero_points, attrs["stride"],
                                     attrs["padding"], attrs["output_padding"],
                                     attrs["dilation"], attrs["groups"])
    return _finish(acc, bias, xp.scale, wp, attrs, channel_axis=1)


def quantized_batch_matmul(a, ap, b, bp, bias=None, **attrs) -> np.ndarray:
    """a (batch or 1, n, k) @ b (batch or 1, k, m); a per tensor or per row (axis 1)."""
    za = _per_channel(ap.zero_points, a.shape[1]).reshape(1, -1, 1)
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - bp.zero_point)
    # the bias and the multipliers are per row: the channel axis 1
    return _finish(acc, bias, bp.scale, ap, attrs, channel_axis=1)


def quantized_add(a, ap, b, bp, **attrs) -> np.ndarray:
    sy = np.float32(attrs["out_scale"])
    ma, mb = np.float32(ap.scale) / sy, np.float32(bp.scale) / sy
    total = ((a.astype(np.int64) - ap.zero_point).astype(np.float32) * ma
             + (b.astype(np.int64) - bp.zero_point).astype(np.float32) * mb)
    lo, hi = RANGES[attrs["out_dtype"]]
    zy = attrs["out_zero_point"]
    if attrs["relu"]:
        lo = max(lo, zy)
    return np.clip(np.rint(total).astype(np.int64) + zy, lo, hi).astype(attrs["out_dtype"])
