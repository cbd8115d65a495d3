# Matrix products: batched matmul with broadcast batch dims, linear (GEMM + bias) and addmm
# (a GEMM added into a matrix in place, BLAS's beta = 1).
#
# Parameter layout (ints): the structs below, whose field names this module exports as
# MATMUL_FIELDS, LINEAR_FIELDS and ADDMM_FIELDS (the lowering,
# mgegraph/_kernels/lowering/matmul.py, packs them by name). matmul's fixed fields are followed
# by three groups of ``ndim`` ints: the batch shape, then the batch strides of a and of b, in
# elements and 0 on broadcast batch dims, so broadcast operands are never materialised; the
# output is contiguous (batch..., m, n). Float dtypes go to the BLAS in use (blas.pxd,
# blas_select.py), but for float32 GEMMs the lowering marks ``tiles`` (on AVX-512 the gather
# tiles, on AVX2 gemm_tile.h's panels, the C runtime's GEMM: below; their workspace follows the
# outputs) and a float32 single row, which gemv_row.h's loops stream faster; integer dtypes use
# a plain loop.
#
# Threads: ``threads`` (the lowering's, from the GEMM's FLOPs, or a gemv's bytes) is how many
# column blocks of C a float GEMM is cut into when the BLAS in use is split by the kernels
# (blas_split_gemms: OpenBLAS), each block one single-threaded BLAS call on a thread of the
# plan's one OpenMP pool. The blocks follow the planned count, not the threads running, so a
# plan gives the same bits on one core or two. With MKL, which runs on that pool itself, the
# whole GEMM is one call. A single row is cut into column blocks whatever the BLAS, or where
# its B is stored (k, n) into parts of k (gemv_split, with a workspace for the parts' sums).

from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy, memset
from cython cimport floating

from .dtypes cimport num_t
from .abi cimport Call, KERNEL_OK, KERNEL_UNSUPPORTED, kernel_fn, kernel_address
from .params cimport fields_of
from .blas cimport gemm, gemm_scaled
from .blas_table cimport blas_one_thread, blas_restore_threads, blas_split_gemms
from .parallel cimport parallel_for, cut
from .activation cimport activate
from .nditer cimport dims_ok, Odometer, odometer_init, odometer_next, count_rows
from .tiles cimport cpu_isa_ok, conv_gather_fn, conv_tile, conv_out_of, packed_tile
from .tiles cimport CONV_PIX_MAX
from .window cimport ceil_div

cdef extern from *:
    """
    /* a 64-column row of c: the four cache lines addmm's epilogue reads */
    static inline void mg_prefetch_row(const float* p) {
        for (int i = 0; i < 64; i += 16) __builtin_prefetch(p + i, 0, 3);
    }
    """
    void prefetch "mg_prefetch_row"(const float* p) noexcept nogil

cdef extern from "gemv_row.h":
    ctypedef void (*gemv_fn)(const float* a, const float* b, Py_ssize_t ldb, Py_ssize_t k,
                             Py_ssize_t j0, Py_ssize_t j1, float alpha, int beta,
                             float* y) noexcept nogil
    gemv_fn gemv_of(int dots) noexcept nogil
    ctypedef void (*gemv_parts_fn)(const float* a, const float* b, Py_ssize_t ldb, Py_ssize_t k,
                                   Py_ssize_t n, Py_ssize_t c0, Py_ssize_t c1,
                                   float* partials) noexcept nogil
    ctypedef void (*gemv_finish_fn)(const float* partials, Py_ssize_t parts, Py_ssize_t n,
                                    Py_ssize_t j0, Py_ssize_t j1, float alpha, int beta,
                                    float* y) noexcept nogil
    Py_ssize_t c_gemv_parts "gemv_parts"(Py_ssize_t k) noexcept nogil
    void gemv_split_of(gemv_parts_fn* parts, gemv_finish_fn* finish) noexcept nogil

# tiles: the GEMM runs on the gather tiles, its workspace their packed blocks of op(B) (below);
# gemv_split: a single row times a stored B split among threads by parts of k, its workspace
# the parts' sums (gemv_parts(k) x n floats; gemv_row.h). At most one of the two.
ctypedef struct Matmul:  # then batch shape[ndim], batch strides of a[ndim], of b[ndim]
    Py_ssize_t m, n, k, transpose_a, transpose_b, threads, tiles, gemv_split, ndim

ctypedef struct Linear:  # bufs: x, w, [bias,] y[, workspace]
    Py_ssize_t m, n, k, has_bias, activation, threads, tiles  # activation: activation.h's

ctypedef struct Addmm:  # bufs: c, a, b, [scale,] out[, workspace]; floats: alpha
    Py_ssize_t m, n, k, transpose_a, transpose_b, has_scale, threads, tiles, gemv_split


cdef Matmul _matmul
cdef Linear _linear
cdef Addmm _addmm
MATMUL_FIELDS = fields_of(_matmul, sizeof(Matmul))
LINEAR_FIELDS = fields_of(_linear, sizeof(Linear))
ADDMM_FIELDS = fields_of(_addmm, sizeof(Addmm))


def gemv_parts(Py_ssize_t k) -> int:
    """The parts a single row's product over ``k`` sums in (gemv_row.h): the lowering sizes a
    split's workspace by it."""
    return c_gemv_parts(k)


# -- one matrix product -------------------------------------------------------------------------
cdef inline void matmul_loop(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                             const num_t* a, const num_t* b, num_t* c) noexcept nogil:
    # i-p-j order: the innermost loop walks a row of B and of C
    cdef Py_ssize_t ai = 1 if ta else k, ap = m if ta else 1
    cdef Py_ssize_t bp = 1 if tb else n, bj = k if tb else 1
    cdef Py_ssize_t i, p, j
    cdef num_t s
    for i in range(m):
        for j in range(n):
            c[i * n + j] = 0
        for p in range(k):
            s = a[i * ai + p * ap]
            for j in range(n):
                c[i * n + j] += s * b[p * bp + j * bj]


ctypedef struct ColumnBlocks:  # one float GEMM C = alpha op(A) op(B) + beta C, cut into `blocks`
    Py_ssize_t m, n, k, blocks  # of columns
    bint ta, tb, f64
    double alpha, beta
    const void* a
    const void* b
    void* c

cdef enum:
    BLOCK_COLUMNS = 16  # blocks start on a multiple: whole vectors for the BLAS's microkernels


cdef inline Py_ssize_t block_start(const ColumnBlocks* g, Py_ssize_t i) noexcept nogil:
    return min(g.n, cut((g.n + BLOCK_COLUMNS - 1) // BLOCK_COLUMNS, g.blocks, i) * BLOCK_COLUMNS)


cdef inline void column_block(const ColumnBlocks* g, Py_ssize_t j0, Py_ssize_t j1) noexcept nogil:
    # C[:, j0:j1] = op(A) op(B)[:, j0:j1]: rows j0.. of a stored B^T, columns j0.. of a stored B
    cdef Py_ssize_t lda = g.m if g.ta else g.k, ldb = g.k if g.tb else g.n
    cdef Py_ssize_t at = j0 * g.k if g.tb else j0
    if g.m == 1 and not g.f64:  # a float32 row: gemv_row.h (A's one row is contiguous)
        gemv_of(g.tb)(<const float*>g.a, <const float*>g.b, ldb, g.k, j0, j1, <float>g.alpha,
                      g.beta != 0, <float*>g.c)
    elif g.f64:
        gemm_scaled(g.ta, g.tb, g.m, j1 - j0, g.k, g.alpha, <const double*>g.a, lda,
                    <const double*>g.b + at, ldb, g.beta, <double*>g.c + j0, g.n)
    else:
        gemm_scaled(g.ta, g.tb, g.m, j1 - j0, g.k, <float>g.alpha, <const float*>g.a, lda,
                    <const float*>g.b + at, ldb, <float>g.beta, <float*>g.c + j0, g.n)


cdef int column_blocks(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const ColumnBlocks* g = <const ColumnBlocks*>ctx
    cdef int previous = blas_one_thread()  # no BLAS pool under (or beside) this one
    cdef Py_ssize_t i
    for i in range(lo, hi):
        column_block(g, block_start(g, i), block_start(g, i + 1))
    blas_restore_threads(previous)
    return KERNEL_OK


ctypedef struct GemvSplit:  # a single row times a stored B, split among threads by parts of k
    const float* a
    const float* b
    float* partials
    Py_ssize_t n, k
    gemv_parts_fn sums


cdef int gemv_split_parts(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const GemvSplit* g = <const GemvSplit*>ctx
    g.sums(g.a, g.b, g.n, g.k, g.n, lo, hi, g.partials)
    return KERNEL_OK


cdef inline void gemv_split(Py_ssize_t n, Py_ssize_t k, float alpha, const float* a,
                            const float* b, float beta, float* c, Py_ssize_t threads,
                            float* partials) noexcept nogil:
    # the threads sum their parts of k for every column into ``partials``, then this thread
    # adds them up in order: the bits of gemv_rows on one thread (gemv_row.h)
    cdef GemvSplit g
    cdef gemv_finish_fn finish
    cdef Py_ssize_t parts = c_gemv_parts(k)
    gemv_split_of(&g.sums, &finish)
    g.a, g.b, g.partials, g.n, g.k = a, b, partials, n, k
    parallel_for(threads, parts, gemv_split_parts, &g)
    finish(partials, parts, n, 0, n, alpha, beta != 0, c)


cdef inline void float_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                               floating alpha, const floating* a, const floating* b,
                               floating beta, floating* c, Py_ssize_t threads,
                               float* partials) noexcept nogil:
    # C = alpha op(A) op(B) + beta C (beta 0 or 1; C contiguous). A single float32 row (a gemv,
    # which reads its whole matrix once: bandwidth-bound) runs gemv_row.h's loops, faster than
    # either BLAS's here, split among the planned threads whatever the BLAS (MKL ran its gemv
    # on one thread): a stored B by parts of k where the lowering gave the workspace for their
    # sums (``partials``), else by columns.
    cdef ColumnBlocks g
    cdef int previous
    if floating is float:
        if m == 1 and n > 0 and threads <= 1:
            gemv_of(tb)(a, b, k if tb else n, k, 0, n, alpha, beta != 0, c)
            return
        if m == 1 and n > 0 and not tb and partials != NULL and c_gemv_parts(k) > 1:
            gemv_split(n, k, alpha, a, b, beta, c, threads, partials)
            return
    if m == 0 or n == 0 or not (blas_split_gemms() or m == 1 and threads > 1):
        if alpha == 1 and beta == 0:  # gemm's gemv for a vector operand
            gemm(ta, tb, m, n, k, a, b, c, False)
        else:
            gemm_scaled(ta, tb, m, n, k, alpha, a, m if ta else k, b, k if tb else n, beta, c, n)
        return
    g.m, g.n, g.k, g.ta, g.tb, g.f64 = m, n, k, ta, tb, floating is double
    g.alpha, g.beta = alpha, beta
    g.a, g.b, g.c = a, b, c
    g.blocks = max(1, min(threads, (n + BLOCK_COLUMNS - 1) // BLOCK_COLUMNS))
    # the caller holds the one-thread guard across the region, as conv.pyx's entry points do
    # (SciPy's OpenBLAS keeps the count for the whole process: blas_table.pxd)
    previous = blas_one_thread()
    parallel_for(g.blocks, g.blocks, column_blocks, &g)
    blas_restore_threads(previous)


cdef inline void matrix_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                                const num_t* a, const num_t* b, num_t* c,
                                Py_ssize_t threads, float* partials) noexcept nogil:
    if num_t is float or num_t is double:
        float_product(ta, tb, m, n, k, 1, a, b, 0, c, threads, partials)
    else:
        matmul_loop(ta, tb, m, n, k, a, b, c)


# -- float32 GEMMs on conv_tile.h's gather tiles --------------------------------------------------
# Where the lowering sets ``tiles`` (float32 with AVX-512: lowering/matmul.py's tiles_rule), a
# GEMM runs on the 64-column gather tile that conv2d_packed runs on prepacked weights (7 rows x
# 64 columns of C in 28 zmm accumulators), with op(B) packed as the call runs. Work items are
# column blocks of 64, by groups of row tiles when there are too few blocks for the threads. An
# item packs its block of op(B), k x 64 floats (256 KiB at k = 1024), into its thread's part of
# the workspace, where it stays in L2 while every row tile of op(A) passes; rows of op(A) are
# read where they lie (op(A) transposed: down a column of A, stride m). A stored B is packed by
# copying 64 floats of each row, or for a few rows read in place (IN_PLACE_ROWS); a stored B^T
# (linear's weights) is transposed 8 x 8 in registers by conv_out's loop. Each element of C is
# one tile's sum over k in order, so the bits do not depend on the threads, and eager and
# compiled runs share them (one rule, one kernel). The epilogue (row_out) runs on each tile's
# rows while they are in L1.
cdef enum:
    TILE_CH = 64   # columns of C per gather tile, and of a packed block of op(B)
    TILE_ISA = 2   # conv_tile.h's AVX-512
    # A stored B's whole blocks are read in place (rows n apart) by products of at most this
    # many rows: packing pays back over more row tiles. Tiles read in place ÷ packed, medians of
    # 6 alternating rounds on the 2-core EPYC (/work/scratch/abnn.py), 1 / 2 threads: (m, n, k)
    # = (8, 1024, 1024) 0.71 / 0.76; (32, ...) 0.87 / 0.86; (64, ...) 1.01 / 0.95; (128, ...)
    # 1.06 / 0.98; A^T (16, 1024, 1024) 0.76; A^T (1024, 1024, 128) 1.04 / 1.01
    IN_PLACE_ROWS = 64


ctypedef struct TileOut:  # what becomes of C's sums: linear's or addmm's epilogue, or nothing
    const float* bias    # linear's (NULL: none), then the activation (activation.h's code)
    Py_ssize_t act
    const float* addend  # addmm's c (NULL: not addmm), may be C itself
    const float* scale   # addmm's one-value scale (NULL: none), then alpha
    float alpha


cdef TileOut PLAIN  # nothing: C is the product (static storage: zeros and NULLs)


ctypedef struct TileGemm:  # C = op(A) op(B), then `out`, in column blocks of TILE_CH
    Py_ssize_t m, n, k, rgroups, pix
    bint ta, tb
    TileOut out
    conv_gather_fn fn
    const float* a
    const float* b
    float* c
    float* ws          # k * TILE_CH floats per part


cdef inline void pack_block(const TileGemm* g, Py_ssize_t c0, Py_ssize_t c1,
                            float* blk) noexcept nogil:
    # blk[p * TILE_CH + j] = op(B)[p, c0 + j] for j < c1 - c0, zero beyond. conv_out adds 0,
    # which turns a -0 into +0: no product's sign of zero shows in a sum that starts from +0.
    cdef Py_ssize_t p, i, w = c1 - c0
    if g.tb:  # B stored (n, k): its rows c0..c1 become columns, 8 rows at a time (each read
        for i in range(0, w, 8):  # start to end: 8 streams the prefetcher follows)
            conv_out_of(TILE_ISA)(g.b + (c0 + i) * g.k, g.k, blk + i, TILE_CH, min(8, w - i),
                                  0, g.k, NULL, 0)
    else:
        for p in range(g.k):
            memcpy(blk + p * TILE_CH, g.b + p * g.n + c0, <size_t>w * sizeof(float))
    if w < TILE_CH:
        for p in range(g.k):
            memset(blk + p * TILE_CH + w, 0, <size_t>(TILE_CH - w) * sizeof(float))


cdef inline void row_out(const TileOut* o, const float* v, Py_ssize_t w, float* y,
                         Py_ssize_t at, Py_ssize_t j0) noexcept nogil:
    # y[j] for j < w, C's row at flat index `at` from column j0, from the row's sums v: each op
    # the tile stands for rounded as that op rounds on its own, so bitwise what it gives: linear's
    # + bias and activation (as linear_impl's loops), or addmm's c + alpha * (scale * v), for
    # alpha = +-1 the add or sub of the scaled product that the accumulate pass replaced. (No FMA: this
    # is baseline x86-64 code.) One loop per case, so each vectorises.
    cdef Py_ssize_t j
    cdef float s
    cdef const float* c
    cdef const float* bias
    if o.addend != NULL:
        c = o.addend + at
        if o.scale != NULL:
            s = o.scale[0]
            if o.alpha == -1:
                for j in range(w):
                    y[j] = c[j] - v[j] * s
            elif o.alpha == 1:
                for j in range(w):
                    y[j] = c[j] + v[j] * s
            else:
                for j in range(w):
                    y[j] = c[j] + o.alpha * (v[j] * s)
        elif o.alpha == -1:
            for j in range(w):
                y[j] = c[j] - v[j]
        elif o.alpha == 1:
            for j in range(w):
                y[j] = c[j] + v[j]
        else:
            for j in range(w):
                y[j] = c[j] + o.alpha * v[j]
    elif o.bias != NULL:
        bias = o.bias + j0
        if o.act:
            for j in range(w):
                y[j] = activate(v[j] + bias[j], o.act)
        else:
            for j in range(w):
                y[j] = v[j] + bias[j]
    elif o.act:
        for j in range(w):
            y[j] = activate(v[j], o.act)
    else:
        memcpy(y, v, <size_t>w * sizeof(float))


cdef inline void tile_rows(const TileGemm* g, Py_ssize_t o, Py_ssize_t group,
                           const float* blk, Py_ssize_t ldw) noexcept nogil:
    # row tiles `group` of column block o: into C directly where whole, else through `part`
    cdef const float* px[CONV_PIX_MAX]
    cdef float part[CONV_PIX_MAX * TILE_CH]
    cdef Py_ssize_t zero = 0, ntiles = ceil_div(g.m, g.pix), c0 = o * TILE_CH
    cdef Py_ssize_t c1 = min(g.n, c0 + TILE_CH), step = g.m if g.ta else 1
    cdef Py_ssize_t t, t0, t1, p, r, r0, rows, row, ld
    cdef bint epilogue = g.out.bias != NULL or g.out.act or g.out.addend != NULL
    cdef float* dst
    t0, t1 = group * ntiles // g.rgroups, (group + 1) * ntiles // g.rgroups
    for t in range(t0, t1):
        r0 = t * g.pix
        rows = min(g.pix, g.m - r0)
        for p in range(g.pix):  # a short last tile reads its last row again
            row = min(r0 + p, g.m - 1)
            px[p] = g.a + (row if g.ta else row * g.k)
        if g.out.addend != NULL and t + 1 < t1:  # the next tile's rows of c, one page apart
            for r in range(min(g.pix, g.m - r0 - g.pix)):  # each: fetched while this one sums
                prefetch(g.out.addend + (r0 + g.pix + r) * g.n + c0)
        if rows == g.pix and c1 - c0 == TILE_CH and g.out.addend == NULL:  # (C may be c)
            dst, ld = g.c + r0 * g.n + c0, g.n
        else:
            dst, ld = part, TILE_CH
        g.fn(px, step, &zero, 1, g.k, blk, ldw, dst, ld, 0)
        if epilogue or dst == part:  # while the tile is in L1
            for r in range(rows):
                row_out(&g.out, dst + r * ld, c1 - c0, g.c + (r0 + r) * g.n + c0,
                        (r0 + r) * g.n + c0, c0)


cdef int tile_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const TileGemm* g = <const TileGemm*>ctx
    cdef float* blk = g.ws + part * g.k * TILE_CH
    cdef Py_ssize_t item, o, packed = -1
    for item in range(lo, hi):  # a part's items run block by block: each block packed once
        o = item // g.rgroups
        if not g.tb and (o + 1) * TILE_CH <= g.n and g.m <= IN_PLACE_ROWS:
            tile_rows(g, o, item % g.rgroups, g.b + o * TILE_CH, g.n)
            continue
        if o != packed:
            pack_block(g, o * TILE_CH, min(g.n, (o + 1) * TILE_CH), blk)
            packed = o
        tile_rows(g, o, item % g.rgroups, blk, TILE_CH)
    return KERNEL_OK


cdef inline bint tile_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                              const float* a, const float* b, TileOut out, float* c, float* ws,
                              Py_ssize_t threads) noexcept nogil:
    # C = out(op(A) op(B)) on the tiles; False, having done nothing, where this CPU has no
    # 64-column gather tile (the caller takes the BLAS)
    cdef conv_tile tile
    cdef Py_ssize_t nblocks = ceil_div(n, TILE_CH)
    cdef TileGemm g
    if not cpu_isa_ok(TILE_ISA) or not packed_tile(TILE_ISA, TILE_CH, &tile):
        return False
    if m == 0 or n == 0:
        return True
    g.m, g.n, g.k, g.ta, g.tb, g.out = m, n, k, ta, tb, out
    g.fn, g.pix = tile.gather, tile.pix
    g.a, g.b, g.c, g.ws = a, b, c, ws
    g.rgroups = 1
    if threads > 1 and nblocks < 2 * threads:  # too few blocks for the threads: split rows too
        g.rgroups = min(ceil_div(m, g.pix), ceil_div(2 * threads, nblocks))
    parallel_for(threads, nblocks * g.rgroups, tile_part, &g)
    return True


# -- float32 GEMMs on gemm_tile.h's panels ------------------------------------------------------
# Where the lowering sets ``tiles`` on an FMA CPU without AVX-512 (AVX2), a GEMM runs on the C
# runtime's GEMM (gemm_tile.h: op(B) packed into panels of 16 columns in the workspace, then 6 x
# 16 register tiles over k in L1-sized blocks), with the plan's threads behind its pool seam
# (pool_run). Each element of C is its FMAs over k in order, as on the gather tiles above, so
# every CPU with the FMA gives the same bits, and an export to C gives the executor's.
cdef extern from "gemm_tile.h":
    ctypedef void (*mg_gemm_part_fn)(void* ctx, int64_t lo, int64_t hi) noexcept nogil
    ctypedef void (*mg_gemm_pool_fn)(int64_t n, int64_t most, mg_gemm_part_fn part,
                                     void* ctx) noexcept nogil
    ctypedef void (*mg_gemm_out_fn)(const void* ctx, const float* sums, int64_t ld, int64_t r0,
                                    int64_t rows, int64_t j0, int64_t cols) noexcept nogil
    ctypedef struct mg_gemm_job:
        int ta
        int64_t m, n, k, panel
        const float* a
        const float* panels
        float* c
        const float* bias
        int act
        mg_gemm_out_fn out
        const void* out_ctx
        mg_gemm_pool_fn pool
        int64_t threads
        const float* apack
    int64_t mg_gemm_panel() noexcept nogil
    int64_t mg_gemm_scratch_floats(int64_t m, int64_t n, int64_t k, int64_t panel, int pack_b,
                                   int64_t* apack_at, int64_t* ready_at) noexcept nogil
    void mg_gemm_pack_run(mg_gemm_job* g, int tb, const float* b, float* panels, float* apack,
                          int* ready) noexcept nogil


def panels_bytes(Py_ssize_t m, Py_ssize_t n, Py_ssize_t k) -> int:
    """The workspace of a GEMM of C (m, n) over k on gemm_tile.h's panels (op(B) packed at
    this CPU's width, op(A) where the header packs it, then the packing run's flags): the
    lowering sizes the panels way's by it."""
    cdef int64_t apack, ready
    return mg_gemm_scratch_floats(m, n, k, mg_gemm_panel(), True, &apack, &ready) * 4


include "gemm_pool.pxi"


ctypedef struct PanelOut:  # addmm's epilogue (row_out) of a tile's sums, C's rows n apart
    TileOut out
    float* c
    Py_ssize_t n


cdef void panel_out(const void* ctx, const float* sums, int64_t ld, int64_t r0, int64_t rows,
                    int64_t j0, int64_t cols) noexcept nogil:
    cdef const PanelOut* o = <const PanelOut*>ctx
    cdef Py_ssize_t r, at
    for r in range(rows):
        at = (r0 + r) * o.n + j0
        row_out(&o.out, sums + r * ld, cols, o.c + at, at, j0)


cdef inline bint panel_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                               const float* a, const float* b, TileOut out, float* c, float* ws,
                               Py_ssize_t threads) noexcept nogil:
    # C = out(op(A) op(B)) on gemm_tile.h, op(B) (and where it pays op(A)) packed into ws
    # (mg_gemm_scratch_floats' layout, the packing's flags last) in the same run; False,
    # having done nothing, where this CPU has no FMA (the caller takes the BLAS). linear's
    # bias and activation are the header's (activation.h: the ops' own rounding); addmm's
    # row_out, through panel_out.
    cdef mg_gemm_job g
    cdef PanelOut epilogue
    cdef int64_t apack, ready
    if not cpu_isa_ok(1):
        return False
    if m == 0 or n == 0:
        return True
    g.panel = mg_gemm_panel()
    g.ta, g.m, g.n, g.k, g.a, g.c = ta, m, n, k, a, c
    g.bias, g.act, g.out, g.out_ctx = out.bias, <int>out.act, NULL, NULL
    if out.addend != NULL:
        epilogue.out, epilogue.c, epilogue.n = out, c, n
        g.out, g.out_ctx = panel_out, &epilogue
    g.pool, g.threads = pool_run, threads
    mg_gemm_scratch_floats(m, n, k, g.panel, True, &apack, &ready)
    mg_gemm_pack_run(&g, tb, b, ws, ws + apack if apack >= 0 else NULL, <int*>(ws + ready))
    return True


cdef inline bint tiles_product(bint ta, bint tb, Py_ssize_t m, Py_ssize_t n, Py_ssize_t k,
                               const float* a, const float* b, TileOut out, float* c, float* ws,
                               Py_ssize_t threads) noexcept nogil:
    # the "tiles" way: the gather tiles on AVX-512, else gemm_tile.h's panels (the lowering
    # sized the workspace for the one this CPU runs: lowering/matmul.py's tiles_workspace)
    if cpu_isa_ok(TILE_ISA):
        return tile_product(ta, tb, m, n, k, a, b, out, c, ws, threads)
    return panel_product(ta, tb, m, n, k, a, b, out, c, ws, threads)


# -- kernels --------------------------------------------------------------------------------------
cdef inline int matmul_impl(const num_t* a, const num_t* b, num_t* c, void* ws,
                            const Call* call) noexcept nogil:
    cdef const Matmul* s = <const Matmul*>call.ints
    if not dims_ok(s.ndim, 1):
        return KERNEL_UNSUPPORTED
    cdef Py_ssize_t m = s.m, n = s.n, k = s.k
    cdef bint ta = s.transpose_a != 0, tb = s.transpose_b != 0
    cdef int ndim = <int>s.ndim
    cdef const Py_ssize_t* shape = <const Py_ssize_t*>(s + 1)
    cdef Py_ssize_t inner = shape[ndim - 1], rows = count_rows(ndim, shape), r, i
    cdef Py_ssize_t sa = shape[2 * ndim - 1], sb = shape[3 * ndim - 1]
    cdef Odometer o
    odometer_init(&o, ndim, shape, shape + ndim, 2)
    for r in range(rows):
        for i in range(inner):
            if num_t is float:
                if s.tiles and tiles_product(ta, tb, m, n, k, a + o.offset[0] + i * sa,
                                            b + o.offset[1] + i * sb, PLAIN, c, <float*>ws,
                                            s.threads):
                    c += m * n
                    continue
            matrix_product(ta, tb, m, n, k, a + o.offset[0] + i * sa, b + o.offset[1] + i * sb, c,
                           s.threads, <float*>ws if s.gemv_split else NULL)
            c += m * n
        odometer_next(&o)
    return KERNEL_OK


cdef inline int linear_impl(const floating* x, const floating* w, const floating* bias,
                            floating* y, void* ws, const Call* call) noexcept nogil:
    # y[m, n] = x[m, k] w[n, k]^T (+ bias[n]), then the activation when asked: the epilogue
    # runs row by row while each row is in cache, with the op's own scalar function
    # (activation.pxd), so it gives bitwise what a relu or clip node after the linear would
    cdef const Linear* s = <const Linear*>call.ints
    cdef Py_ssize_t m = s.m, n = s.n, k = s.k, i, j
    cdef Py_ssize_t act = s.activation
    cdef TileOut out = PLAIN
    if floating is float:
        out.bias, out.act = bias, act
        if s.tiles and tiles_product(False, True, m, n, k, x, w, out, y, <float*>ws, s.threads):
            return KERNEL_OK
    float_product(False, True, m, n, k, 1, x, w, 0, y, s.threads, NULL)
    for i in range(m):
        if act and bias != NULL:
            for j in range(n):
                y[i * n + j] = activate(y[i * n + j] + bias[j], act)
        elif act:
            for j in range(n):
                y[i * n + j] = activate(y[i * n + j], act)
        elif bias != NULL:
            for j in range(n):
                y[i * n + j] += bias[j]
    return KERNEL_OK


cdef inline int addmm_impl(const floating* c, const floating* a, const floating* b,
                           const floating* scale, floating* out, void* ws,
                           const Call* call) noexcept nogil:
    # out = c + alpha * scale * op(a) op(b). On the tiles, each element as the unfused ops
    # round it (row_out). Through the BLAS: in place (out is c's buffer) the GEMM adds into c
    # (beta = 1), else c is copied first. a and b never share out's bytes: the memory planner
    # lets out take over input 0 only (planner/memory/inplace.py).
    cdef const Addmm* s = <const Addmm*>call.ints
    cdef floating alpha = <floating>call.floats[0]
    cdef TileOut epilogue = PLAIN
    if floating is float:
        epilogue.addend, epilogue.scale, epilogue.alpha = c, scale, alpha
        if s.tiles and tiles_product(s.transpose_a != 0, s.transpose_b != 0, s.m, s.n, s.k, a, b,
                                    epilogue, out, <float*>ws, s.threads):
            return KERNEL_OK
    if scale != NULL:
        alpha = alpha * scale[0]
    if out != c:
        memcpy(out, c, <size_t>(s.m * s.n) * sizeof(floating))
    float_product(s.transpose_a != 0, s.transpose_b != 0, s.m, s.n, s.k, alpha, a, b, 1, out,
                  s.threads, <float*>ws if s.gemv_split else NULL)
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef inline void* matmul_ws(const Call* c) noexcept nogil:  # bufs: a, b, c[, workspace]
    cdef const Matmul* s = <const Matmul*>c.ints
    return c.bufs[3] if s.tiles or s.gemv_split else NULL

cdef int matmul_f32(const Call* c) noexcept nogil:
    return matmul_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <float*>c.bufs[2],
                       matmul_ws(c), c)
cdef int matmul_f64(const Call* c) noexcept nogil:
    return matmul_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <double*>c.bufs[2],
                       NULL, c)
cdef int matmul_i32(const Call* c) noexcept nogil:
    return matmul_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1],
                       <int32_t*>c.bufs[2], NULL, c)
cdef int matmul_i64(const Call* c) noexcept nogil:
    return matmul_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1],
                       <int64_t*>c.bufs[2], NULL, c)

cdef int linear_f32(const Call* c) noexcept nogil:
    # bufs: x, w, [bias,] y[, workspace]
    cdef const Linear* s = <const Linear*>c.ints
    cdef int y = 3 if s.has_bias else 2
    return linear_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                       <const float*>c.bufs[2] if s.has_bias else NULL, <float*>c.bufs[y],
                       c.bufs[y + 1] if s.tiles else NULL, c)
cdef int linear_f64(const Call* c) noexcept nogil:
    if (<const Linear*>c.ints).has_bias:
        return linear_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                           <const double*>c.bufs[2], <double*>c.bufs[3], NULL, c)
    return linear_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <const double*>NULL,
                       <double*>c.bufs[2], NULL, c)

cdef int addmm_f32(const Call* c) noexcept nogil:
    cdef const Addmm* s = <const Addmm*>c.ints
    cdef int out = 4 if s.has_scale else 3
    return addmm_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <const float*>c.bufs[2],
                      <const float*>c.bufs[3] if s.has_scale else NULL, <float*>c.bufs[out],
                      c.bufs[out + 1] if s.tiles or s.gemv_split else NULL, c)
cdef int addmm_f64(const Call* c) noexcept nogil:
    cdef bint scaled = (<const Addmm*>c.ints).has_scale
    return addmm_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                      <const double*>c.bufs[2], <const double*>c.bufs[3] if scaled else NULL,
                      <double*>c.bufs[4 if scaled else 3], NULL, c)

KERNELS = {
    "matmul_f32": kernel_address(matmul_f32), "matmul_f64": kernel_address(matmul_f64),
    "matmul_i32": kernel_address(matmul_i32), "matmul_i64": kernel_address(matmul_i64),
    "linear_f32": kernel_address(linear_f32), "linear_f64": kernel_address(linear_f64),
    "addmm_f32": kernel_address(addmm_f32), "addmm_f64": kernel_address(addmm_f64),
}


def blas_gemm(const float[:, ::1] a, const float[:, ::1] b, float[:, ::1] c,
              bint transpose_a=False, bint transpose_b=False):
    """c = op(a) @ op(b) for float32 C-contiguous matrices, exactly as the matmul kernels
    call the BLAS in use (blas_select: gemv for a single row or column, else gemm): the
    benchmarks' physical limit, "the same GEMMs through the same BLAS".

    >>> blas_gemm(x, w, out)
    """
    cdef Py_ssize_t m = a.shape[1] if transpose_a else a.shape[0]
    cdef Py_ssize_t k = a.shape[0] if transpose_a else a.shape[1]
    cdef Py_ssize_t n = b.shape[0] if transpose_b else b.shape[1]
    if (b.shape[1] if transpose_b else b.shape[0]) != k or c.shape[0] != m or c.shape[1] != n:
        raise ValueError(f"blas_gemm: op(a) is ({m}, {k}), op(b) is "
                         f"({b.shape[1] if transpose_b else b.shape[0]}, {n}), c is "
                         f"({c.shape[0]}, {c.shape[1]})")
    if m and n and k:
        with nogil:
            gemm(transpose_a, transpose_b, m, n, k, &a[0, 0], &b[0, 0], &c[0, 0], False)
    elif m and n:
        c[:, :] = 0
