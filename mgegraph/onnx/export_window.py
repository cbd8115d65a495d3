"""(export) MegEngine's sliding windows as ONNX nodes. ``sliding_window`` has no ONNX op: it is
written as its definition, a Pad of zeros and, per tap (i, j), a strided Slice of the padded
image (the tap of every window), the taps stacked on a last axis and reshaped to
(N, C, OH, OW, WH, WW). ``sliding_window_transpose`` is ONNX's Col2Im (opset 18) in
PyTorch's fold layout (N, C*WH*WW, OH*OW): a Transpose and a Reshape before it.
"""
from __future__ import annotations

import numpy as np

from . import OnnxExportError


def _window(w, n, ins):
    a = n.attr
    (kh, kw), (ph, pw) = a["kernel_size"], a["padding"]
    (sh, sw), (dh, dw) = a["stride"], a["dilation"]
    oh, ow = n.outputs[0].shape[2:4]
    x = ins[0]
    if ph or pw:
        zero = w.const(np.zeros((), n.inputs[0].dtype))
        x = w.add("Pad", [x, w.ints([0, 0, ph, pw, 0, 0, ph, pw]), zero])[0]
    taps = []
    for i in range(kh):
        for j in range(kw):
            starts = [i * dh, j * dw]
            ends = [starts[0] + (oh - 1) * sh + 1, starts[1] + (ow - 1) * sw + 1]
            tap = w.add("Slice", [x, w.ints(starts), w.ints(ends), w.ints([2, 3]),
                                  w.ints([sh, sw])])[0]
            taps.append(w.add("Unsqueeze", [tap, w.ints([4])])[0])
    stacked = w.add("Concat", taps, axis=4)[0] if len(taps) > 1 else taps[0]
    return w.add("Reshape", [stacked, w.ints([0, 0, oh, ow, kh, kw])])


def _window_transpose(w, n, ins):
    if w.opset < 18:
        raise OnnxExportError(f"sliding_window_transpose is ONNX's Col2Im, from opset 18, not "
                              f"{w.opset} (export with opset=18 or later)")
    a = n.attr
    (ph, pw) = a["padding"]
    oh, ow = n.inputs[0].shape[2:4]
    cols = w.add("Transpose", ins, perm=[0, 1, 4, 5, 2, 3])[0]
    cols = w.add("Reshape", [cols, w.ints([0, -1, oh * ow])])[0]
    return w.add("Col2Im", [cols, w.ints(a["output_size"]), w.ints(a["kernel_size"])],
                 dilations=list(a["dilation"]), pads=[ph, pw, ph, pw], strides=list(a["stride"]))


WRITERS = {"sliding_window": _window, "sliding_window_transpose": _window_transpose}
