"""The threads field of a memory-bound kernel's parameter block: the policy of
_kernels/parallel.pyx (threads_for) applied to the bytes an instruction moves; and the thread
counts a measured choice tries (compile(tune=...)), with the names of its ways."""
from __future__ import annotations

from .. import parallel


def moved_bytes(node) -> int:
    """The bytes a node's kernel reads and writes when it touches each input and output once."""
    return sum(v.size * v.dtype.itemsize for v in (*node.inputs, *node.outputs))


def node_threads(node) -> int:
    """The threads to plan for ``node``'s memory-bound kernel (capped again when it runs).

    >>> node_threads(node)  # a relu_backward of 32x64x32x32 float32: 24 MiB   # doctest: +SKIP
    2
    """
    return parallel.threads_for(moved_bytes(node))


# FLOPs from which a measured choice tries an instruction on all its threads only: fewer never
# won there (ResNet-18's and the MLPs' convolutions and GEMMs, 2 cores, 60 MFLOP and up: one
# thread took 1.5-2.5x as long), and each way tried costs a call or more of measuring
SPLIT_ALWAYS_FLOPS = 50_000_000


def thread_choices(flops: int = 0) -> tuple[int, ...]:
    """The thread counts a measured choice tries for an instruction of ``flops``: one, the
    powers of two between, and all the plan may use (parallel.max_threads); all alone from
    SPLIT_ALWAYS_FLOPS."""
    most = min(parallel.max_threads(), parallel.TEAM_LIMIT)  # parallel_for's largest team
    if flops >= SPLIT_ALWAYS_FLOPS:
        return (most,)
    return tuple(sorted({1, most, *(t for t in (2, 4, 8, 16, 32, 64) if t < most)}))


def way_label(path: str, threads: int, transposed: bool = False) -> str:
    """A Launch's ``path``: the kernel's way and its threads, "winograd, 2 threads"."""
    return f"{path}{' transposed' if transposed else ''}, {threads} thread{'s' * (threads > 1)}"
