"""The deform family's parameter blocks, read by _kernels/deform.pyx and csrc_cuda/deform.cu:
the Im2col struct of deform_im2col and its backward (the images, the window and the deformable
groups), the Correlation struct of correlation and its backward. No floats, no workspace.

    deform_im2col:           bufs x, offset, mask, cols
    deform_im2col_backward:  bufs x, offset, mask, dcols, dx, doffset, dmask
    correlation:             bufs data1, data2, out
    correlation_backward:    bufs data1, data2, dy, d1, d2
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.deform import correlation_geometry, deformable_groups
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

IM2COL_FIELDS = ("batch", "channels", "height", "width", "kernel_h", "kernel_w", "stride_h",
                 "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "out_h", "out_w",
                 "groups", "threads")
CORRELATION_FIELDS = ("batch", "channels", "height", "width", "out_c", "out_h", "out_w",
                      "kernel_radius", "max_displacement", "grid_radius", "stride1", "stride2",
                      "pad_size", "is_multiply", "threads")


def _lower_im2col(threads):
    def lower(node) -> Launch:
        x, offset = node.inputs[0].type, node.inputs[1].type
        a = node.attr
        (kh, kw), (sh, sw) = a["kernel_size"], a["stride"]
        (ph, pw), (dh, dw) = a["padding"], a["dilation"]
        return Launch(pack(IM2COL_FIELDS, batch=x.shape[0], channels=x.shape[1],
                           height=x.shape[2], width=x.shape[3], kernel_h=kh, kernel_w=kw,
                           stride_h=sh, stride_w=sw, pad_h=ph, pad_w=pw, dilation_h=dh,
                           dilation_w=dw, out_h=offset.shape[2], out_w=offset.shape[3],
                           groups=deformable_groups(x, offset, a), threads=threads(node)))
    return lower


def _lower_correlation(threads):
    def lower(node) -> Launch:
        x = node.inputs[0].type
        y = node.outputs[0].type if node.op.name == "correlation" else node.inputs[2].type
        a = node.attr
        radius, grid = correlation_geometry(a)
        return Launch(pack(CORRELATION_FIELDS, batch=x.shape[0], channels=x.shape[1],
                           height=x.shape[2], width=x.shape[3], out_c=y.shape[1],
                           out_h=y.shape[2], out_w=y.shape[3], kernel_radius=radius,
                           max_displacement=a["max_displacement"], grid_radius=grid,
                           stride1=a["stride1"], stride2=a["stride2"], pad_size=a["pad_size"],
                           is_multiply=a["is_multiply"], threads=threads(node)))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register the deform family's ops on ``table``; ``threads(node)`` fills the threads
    field."""
    for op in ("deform_im2col", "deform_im2col_backward"):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower_im2col(threads))
    for op in ("correlation", "correlation_backward"):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower_correlation(threads))
