"""Which ways of the CPU's kernels are deterministic, for ``compile(tune="deterministic")``.

A way is deterministic when it runs on the package's own tiles, each output summed in an order
fixed by the plan alone (not by the threads, nor a BLAS's blocking): it gives the same bits on
any thread count, and the C runtime, which runs the same tiles from the same headers
(docs/c_runtime.md, "One source for both executors"), gives them too. The BLAS ways (im2col,
the batched and direct GEMMs) are not; nor is Winograd where its GEMMs leave the row tiles
(AVX-512's gather tile hands a block's last columns to the BLAS).
"""
from __future__ import annotations

from .. import conv as K

# a convolution's ways on the package's own loops: the gather tiles (conv_gather.h's driver,
# the executor's packed path and the C runtime's for every convolution it packs), the row
# tiles, the pointwise tiles and the depthwise loops, whose sums are the gather tiles'; and
# backward data's GEMM and col2im on gemm_tile.h's panels ("tiles": conv_data_gemm.h, the C
# runtime's at every stride)
CONV_OWN_WAYS = ("gather", "gather packed", "blocked", "pointwise", "depthwise", "tiles")
CONV_OPS = ("conv2d", "conv2d_packed", "conv2d_backward_data", "conv2d_backward_filter")
GEMM_OPS = ("matmul", "linear", "addmm")


def deterministic(op: str, launch) -> bool:
    """Whether ``launch`` (a way of ``op``: its ``path``, "gather, 2 threads") is
    deterministic."""
    way = launch.path.partition(", ")[0]
    if op in GEMM_OPS:  # the tiles; a float32 row's GEMV (gemv_row.h)
        return way in ("tiles", "gemv", "gemv split k")
    if op in CONV_OPS:
        # Winograd's GEMMs on the row tiles: plans for AVX2, the widest tiles of this CPU
        return way in CONV_OWN_WAYS or (way == "winograd" and K.blocked_isas()[-1] == "avx2")
    return False
