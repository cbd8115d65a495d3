"""The threads field of a memory-bound kernel's parameter block: the policy of
_kernels/parallel.pyx (threads_for) applied to the bytes an instruction moves."""
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
