"""CPU lowerings of the vision ops: the shared Sample, Roi and Nms blocks
(mgegraph/kernel_abi/vision.py) with the CPU's threads, once _kernels/vision.pyx is checked to
read them."""
from __future__ import annotations

from ...kernel_abi import vision as abi
from .. import vision as K
from .built import check_built
from .threads import node_threads


def implement(table) -> None:
    check_built(K, SAMPLE_FIELDS=abi.SAMPLE_FIELDS, COORDS=abi.COORDS, COORD_PADS=abi.COORD_PADS,
                INTERPS=abi.INTERPS, BORDERS=abi.BORDERS, ROI_FIELDS=abi.ROI_FIELDS,
                ROI_KINDS=abi.ROI_KINDS, ROI_MODES=abi.ROI_MODES, NMS_FIELDS=abi.NMS_FIELDS,
                SAMPLE3_FIELDS=abi.SAMPLE3_FIELDS)
    abi.implement(table, threads=node_threads)
