"""The local_conv family on CUDA (csrc_cuda/local_conv.cu), from the shared parameter block of
mgegraph/kernel_abi/local_conv.py: local_conv2d and region_restricted_conv a thread per output,
their backward ops two steps (a thread per element of dx, then one per element of dw). The
two ops of each pair run the same entries; the block's region field tells them apart.

>>> sorted(KERNELS)[:2]
['local_conv2d_backward_f32', 'local_conv2d_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import local_conv as abi
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

_AT = {f: abi.FIELDS.index(f) for f in abi.FIELDS}


def _sizes(ints) -> tuple[int, int, int]:
    """(elements of y, of dx, of dw) for the block ``ints``."""
    get = {f: ints[i] for f, i in _AT.items()}
    cells = get["out_h"] * get["out_w"]
    weight = (get["groups"] * get["in_per_group"] * get["out_per_group"] * get["kernel_h"]
              * get["kernel_w"] * (cells if get["w_cell"] else 1))
    return (get["batch"] * get["groups"] * get["out_per_group"] * cells,
            get["batch"] * get["channels"] * get["height"] * get["width"], weight)


def _steps(family, dtype):
    suffix = short_name(dtype)

    def steps(launch, types):
        y, dx, dw = _sizes(launch.ints)
        if family.endswith("_backward"):
            return (elementwise_steps(f"mg_local_conv_data_{suffix}", dx)
                    + elementwise_steps(f"mg_local_conv_weight_{suffix}", dw))
        return elementwise_steps(f"mg_local_conv_forward_{suffix}", y)
    return steps


def implement(table) -> None:
    """Register local_conv2d, region_restricted_conv and their gradients on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "local_conv.cu", _steps)
