"""softmax, log_softmax, cross entropy and its gradient on CUDA (csrc_cuda/softmax.cu), from the
shared parameter blocks of mgegraph/kernel_abi/nn.py.

>>> sorted(KERNELS)[:2]
['cross_entropy_backward_f32', 'cross_entropy_backward_f64']
"""
from __future__ import annotations

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import nn as abi
from ..kernel import Step
from .reuse import column_steps, family_kernels, implement_shared

OPS = ("softmax", "log_softmax", "cross_entropy", "cross_entropy_backward")


def _reduced(ints) -> bool:
    return ints[4] != abi.REDUCTION_CODES["none"]


def _with_workspace(op, cpu_lower):
    # Design: a reduced cross entropy sums its samples' losses, which one pass over columns in
    # parallel cannot do in a fixed order; each column writes its loss (a double) to the
    # workspace and a second step sums them. The CPU kernel sums as it goes and needs none.
    if op != "cross_entropy":
        return cpu_lower

    def lower(node) -> Launch:
        launch = cpu_lower(node)
        if not _reduced(launch.ints):
            return launch
        outer, _, inner = launch.ints[:3]
        return Launch(launch.ints, launch.floats, workspace=8 * max(1, outer * inner))
    return lower


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types) -> list[Step]:
        outer, n, inner = launch.ints[:3]
        launches = column_steps(entry, outer * inner, n, contiguous=inner == 1)
        if family == "cross_entropy" and _reduced(launch.ints):
            launches.append(Step(entry + "_total", (1, 1, 1), (256, 1, 1)))
        return launches
    return steps



def implement(table) -> None:
    """Register softmax, log_softmax and cross entropy (forward, backward) on ``table``."""
    implement_shared(table, abi, _with_workspace, ops=OPS)


KERNELS = family_kernels(abi, "softmax.cu", _steps, ops=OPS)
