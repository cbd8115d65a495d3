"""CPU lowerings of the pooling ops and their backward passes: the Pool parameter block of
_kernels/pool.pyx."""
from __future__ import annotations

from ...backend import Launch
from ...ops.conv import AVG_MODES, window_geometry
from ...ops.registry import FLOAT_DTYPES
from .. import pool as K
from .layout import pack
from .threads import node_threads

# The kernel's modes: max and the two averages pool sliding windows (the op's "mode"
# attribute picks the average); the adaptive ones pool PyTorch's adaptive windows.
ADAPTIVE = {"max": "adaptive_max", "avg": "adaptive_average"}
MODES = ("max", *AVG_MODES, *ADAPTIVE.values())


# Which of a node's types is the full-size one (the forward's input) and which the pooled one
def _forward_sides(node):
    return node.inputs[0].type, node.outputs[0].type


def _max_backward_sides(node):
    return node.inputs[0].type, node.inputs[1].type


def _avg_backward_sides(node):
    return node.outputs[0].type, node.inputs[0].type


def _pool_lower(sides, adaptive_mode=None):
    def lower(node) -> Launch:
        x, y = sides(node)
        if adaptive_mode is None:
            (kh, kw), (sh, sw), (ph, pw), _ = window_geometry(x, node.attr)
            mode = node.attr.get("mode", "max")
        else:  # windows come from the sizes alone
            mode, (kh, kw, sh, sw, ph, pw) = adaptive_mode, (0,) * 6
        return Launch(pack(K.POOL_FIELDS, mode=K.POOL_MODES[mode], planes=x.shape[0] * x.shape[1],
                           h=x.shape[2], w=x.shape[3], oh=y.shape[2], ow=y.shape[3], kh=kh,
                           kw=kw, sh=sh, sw=sw, ph=ph, pw=pw, threads=node_threads(node)))
    return lower


def _ops(prefix: str, adaptive: bool):
    """(op, kernel family, lowering) of one pooling family's max and avg ops."""
    def mode(kind):
        return ADAPTIVE[kind] if adaptive else None
    return (
        (f"{prefix}max_pool2d", "pool2d", _pool_lower(_forward_sides, mode("max"))),
        (f"{prefix}max_pool2d_backward", "max_pool2d_backward",
         _pool_lower(_max_backward_sides, mode("max"))),
        (f"{prefix}max_pool2d_select", "max_pool2d_select",
         _pool_lower(_forward_sides, mode("max"))),
        (f"{prefix}avg_pool2d", "pool2d", _pool_lower(_forward_sides, mode("avg"))),
        (f"{prefix}avg_pool2d_backward", "avg_pool2d_backward",
         _pool_lower(_avg_backward_sides, mode("avg"))),
    )


def implement(table) -> None:
    if set(MODES) != set(K.POOL_MODES):
        raise ImportError(f"pool.pyx's modes {sorted(K.POOL_MODES)} differ from the ops' "
                          f"{sorted(MODES)}")
    for op, kernel, lower in _ops("", adaptive=False) + _ops("adaptive_", adaptive=True):
        table.implement(op, kernel=kernel, dtypes=FLOAT_DTYPES, lower=lower)
