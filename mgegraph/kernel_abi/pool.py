"""The pooling ops' and their backward passes' parameter block (the Pool struct), read by
_kernels/pool.pyx and csrc_cuda/pool.cu."""
from __future__ import annotations

from ..backend import Launch
from ..ops.conv import AVG_MODES, QUANT_POOL_DTYPES, window_geometry
from ..ops.registry import FLOAT_DTYPES
from .layout import one_thread, pack

# ph, pw: padding before the image; eh, ew: after it (the include-padding divisor reads them)
FIELDS = ("mode", "planes", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw",
          "eh", "ew", "threads")
# The kernels' modes: max and the two averages pool sliding windows (the op's "mode"
# attribute picks the average); the adaptive ones pool PyTorch's adaptive windows.
ADAPTIVE = {"max": "adaptive_max", "avg": "adaptive_average"}
MODES = ("max", *AVG_MODES, *ADAPTIVE.values())
CODES = {mode: code for code, mode in enumerate(MODES)}


# Which of a node's types is the full-size one (the forward's input) and which the pooled one
def _forward_sides(node):
    return node.inputs[0].type, node.outputs[0].type


def _max_backward_sides(node):
    return node.inputs[0].type, node.inputs[1].type


def _avg_backward_sides(node):
    return node.outputs[0].type, node.inputs[0].type


def _pool_lower(sides, threads, adaptive_mode=None):
    def lower(node) -> Launch:
        x, y = sides(node)
        if adaptive_mode is None:
            geo = window_geometry(x, node.attr)
            mode = node.attr.get("mode", "max")
            window = dict(zip(("kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw", "eh", "ew"),
                              geo.kernel + geo.stride + geo.padding + geo.dilation
                              + geo.padding_end))
        else:  # windows come from the sizes alone
            mode = adaptive_mode
            window = {"kh": 0, "kw": 0, "sh": 0, "sw": 0, "ph": 0, "pw": 0, "dh": 1, "dw": 1,
                      "eh": 0, "ew": 0}
        # integers (pool_int.pxi): the zero point, which a padded cell of an "average" window
        # holds (a max of plain integers has none, and reads none)
        zero_point = 0 if x.quant is None else x.quant.zero_point
        floats = (float(zero_point),) if x.dtype in QUANT_POOL_DTYPES else ()
        return Launch(pack(FIELDS, mode=CODES[mode], planes=x.shape[0] * x.shape[1],
                           h=x.shape[2], w=x.shape[3], oh=y.shape[2], ow=y.shape[3],
                           threads=threads(node), **window), floats)
    return lower


def _ops(prefix: str, adaptive: bool, threads):
    """(op, kernel family, lowering) of one pooling family's max and avg ops."""
    def lower(sides, kind):
        return _pool_lower(sides, threads, ADAPTIVE[kind] if adaptive else None)
    return (
        (f"{prefix}max_pool2d", "pool2d", lower(_forward_sides, "max")),
        (f"{prefix}max_pool2d_backward", "max_pool2d_backward", lower(_max_backward_sides, "max")),
        (f"{prefix}max_pool2d_select", "max_pool2d_select", lower(_forward_sides, "max")),
        (f"{prefix}avg_pool2d", "pool2d", lower(_forward_sides, "avg")),
        (f"{prefix}avg_pool2d_backward", "avg_pool2d_backward", lower(_avg_backward_sides, "avg")),
    )


def implement(table, threads=one_thread) -> None:
    """Register the pooling ops on ``table``; ``threads(node)`` fills the threads field. The
    forward poolings also take quantized int8 and uint8 values (the pool2d family's integer
    kernels)."""
    for op, kernel, lower in _ops("", False, threads) + _ops("adaptive_", True, threads):
        quantized = op.endswith("pool2d")
        dtypes = FLOAT_DTYPES + QUANT_POOL_DTYPES if quantized else FLOAT_DTYPES
        table.implement(op, kernel=kernel, dtypes=dtypes, lower=lower)
