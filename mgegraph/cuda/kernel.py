"""What the CUDA backend's kernel table holds: a kernel's source and its launches.

The contract between the hand-written kernels (csrc_cuda/*.cu, mgegraph/cuda/kernels/) and the
runtime (mgegraph/cuda/backend.py): every kernel is ``extern "C" __global__ void
mg_<name>(const MgArgs a)`` (csrc_cuda/mg_abi.cuh); ``a.bufs`` holds the instruction's inputs,
outputs and workspace in order, ``a.ints``/``a.floats`` its lowering's ``Launch.ints/floats``.
One instruction may launch several kernels (``steps``); each gets the same MgArgs.

>>> Step("mg_unary_exp_f32", (120, 1, 1), (256, 1, 1)).shared_bytes
0
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One kernel launch: the entry point's name in its module and the launch geometry."""

    entry: str                      # "mg_reduce_sum_f32_pass1"
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    # positions in the instruction's buffers that the launch's MgArgs get (None: all), for an
    # op with more buffers than MgArgs holds whose kernel reads few (a bucket's wait)
    buffers: tuple[int, ...] | None = None


@dataclass(frozen=True)
class CommStep:
    """A step that is a call of the plan's communicator, not a kernel (cuda/collective.py runs
    it): ``action`` "start" (a bucket's reduction on the communication stream), "wait" (the
    plan's stream waits for it), "all_reduce" or "all_gather" (on the plan's stream), or "copy"
    (a group of one: the value itself); ``buffers`` as Step's (send, then receive);
    ``count`` elements of ``dtype`` (a NumPy name); ``bucket`` pairs a start with its wait."""

    entry: str                      # "nccl_start", for reports
    action: str
    buffers: tuple[int, ...]
    count: int
    dtype: str
    bucket: int = 0


@dataclass(frozen=True)
class CudaKernel:
    """The ``Kernel.entry`` of the CUDA backend's kernels: ``source`` is a file of csrc_cuda/
    (``"reduce.cu"``) or the name of a source the backend renders (mgegraph/cuda/sources.py);
    ``steps(launch, types)`` gives the launches of one instruction, where ``types`` are the
    TensorTypes of its buffers, inputs then outputs."""

    source: str
    steps: Callable


@dataclass(frozen=True)
class RenderedKernel:
    """A kernel whose source the backend renders per instruction when it makes a plan's
    executable (mgegraph/cuda/render.py): ``render(ins, types)`` gives the kernel's text and its
    steps, for the plan's Instruction ``ins`` and its buffers' TensorTypes (inputs, then
    outputs). The texts of a plan go into one module, compiled once (and cached on disk)."""

    render: Callable
