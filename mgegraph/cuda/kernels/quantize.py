"""quantize and dequantize on CUDA (csrc_cuda/quantize.cu), from the shared parameter block
(mgegraph/kernel_abi/quantize.py): a grid-stride loop over the elements.

>>> sorted(KERNELS)[:2]
['dequantize_i32', 'dequantize_i8']
"""
from __future__ import annotations

from ...ir.errors import GraphError
from ...ir.types import short_name
from ...kernel_abi import quantize as abi
from ..abi import LIMITS
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared


def per_element_steps(family, dtype):
    """The launch steps of a kernel over an (outer, channels, inner) value, one thread per
    element (quantize's and dequantize's, fake_quant's)."""
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list:
        outer, channels, inner = launch.ints[:3]
        return elementwise_steps(entry, outer * channels * inner)
    return steps


def _within_the_float_block(op, cpu_lower):
    # the scales and zero points ride in MgArgs' float block: per-channel parameters of more
    # channels than it holds are refused when the plan is made, not when it first runs
    def lower(node):
        launch = cpu_lower(node)
        if len(launch.floats) > LIMITS["FLOATS"]:
            raise GraphError(f"{op} of {len(launch.floats) // 2} channels: the CUDA kernel takes "
                             f"per-channel parameters of at most {LIMITS['FLOATS'] // 2} "
                             "channels (the CPU's takes any)")
        return launch
    return lower


def implement(table) -> None:
    """Register quantize and dequantize on ``table``."""
    implement_shared(table, abi, _within_the_float_block)


KERNELS = family_kernels(abi, "quantize.cu", per_element_steps)
