"""The local_conv family's parameter block, read by _kernels/local_conv.pyx and
csrc_cuda/local_conv.cu: the Window struct of local_conv2d, region_restricted_conv and their
backward ops. No floats, no workspace.

    local_conv2d:                     bufs x, w, y
    local_conv2d_backward:            bufs x, w, dy, dx, dw
    region_restricted_conv:           bufs x, w, rin, rout, y
    region_restricted_conv_backward:  bufs x, w, rin, rout, dy, dx, dw

Design: the kernels read weight w[g, cell, i, tap, o] (cell = oh * OW + ow, tap = kh * KW + kw)
at g * w_group + cell * w_cell + i * w_in + tap * w_tap + o * w_out: GroupLocal's weight
(G, OH, OW, ICg, KH, KW, OCg) and the shared grouped one (G, OCg, ICg, KH, KW), whose w_cell is
0, are one walk; ``region`` says whether the ids buffers exist and restrict the taps.
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

FIELDS = ("batch", "channels", "height", "width", "groups", "in_per_group", "out_per_group",
          "out_h", "out_w", "kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w",
          "dilation_h", "dilation_w", "w_group", "w_cell", "w_in", "w_tap", "w_out", "region",
          "threads")
OPS = ("local_conv2d", "local_conv2d_backward", "region_restricted_conv",
       "region_restricted_conv_backward")


def weight_strides(w_shape, region: bool) -> dict:
    """The Window struct's weight fields for a weight of shape ``w_shape``."""
    if region:
        _, ocg, icg, kh, kw = w_shape
        return {"w_group": ocg * icg * kh * kw, "w_cell": 0, "w_in": kh * kw, "w_tap": 1,
                "w_out": icg * kh * kw}
    _, oh, ow, icg, kh, kw, ocg = w_shape
    cell = icg * kh * kw * ocg
    return {"w_group": oh * ow * cell, "w_cell": cell, "w_in": kh * kw * ocg, "w_tap": ocg,
            "w_out": 1}


def _lower(threads):
    def lower(node) -> Launch:
        x, w = node.inputs[0].type, node.inputs[1].type
        region = node.op.name.startswith("region")
        dy = node.outputs[0].type if node.op.name in ("local_conv2d", "region_restricted_conv") \
            else node.inputs[-1].type
        groups = w.shape[0]
        kh, kw = w.shape[-2:] if region else w.shape[4:6]
        a = node.attr
        return Launch(pack(FIELDS, batch=x.shape[0], channels=x.shape[1], height=x.shape[2],
                           width=x.shape[3], groups=groups, in_per_group=x.shape[1] // groups,
                           out_per_group=dy.shape[1] // groups, out_h=dy.shape[2],
                           out_w=dy.shape[3], kernel_h=kh, kernel_w=kw, stride_h=a["stride"][0],
                           stride_w=a["stride"][1], pad_h=a["padding"][0],
                           pad_w=a["padding"][1], dilation_h=a["dilation"][0],
                           dilation_w=a["dilation"][1], region=int(region),
                           threads=threads(node), **weight_strides(w.shape, region)))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register the local_conv family's ops on ``table``; ``threads(node)`` fills the threads
    field."""
    for op in OPS:
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower(threads))
