"""MegEngine's NHWC conversion for mixed precision: ``convert_tensor_format`` and
``convert_module_format`` tag 4- and 5-d tensors with the "nhwc" memory format.

In MegEngine the tag also lays the bytes out channels-last for the GPU's tensor-core kernels,
while the shape stays the logical (N, C, H, W). mgegraph's eager values live in host memory
and its CPU kernels (and its compiler, for a GPU plan) pick their own layouts, so here the tag
is only the tag: shapes, values and results are those of the untagged tensors, and a script
that converts its model runs unchanged.

>>> model = amp.convert_module_format(model)
>>> image = amp.convert_tensor_format(image)
"""
from __future__ import annotations

import copy

from ..eager.tensor import Tensor
from ..ir.errors import GraphError

_IMAGE_NDIMS = (4, 5)  # (N, C, H, W) and (N, C, D, H, W), and the weights of those shapes


def convert_tensor_format(x: Tensor, inplace: bool = True) -> Tensor:
    """``x`` tagged "nhwc" when it is 4- or 5-d (others are returned as they are): itself with
    ``inplace``, else a new tensor of the same value."""
    if not isinstance(x, Tensor):
        raise GraphError(f"convert_tensor_format takes a Tensor, got {type(x).__name__}")
    if x.ndim not in _IMAGE_NDIMS or x.format == "nhwc":
        return x
    if not inplace:
        x = Tensor(x, format="nhwc")
    x.format = "nhwc"
    return x


def convert_module_format(module, inplace: bool = True):
    """``module`` (or, without ``inplace``, a deep copy of it) with every 4- and 5-d parameter
    and buffer tagged "nhwc"; loading a state dict later keeps the tags (it writes values)."""
    if not inplace:
        module = copy.deepcopy(module)
    for _, tensor in module.named_tensors():
        convert_tensor_format(tensor, inplace=True)
    return module
