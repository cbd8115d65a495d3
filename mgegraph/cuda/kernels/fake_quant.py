"""fake_quant on CUDA (csrc_cuda/fake_quant.cu), from the shared parameter block
(mgegraph/kernel_abi/fake_quant.py): a grid-stride loop over the elements.

>>> sorted(KERNELS)
['fake_quant_f32', 'fake_quant_f64']
"""
from __future__ import annotations

from ...kernel_abi import fake_quant as abi
from .quantize import per_element_steps
from .reuse import family_kernels, implement_shared


def implement(table) -> None:
    """Register fake_quant on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "fake_quant.cu", per_element_steps)
