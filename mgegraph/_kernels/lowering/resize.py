"""CPU lowerings of resize and its gradient: the shared Resize block
(mgegraph/kernel_abi/resize.py) with the CPU's threads, once _kernels/resize.pyx is checked to
read it."""
from __future__ import annotations

from ...kernel_abi import resize as abi
from .. import resize as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, RESIZE_FIELDS=abi.FIELDS, RESIZE_MODES=abi.CODES["mode"],
                RESIZE_COORDS=abi.CODES["coord"], RESIZE_NEAREST_MODES=abi.CODES["nearest_mode"],
                TAP_BYTES=abi.TAP_BYTES, WIDE_TAP_BYTES=abi.WIDE_TAP_BYTES,
                BILINEAR_SLOT_FLOATS=abi.BILINEAR_SLOT_FLOATS)
    abi.implement(table, threads=node_threads)
