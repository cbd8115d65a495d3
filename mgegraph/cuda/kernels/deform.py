"""The deform family on CUDA (csrc_cuda/deform.cu), from the shared parameter blocks of
mgegraph/kernel_abi/deform.py: the forwards a thread per output; deform_im2col_backward two
steps (a thread per plane of dx, then a thread per offset pair and mask entry), and
correlation_backward a thread per plane of both gradients: the CPU's scatter orders, so no
atomics.

>>> sorted(KERNELS)[:2]
['correlation_backward_f32', 'correlation_backward_f64']
"""
from __future__ import annotations

from ...ir.types import short_name
from ...kernel_abi import deform as abi
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

_IM2COL = {f: abi.IM2COL_FIELDS.index(f) for f in ("batch", "channels", "kernel_h", "kernel_w",
                                                    "out_h", "out_w", "groups")}
_CORRELATION = {f: abi.CORRELATION_FIELDS.index(f) for f in ("batch", "channels", "out_c",
                                                             "out_h", "out_w")}


def _im2col_sizes(ints) -> tuple[int, int, int]:
    """(planes of the input, column entries per plane, deformable groups)."""
    get = {f: ints[i] for f, i in _IM2COL.items()}
    per_plane = get["kernel_h"] * get["kernel_w"] * get["out_h"] * get["out_w"]
    return get["batch"] * get["channels"], per_plane, get["batch"] * get["groups"]


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types):
        ints = launch.ints
        if family.startswith("deform_im2col"):
            planes, per_plane, groups = _im2col_sizes(ints)
            if family == "deform_im2col":
                return elementwise_steps(entry, planes * per_plane)
            return (elementwise_steps(entry + "_data", planes)
                    + elementwise_steps(entry + "_points", groups * per_plane))
        get = {f: ints[i] for f, i in _CORRELATION.items()}
        if family == "correlation":
            return elementwise_steps(entry, get["batch"] * get["out_c"] * get["out_h"]
                                     * get["out_w"])
        return elementwise_steps(entry, get["batch"] * get["channels"])
    return steps


def implement(table) -> None:
    """Register deform_im2col, correlation and their gradients on ``table``."""
    implement_shared(table, abi)


KERNELS = family_kernels(abi, "deform.cu", _steps)
