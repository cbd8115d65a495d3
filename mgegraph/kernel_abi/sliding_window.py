"""The sliding windows' parameter block, read by _kernels/sliding_window.pyx and by
csrc_cuda/sliding_window.cu: the image, the window and the output cells (the same fields for
both ops); no floats, no workspace.

    sliding_window:            bufs x (N, C, H, W), cols (N, C, OH, OW, WH, WW)
    sliding_window_transpose:  bufs cols, x
"""
from __future__ import annotations

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

# The struct's fields, in the kernels' order (sliding_window.pyx exports WINDOW_FIELDS)
FIELDS = {"WINDOW_FIELDS": ("planes", "height", "width", "out_h", "out_w", "kernel_h",
                            "kernel_w", "pad_h", "pad_w", "stride_h", "stride_w", "dilation_h",
                            "dilation_w", "threads")}


def _lower(threads):
    def lower(node) -> Launch:
        image, cols = node.inputs[0].type, node.outputs[0].type
        if node.op.name == "sliding_window_transpose":
            image, cols = cols, image
        (kh, kw), (ph, pw) = node.attr["kernel_size"], node.attr["padding"]
        (sh, sw), (dh, dw) = node.attr["stride"], node.attr["dilation"]
        return Launch(pack(FIELDS["WINDOW_FIELDS"], planes=image.shape[0] * image.shape[1],
                           height=image.shape[2], width=image.shape[3], out_h=cols.shape[2],
                           out_w=cols.shape[3], kernel_h=kh, kernel_w=kw, pad_h=ph, pad_w=pw,
                           stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                           threads=threads(node)))
    return lower


def implement(table, threads=one_thread) -> None:
    """Register sliding_window and its transpose on ``table``; ``threads(node)`` fills the
    block's threads field."""
    for op in ("sliding_window", "sliding_window_transpose"):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower(threads))
