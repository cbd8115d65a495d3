"""The resize ops' parameter block (the Resize struct), read by _kernels/resize.pyx and
csrc_cuda/resize.cu: the input seen as (planes, in0, in1, in2) and the output as
(planes, out0, out1, out2), the resized axes last; an op over fewer than three axes gets
leading axes of length 1, which the kernels read as one tap. Floats: each axis's step
as a fraction, the numerators then the denominators (see _geometry), and the cubic
coefficient. The workspace holds the taps the CPU
kernel computes once per call (the CUDA kernel computes them per output and ignores it); with
the antialias filter, ``aa_taps0..2`` hold its taps per output index of each axis (0 without
it), and the workspace their wider table."""
from __future__ import annotations

import math
import operator

import numpy as np

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from ..ops.resize import COORDS, IMAGE_DTYPES, MAX_AXES, MODES, NEAREST_MODES, TAPS
from .layout import one_thread, pack

FIELDS = ("mode", "coord", "nearest_mode", "exclude_outside", "planes", "in0", "in1", "in2",
          "out0", "out1", "out2", "aa_taps0", "aa_taps1", "aa_taps2", "threads")
# The workspace: per output index of each axis, 4 taps of an index (8 bytes) and a weight (a double)
TAP_BYTES = 64
# The antialias filter's: per tap, an index (8 bytes) and a weight (a double)
WIDE_TAP_BYTES = 16
# A float32 bilinear resize's extra workspace (the CPU's, _kernels/resize_bilinear.h): each
# thread's two rows (the longer of the input's and the output's), each rounded up to a multiple
# of this many floats, then int32 indices and float weights (16 bytes) per output row and column
BILINEAR_SLOT_FLOATS = 16
CODES = {"mode": {m: i for i, m in enumerate(MODES)},
         "coord": {c: i for i, c in enumerate(COORDS)},
         "nearest_mode": {m: i for i, m in enumerate(NEAREST_MODES)}}


def _geometry(big, small, attrs):
    """(planes, input sizes, output sizes, steps), three axes each, of a resize from ``big``
    (the input's shape) to ``small`` (the output's). A step is the input distance of one output
    index as a fraction (num, den): in / out where sizes were given, divided once, so an index
    that lands on an input cell exactly lands there in floating point too; 1 / scale where a
    scale was given, ONNX's division by the scale."""
    k = len(attrs["size"])
    ins, outs = tuple(big[-k:]), tuple(small[-k:])
    if attrs["scale"] is None:
        steps = tuple((float(i), float(o)) for i, o in zip(ins, outs))
    else:
        steps = tuple((1.0, s) for s in attrs["scale"])
    lead = MAX_AXES - k
    return (math.prod(big[:-k]), (1,) * lead + ins, (1,) * lead + outs,
            ((1.0, 1.0),) * lead + steps)


def antialias_taps(mode, n_in, step) -> int:
    """The antialias filter's taps per output index along one axis (_kernels/resize_antialias.pxi):
    2 ceil(R / s) for a scale s = den / num below 1 (R: 1 linear, 2 cubic), 2 R at s >= 1; one
    on an axis of input length 1."""
    if n_in == 1:
        return 1
    radius = TAPS[mode] // 2
    num, den = step
    return 2 * math.ceil(radius * num / den) if den < num else 2 * radius


def bilinear_workspace(x, attrs, outs, threads: int) -> int:
    """The bytes resize_bilinear.h's path adds to the workspace of a forward resize of ``x``
    when it is float32 and linear (0 for any other)."""
    if attrs["mode"] != "linear" or attrs["antialias"] or x.dtype != np.float32:
        return 0
    stride = -(-max(x.shape[-1], outs[2]) // BILINEAR_SLOT_FLOATS) * BILINEAR_SLOT_FLOATS
    return 4 * 2 * threads * stride + 16 * (outs[1] + outs[2])


def _lower(sides, threads, forward: bool):
    def lower(node) -> Launch:
        x, y = sides(node)
        planes, ins, outs, steps = _geometry(x.shape, y.shape, node.attr)
        a = node.attr
        wide = [antialias_taps(a["mode"], n, step) if a["antialias"] else 0
                for n, step in zip(ins, steps)]
        ints = pack(FIELDS, mode=CODES["mode"][a["mode"]], coord=CODES["coord"][a["coord"]],
                    nearest_mode=CODES["nearest_mode"][a["nearest_mode"]],
                    exclude_outside=bool(a["exclude_outside"]), planes=planes,
                    in0=ins[0], in1=ins[1], in2=ins[2], out0=outs[0], out1=outs[1],
                    out2=outs[2], aa_taps0=wide[0], aa_taps1=wide[1], aa_taps2=wide[2],
                    threads=(team := threads(node)))
        workspace = WIDE_TAP_BYTES * sum(map(operator.mul, outs, wide)) if a["antialias"] \
            else TAP_BYTES * sum(outs)
        if forward:
            workspace += bilinear_workspace(x, a, outs, team)
        return Launch(ints, floats=(*(n for n, _ in steps), *(d for _, d in steps),
                                    float(a["cubic_a"])), workspace=workspace)
    return lower


def _forward_sides(node):
    return node.inputs[0].type, node.outputs[0].type


def _backward_sides(node):  # the resize it is the gradient of: dx's shape to dy's
    return node.outputs[0].type, node.inputs[0].type


def implement(table, threads=one_thread) -> None:
    """Register resize and resize_backward on ``table``; ``threads(node)`` fills the threads
    field."""
    table.implement("resize", kernel="resize", dtypes=IMAGE_DTYPES,
                    lower=_lower(_forward_sides, threads, True))
    table.implement("resize_backward", kernel="resize_backward", dtypes=FLOAT_DTYPES,
                    lower=_lower(_backward_sides, threads, False))
