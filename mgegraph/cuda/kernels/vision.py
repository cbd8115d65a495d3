"""The vision ops on CUDA (csrc_cuda/vision.cu): every op of the shared
mgegraph/kernel_abi/vision.py, from the same Sample, Roi and Nms parameter blocks.

>>> sorted(KERNELS)[:2]
['nms_f32', 'nms_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import vision as abi
from ..kernel import Step
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared


def _threads(family, ints) -> int:
    """The threads of one launch: a point, a plane (volume) of dx, a bin, a channel of dx or a
    box each."""
    if family.startswith("sample3d"):  # the volume sampler's Sample3 block
        _, _, _, _, n, c, _, _, _, od, oh, ow = ints[:12]
        return n * c if family == "sample3d_backward_data" else n * od * oh * ow
    if family.startswith("sample"):
        _, _, _, _, n, c, _, _, oh, ow = ints[:10]
        return n * c if family == "sample_backward_data" else n * oh * ow
    _, _, _, c, _, _, k, oh, ow = ints[:9]
    return {"roi_backward": c, "roi_backward_rois": k}.get(family, k * c * oh * ow)


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        if family == "nms":  # one thread: the greedy pass is sequential
            return [Step(entry, (1, 1, 1), (1, 1, 1))]
        return elementwise_steps(entry, _threads(family, launch.ints))
    return steps


def implement(table) -> None:
    """Register grid_sample, remap, roi_align, roi_pooling (with their gradients) and nms."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "vision.cu", _steps)
