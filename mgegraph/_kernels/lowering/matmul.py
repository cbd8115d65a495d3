"""CPU lowerings of matmul, linear and addmm: the shared parameter blocks (mgegraph/kernel_abi/
matmul.py) with the CPU's choices for each product (threads, the tiles: the gather tiles on
AVX-512, gemm_tile.h's panels on AVX2; a single row's split of k, their workspace), once
_kernels/linalg.pyx is checked to read those blocks."""
from __future__ import annotations

import numpy as np

from ...kernel_abi import matmul as abi
from ...kernel_abi.matmul import Gemm
from ...ops.matmul import matmul_dims
from ...ops.registry import FLOAT_DTYPES
from .. import conv as C
from .. import linalg as K
from .. import parallel
from .built import check_built
from .threads import thread_choices, way_label

# FLOPs one thread of a GEMM should have for a second to pay for the fork/join (~10 us asleep,
# a few awake): 2 MFLOP is ~20 us of this machine's single-core sgemm (grain.h, which the C
# runtime reads too)
GRAIN_FLOPS = parallel.GRAIN_FLOPS


def gemm_threads(dtype, m, n, k) -> int:
    """The column blocks a float GEMM is planned in (linalg.pyx's Threads); 1 for integers. A
    single row is a gemv, which reads its (k, n) matrix once: its bytes decide, as for the
    other bandwidth-bound kernels (grain.h's rule: the C runtime decides by it too)."""
    if dtype not in FLOAT_DTYPES:
        return 1
    return parallel.gemm_threads(m, n, k, np.dtype(dtype).itemsize)


# Which float32 GEMMs run on the gather tiles (linalg.pyx's tile_product) rather than the BLAS.
# Measured on the 2-core AMD EPYC (Zen 4), MKL the BLAS, tiles ÷ MKL by medians of 6 alternating
# rounds (/work/scratch/abtile.py), 1 thread / 2 threads:
#   (m, n, k) = (128, 1024, 1024), B^T stored (a linear):  0.92 / 0.71
#   (128, 1024, 784) B^T: 0.93 / 0.77;  (128, 1024, 1024) B: 0.94 / 0.78
#   (1024, 1024, 128) A^T (a weight's gradient): 0.95 / 0.93;  (1024, 784, 128) A^T: 0.91 / 1.03
#   (8, 1024, 1024) B: 0.62 / 0.36;  (4, 1024, 1024) B: 0.58 / 0.30;  (128, 64, 64) B: 0.92 / 1.09
#   (16, 1000, 512) B^T: 1.15 / 0.91;  (32, 1000, 512) B^T: 1.01 / 0.87;  (4, 512, 512) B^T: 1.20
#   (128, 1024, 4096) B: 0.95 / 0.84;  (128, 512, 8192) B: 0.98 / 0.89 (blocks past L2 still pay)
# A stored B^T is transposed as it is packed, a pass over B that a few rows do not pay back.
# Each thread's packed block holds all of k: past TILE_MAX_K (4 MiB a thread) the BLAS, whose
# panels are bounded, keeps the workspace small.
# A stored A^T (a weight's gradient g^T x) is gathered a column of A at a time, m floats apart
# for each step of k: every step a new cache line, a new page every few steps, which the
# hardware prefetcher does not follow. Over a long k (the rows of a batch times a sequence)
# the BLAS, which packs A^T first, wins. Measured on the 2-core Intel Xeon (Emerald Rapids,
# AVX-512), OpenBLAS the BLAS, tiles ÷ BLAS by the fastest of 25 runs of a one-GEMM plan each
# way, 1 thread, the machine shared with other jobs (benchmarks/lstm.py's weight gradients):
#   (m, n, k) = (512, 64, 512) A^T: 1.04;  (512, 128, 512) A^T: 1.28;  (128, 512, 512) A^T: 1.16
#   (512, 64, 1024) A^T: 1.32;  (512, 128, 1024) A^T: 1.60;  (512, 64, 2048) A^T: 1.44-1.71
#   (512, 64, 64) A^T: 0.91;  (512, 128, 64) A^T: 1.03 (an LSTM step's weight gradient)
#   (512, 64, 256) A^T: 1.01;  (512, 128, 256) A^T: 1.16;  (128, 512, 256) A^T: 1.11
TILE_MIN_ROWS, TILE_MIN_ROWS_BT, TILE_MIN_COLUMNS, TILE_MAX_K = 4, 32, 64, 16384
TILE_MAX_K_AT = 256  # a batch's rows: MLP-train's (1024, 1024, 128) A^T stays on the tiles
TILE_COLUMNS = 64  # a packed block of op(B): each thread's workspace holds one

# AVX2 (FMA, no AVX-512): gemm_tile.h's panels, the C runtime's GEMM, against OpenBLAS. On the
# 2-core AMD EPYC (Zen 3), load average 4-11 (other jobs), one-GEMM plans called 100-200 times
# each way interleaved (benchmarks/gemm_tiles.py), panels / OpenBLAS by the fastest calls (then
# by medians), one thread / two:
#   a stored A^T of few rows (the weight gradient of a narrow layer): (10, 1024, 128) 0.60-0.62
#     (0.69-0.76) / 0.62 (0.73); (10, 128, 32) 0.89-0.92 (0.91-0.92) / 0.88 (0.93)
#   a short k (the input gradient through a narrow layer): (128, 1024, 10) 0.82-0.90 (0.81-1.15)
#     / 0.88-0.90 (0.98-1.15); (32, 128, 10) 0.97-1.04 (1.03-1.05) / 1.02 (1.04)
#   but a stored B^T of few rows (nn.Linear at a small batch) varies with the threads: (4, 1024,
#     784) 0.78-0.91 (0.90-1.04) / 1.04-1.22 (0.68-2.25); (16, 1024, 1024) 0.95-1.22 (1.07-1.18)
#     / 1.00-1.41 (0.86-2.42); and on a few columns 1.09-1.20: (4, 10, 1024) B^T
#   and OpenBLAS's own kernel is faster on the large GEMMs: (128, 1024, 784) B^T 1.04-1.06;
#     (128, 1024, 1024) 1.01-1.16 (1.23); (1024, 784, 128) A^T 1.05-1.11 (0.98-1.03); (32,
#     1000, 512) B^T 1.08-1.10; (288, 1024, 64), the U-Net's transposed convolution, 0.94-0.96
#     (1.14-1.21); and on x @ w of 2-16 rows it varies run to run, 0.84-1.31.
# Earlier rounds at load 3-6 (medians of 10 ms blocks, and by CPU time) agreed where the rule
# takes the panels. At two threads the medians are mostly the scheduler's (a woken thread waits
# for a core), which is why the panels pack in the GEMM's one run of the threads.
PANELS_MAX_ROWS_AT = 16  # a stored A^T's product of at most this many rows
PANELS_MIN_COLUMNS = 64  # ... and at least this many columns
PANELS_MAX_K = 16        # a product over at most this many steps of k
PANELS_MAX_BYTES = 16 << 20  # op(B) and op(A) packed: the workspace of a GEMM on the panels


def tiles_isa() -> str | None:
    """The instruction set of this CPU's "tiles" way: "avx512" (linalg.pyx's gather tiles),
    "avx2" (AVX2 with FMA: gemm_tile.h's panels, the C runtime's GEMM), else None (none)."""
    widest = C.blocked_isas()[-1]
    return widest if widest in ("avx512", "avx2") else None


def tiles_apply(dtype, m, n, k) -> bool:
    """Whether the tiles compute a float32 GEMM of C (m, n) over k: 0 < k <= TILE_MAX_K on
    AVX-512; on AVX2 while op(B) and op(A) packed (its workspace) take at most
    PANELS_MAX_BYTES."""
    if np.dtype(dtype) != np.float32 or not 0 < k <= TILE_MAX_K or m == 1:
        return False  # a single row is the GEMV's, which reads its matrix once
    isa = tiles_isa()
    return isa == "avx512" or isa == "avx2" and K.panels_bytes(m, n, k) <= PANELS_MAX_BYTES


def tiles_rule(dtype, m, n, k, transpose_b, transpose_a=False) -> bool:
    """Whether a GEMM of C (m, n) over k goes to the tiles where they apply: on AVX-512 (the
    gather tiles) at least TILE_MIN_COLUMNS columns and TILE_MIN_ROWS rows (TILE_MIN_ROWS_BT
    when B is stored transposed), and k at most TILE_MAX_K_AT when A is stored transposed; on
    AVX2 (the panels) panels_rule's."""
    if not tiles_apply(dtype, m, n, k):
        return False
    if tiles_isa() == "avx2":
        return panels_rule(m, n, k, transpose_b, transpose_a)
    return (n >= TILE_MIN_COLUMNS and m >= (TILE_MIN_ROWS_BT if transpose_b else TILE_MIN_ROWS)
            and (not transpose_a or k <= TILE_MAX_K_AT))


def panels_rule(m, n, k, transpose_b, transpose_a) -> bool:
    """Whether a float32 GEMM on AVX2 that the panels apply to (tiles_apply: a single row is
    the GEMV's) goes to them: a stored A^T of at most PANELS_MAX_ROWS_AT rows and at least
    PANELS_MIN_COLUMNS columns, or k at most PANELS_MAX_K."""
    few_rows = transpose_a and m <= PANELS_MAX_ROWS_AT and n >= PANELS_MIN_COLUMNS
    return few_rows or k <= PANELS_MAX_K


def accumulates_exactly(product) -> bool:
    """Whether this backend's addmm of ``product`` (a 2-D matmul node the accumulate pass
    would absorb) rounds as the mul and add or sub it replaces: on the tiles, where each element
    is added as those ops add it (linalg.pyx's row_out), not through the BLAS."""
    a, b = product.inputs
    _, _, _, m, n, k = matmul_dims(a.type, b.type, product.attr)
    return tiles_rule(a.dtype, m, n, k, product.attr["transpose_b"], product.attr["transpose_a"])


def _tiles_workspace(threads, m, n, k) -> int:
    if tiles_isa() == "avx2":
        return K.panels_bytes(m, n, k)  # all of op(B) in panels, and of op(A) where it pays
    return threads * k * TILE_COLUMNS * 4  # one packed block of op(B) per thread


def gemv_split(dtype, m, n, k, transpose_b, threads) -> bool:
    """Whether a single float32 row times a stored B (k, n) runs on its threads by parts of k
    (linalg.pyx's gemv_split: each thread reads whole rows of B), with a workspace for the
    parts' sums; without it the threads split the columns (the same bits)."""
    return (np.dtype(dtype) == np.float32 and m == 1 and n > 0 and not transpose_b
            and threads > 1 and K.gemv_parts(k) > 1)


def _workspace(tiles, split, threads, m, n, k) -> int:
    if tiles:
        return _tiles_workspace(threads, m, n, k)
    return K.gemv_parts(k) * n * 4 if split else 0


def cpu_gemm(dtype, m: int, n: int, k: int, transpose_b: bool,
             transpose_a: bool = False) -> Gemm:
    """How the CPU runs a product of C (m, n) over k: its column blocks, whether on the tiles
    or a single row split over k, and the workspace that takes."""
    threads = gemm_threads(dtype, m, n, k)
    tiles = tiles_rule(dtype, m, n, k, transpose_b, transpose_a)
    return _gemm(dtype, m, n, k, threads, tiles, gemv_split(dtype, m, n, k, transpose_b, threads))


def _gemm(dtype, m, n, k, threads, tiles, split) -> Gemm:
    # a float32 row runs gemv_row.h's loops whatever the BLAS (linalg.pyx's float_product), as
    # the C runtime does: the way says so (compile(tune="deterministic") keeps it)
    row = m == 1 and np.dtype(dtype) == np.float32
    way = "tiles" if tiles else "gemv split k" if split else "gemv" if row else "blas"
    return Gemm(threads, tiles, split, _workspace(tiles, split, threads, m, n, k),
                way_label(way, threads) if dtype in FLOAT_DTYPES else "")


def cpu_gemms(dtype, m: int, n: int, k: int, transpose_b: bool,
              transpose_a: bool = False) -> tuple[Gemm, ...]:
    """Every way the CPU runs the product (the measured choice's candidates): the BLAS and,
    for float32 where tiles_apply (the gather tiles on AVX-512, the panels on AVX2), the tiles,
    on each of thread_choices and the rules' count; a single row times a stored B also split
    over k. Integers have one way. (``transpose_a`` is the rule's: the tiles stay a candidate
    for a stored A^T, the measurement decides.)"""
    if dtype not in FLOAT_DTYPES:
        return (cpu_gemm(dtype, m, n, k, transpose_b),)
    tiles = (False, True) if tiles_apply(dtype, m, n, k) else (False,)
    ways = []
    for threads in sorted({*thread_choices(2 * m * n * k), gemm_threads(dtype, m, n, k)}):
        splits = (False, True) if gemv_split(dtype, m, n, k, transpose_b, threads) else (False,)
        ways += [_gemm(dtype, m, n, k, threads, t, split) for t in tiles for split in splits
                 if not (t and split)]
    return tuple(ways)


def implement(table) -> None:
    check_built(K, **abi.FIELDS)
    abi.implement(table, gemm=cpu_gemm, gemms=cpu_gemms)
