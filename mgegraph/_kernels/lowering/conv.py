"""CPU lowerings of conv2d and its two backward ops: the Conv parameter block of
_kernels/conv.pyx, which of the kernels' paths a convolution takes, and its workspace."""
from __future__ import annotations

from ...backend import Launch
from ...ops.conv import conv_geometry
from ...ops.registry import FLOAT_DTYPES
from .. import conv as K
from .layout import pack
from .matmul import check_blas_dims

PATHS = ("direct", "im2col", "shifted")  # what _conv_path chooses from


def _shifted_pays(cg, ocg, col_bytes) -> bool:
    """Whether shifted GEMMs are expected to beat im2col: a rule fitted to measurements.

    Design: per tap, the shifted path reads and writes the (ocg, npix) result once more where
    im2col copies a (cg, npix) block, so it needs cg not far below ocg. Im2col's one GEMM streams
    its (cg * kh * kw, npix) matrix once per ocg rows: with few output channels, or a matrix
    larger than L2, that streaming is what it waits on. Measured on a 2-core Xeon (2 MiB L2 per
    core; OpenBLAS at 1 and 2 threads; 3x3 to 7x7 kernels, 1 to 128 channels, 4x4 to 64x64
    images), shifted was 1.2-2.8x faster where this holds (16 -> 16 at 32x32: x1.8, 64 -> 64 at
    32x32: x1.3); elsewhere it was up to 1.8x slower (3 -> 16, 16 -> 64) or within 10% either way
    (small images, 64 -> 64 at 16x16, 128 -> 128 at 8x8).
    """
    if ocg > 2 * cg or col_bytes < 256 * 1024:
        return False
    return ocg <= 32 or col_bytes >= 2 * 1024 * 1024


def _conv_path(kernel, stride, padding, dilation, groups_dims, col_bytes, forward) -> str:
    """Which of the kernels' ways to compute a convolution (one of ``PATHS``).
    ``groups_dims`` is (input, output) channels per group; the backward passes (not
    ``forward``) have only the im2col layout."""
    cg, ocg = groups_dims
    if cg == 0:
        return "direct"  # no input channels: the GEMM only zeroes y
    if kernel == (1, 1) and stride == (1, 1) and padding == (0, 0):
        return "direct"
    if (forward and stride == (1, 1) and dilation == (1, 1) and kernel != (1, 1)
            and _shifted_pays(cg, ocg, col_bytes)):
        return "shifted"
    return "im2col"


def _conv_launch(x, w, y, attrs, has_bias=False, relu=False, forward=False) -> Launch:
    """The Conv parameters of convolving x by w into y. The backward ops, which compute x or w
    instead, walk the same im2col layout, so they take the same parameters."""
    oc, cg, (kh, kw), stride, padding, dilation = conv_geometry((x, w), attrs)
    groups, npix, kdim = attrs["groups"], y.shape[2] * y.shape[3], cg * kh * kw
    path = _conv_path((kh, kw), stride, padding, dilation, (cg, oc // groups),
                      kdim * npix * x.dtype.itemsize, forward)
    ints = pack(K.CONV_FIELDS, batch=x.shape[0], cin=x.shape[1], h=x.shape[2], w=x.shape[3],
                cout=oc, oh=y.shape[2], ow=y.shape[3], kh=kh, kw=kw, sh=stride[0], sw=stride[1],
                ph=padding[0], pw=padding[1], dh=dilation[0], dw=dilation[1], groups=groups,
                has_bias=has_bias, path=K.CONV_PATHS[path], relu=relu)
    # the shifted path's leading dimension is one padded plane
    plane = (x.shape[2] + 2 * padding[0]) * (x.shape[3] + 2 * padding[1])
    check_blas_dims(x.dtype, oc // groups, npix, kdim, plane if path == "shifted" else 0)
    # scratch for one (batch element, group), reused for all of them
    return Launch(ints, workspace=K.workspace_size(ints) * x.dtype.itemsize)


def _conv2d_lower(node) -> Launch:
    x, w = node.inputs[:2]
    return _conv_launch(x.type, w.type, node.outputs[0].type, node.attr, len(node.inputs) == 3,
                        node.attr["activation"] == "relu", forward=True)


def _backward_data_lower(node) -> Launch:
    w, dy = node.inputs
    return _conv_launch(node.outputs[0].type, w.type, dy.type, node.attr)


def _backward_filter_lower(node) -> Launch:
    x, dy = node.inputs
    return _conv_launch(x.type, node.outputs[0].type, dy.type, node.attr)


def implement(table) -> None:
    if set(PATHS) != set(K.CONV_PATHS):
        raise ImportError(f"conv.pyx's paths {sorted(K.CONV_PATHS)} differ from the lowering's "
                          f"{sorted(PATHS)}")
    for op, lower in (("conv2d", _conv2d_lower), ("conv2d_backward_data", _backward_data_lower),
                      ("conv2d_backward_filter", _backward_filter_lower)):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=lower)
