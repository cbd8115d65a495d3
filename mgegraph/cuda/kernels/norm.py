"""layer_norm and batch_norm (training and inference) and their gradients on CUDA
(csrc_cuda/norm.cu), from the shared parameter blocks (mgegraph/kernel_abi/nn.py).

>>> sorted(KERNELS)[:2]
['batch_norm_backward_f32', 'batch_norm_backward_f64']
"""
from __future__ import annotations

from ...backend import Launch
from ...ir.types import short_name
from ...kernel_abi import nn as abi
from ..kernel import Step
from .reuse import blocks, column_steps, family_kernels, implement_shared

OPS = ("layer_norm", "layer_norm_backward", "batch_norm", "batch_norm_backward")


def _with_workspace(op, cpu_lower):
    # Design: the GPU computes the statistics and the parameter gradients in steps of their own,
    # before the step that writes dx (which may overwrite x or dy), so it keeps per-row
    # (mean, rstd) of layer norm, or per-channel factors of batch norm's dx, in a workspace of
    # doubles; the CPU kernel does it all in one loop (layer norm's workspace there holds dw/db).
    if op not in ("layer_norm_backward", "batch_norm_backward"):
        return cpu_lower

    def lower(node) -> Launch:
        launch = cpu_lower(node)
        count = launch.ints[0] if op == "layer_norm_backward" else launch.ints[1]
        per = 2 if op == "layer_norm_backward" else 4  # doubles per row / channel
        return Launch(launch.ints, launch.floats, workspace=8 * per * max(1, count))
    return lower


def elementwise_steps(entry: str, total: int) -> list[Step]:
    """A grid-stride pass over ``total`` elements."""
    return [Step(entry, (blocks(total, 256), 1, 1), (256, 1, 1))] if total else []


def _layer_norm_steps(entry, ints, backward):
    rows, n = ints[0], ints[1]
    if not backward:
        return column_steps(entry, rows, n, contiguous=True)
    return (column_steps(entry + "_stats", rows, n, contiguous=True)
            + elementwise_steps(entry + "_params", n)  # zeros when there are no rows
            + column_steps(entry, rows, n, contiguous=True))


def _batch_norm_steps(entry, ints, backward):
    batch, channels, inner = ints[:3]
    stats = backward or ints[3]  # training: the batch's statistics first
    return ((column_steps(entry + "_stats", channels, batch * inner, contiguous=True)
             if stats else [])
            + elementwise_steps(entry, batch * channels * inner))


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"
    backward = family.endswith("_backward")
    of = _layer_norm_steps if family.startswith("layer_norm") else _batch_norm_steps

    def steps(launch, types) -> list[Step]:
        return of(entry, launch.ints, backward)
    return steps



def implement(table) -> None:
    """Register layer_norm, batch_norm and their backward ops on ``table``."""
    implement_shared(table, abi, _with_workspace, ops=OPS)


KERNELS = family_kernels(abi, "norm.cu", _steps, ops=OPS)
