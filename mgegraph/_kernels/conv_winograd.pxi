# conv.pyx's "winograd" path: 3x3 convolutions at stride 1 by Winograd's minimal filtering
# F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
#
# Design: the driver is wino_conv.h's, one source with the C runtime (deploy's conv_wino_c.h):
# the geometry of a call (filled here from the Conv struct), the filter, input and output
# transforms' loops (wino_tile.h's vectors) and the work items, each a block of tiles (or a
# split of its output channels) on one thread with its own V and M. This binding keeps the
# executor's own: the thread loop (OpenMP; the items taken as threads come, so a thread the
# system started late leaves its blocks to the others), the workspace from the plan's arena,
# and the 16 GEMMs where they leave the row tiles (AVX2 plans run those, as C does on every
# plan, bitwise): the BLAS, and for float32 on a CPU with AVX-512 the 64-column gather tile,
# on plain V and U. On those, where there are fewer blocks than threads, the threads share each
# block's steps: its input transform by input channels, its GEMMs by xi, its output transform
# by output channels. A plan gives the same bits on any number of cores. The transforms add and
# subtract (G halves), so results differ from the direct sum by rounding: a few ulps of the
# largest term, which the tests bound against NumPy. float32 only (the lowering takes no other
# dtype here). conv2d_backward_data at stride 1 runs here too, as the convolution it is
# (wino_backward).
# Workspace: U (16 matrices of urows x cin, wino_uld apart), then per thread a slot of V and M.

from libc.stdint cimport int64_t

cdef extern from "wino_conv.h":
    ctypedef struct wino_sizes:
        int64_t batch, cin, h, w, cout, oh, ow, ph, pw
        int act
        int64_t threads
        int tile_isa, transform_isa
        int64_t gemm_cols
    ctypedef struct wino_conv:
        wino_sizes s
        int rows
        int64_t urows, block, nblocks, splits, vld, mld, slot
    ctypedef void (*wino_gemm_fn)(const wino_conv* k, const float* u, const float* v, float* m,
                                  int64_t nb, int64_t o0, int64_t o1) noexcept nogil
    ctypedef struct wino_call:
        const wino_conv* k
        const float* x
        const float* u
        const float* bias
        float* y
        int64_t uld
        wino_gemm_fn gemm
    enum:
        WINO_CALLER_GEMM
    int wino_conv_of(wino_conv* k, const wino_sizes* s) noexcept nogil
    int64_t wino_uld(const wino_conv* k) noexcept nogil
    int64_t wino_block_tiles(const wino_conv* k, int64_t blk, int64_t* first) noexcept nogil
    void wino_filter(const wino_conv* k, const float* w, float* u, int64_t uld, int flip,
                     int64_t lo, int64_t hi) noexcept nogil
    void wino_input(const wino_conv* k, const float* x, float* v, int64_t first, int64_t nb,
                    int64_t c0, int64_t c1) noexcept nogil
    void wino_output(const wino_conv* k, const float* m, const float* bias, float* y,
                     int64_t first, int64_t nb, int64_t o0, int64_t o1) noexcept nogil
    void wino_gemm_rows(const wino_conv* k, const float* u, const float* v, float* m,
                        int64_t nb, int64_t o0, int64_t o1) noexcept nogil
    void wino_item(const wino_call* c, float* area, int64_t item) noexcept nogil


cdef enum:
    # the most columns left after a block's whole 64-column tiles that go to the BLAS rather
    # than a tile 64 wide: tiles ÷ BLAS for ResNet's layers at batch 1 (abwino.py, 1 / 2
    # threads) went from 1.03 / 1.10 to 0.96 / 0.93 at 28x28 (34 left) and 1.03 / 1.16 to
    # 1.03 / 0.92 at 56x56 (4 left); 14x14 (49 left) kept the tile: 0.80 / 0.85
    WINO_SLIVER = 40


cdef inline wino_conv wino_geometry(const Conv* s) noexcept nogil:
    # the call's geometry, its blocks cut for the plan's threads: the GEMMs on the row tiles for
    # AVX2 plans (AVX2's 4 x 24, the baseline's where the CPU lacks AVX2), else on wino_gemm_own
    cdef wino_sizes z
    cdef wino_conv k
    z.batch, z.cin, z.h, z.w, z.cout, z.oh, z.ow = s.batch, s.cin, s.h, s.w, s.cout, s.oh, s.ow
    z.ph, z.pw, z.act, z.threads = s.ph, s.pw, <int>s.activation, s.threads
    z.tile_isa = (1 if cpu_isa_ok(1) else 0) if s.isa == 1 else WINO_CALLER_GEMM
    z.transform_isa, z.gemm_cols = <int>s.isa, 64 if s.isa == 2 else 0
    wino_conv_of(&k, &z)  # the lowering's sizes fit in memory: no overflow
    return k


cdef inline Py_ssize_t winograd_elems(const Conv* s) noexcept nogil:
    cdef wino_conv k = wino_geometry(s)
    return 16 * wino_uld(&k) + s.threads * k.slot


cdef void wino_gemm_own(const wino_conv* k, const float* u, const float* v, float* m,
                        int64_t nb, int64_t o0, int64_t o1) noexcept nogil:
    # wino_item's GEMM off the row tiles, on plain U (cout, cin) and V (cin, nb): for float32
    # on the 64-column gather tile where the CPU has AVX-512, else the BLAS
    cdef conv_tile tile
    cdef Py_ssize_t cin = k.s.cin
    if k.s.gemm_cols == 64 and cpu_isa_ok(2) and packed_tile(2, 64, &tile):
        wino_gemm_tiles(k, u + o0 * cin, v, m + o0 * k.block, nb, o1 - o0, &tile)
        return
    gemm_ld(False, False, o1 - o0, nb, cin, u + o0 * cin, cin, v, k.block, m + o0 * k.block,
            k.block, False)


cdef inline void wino_gemm_tiles(const wino_conv* k, const float* u, const float* v, float* m,
                                 Py_ssize_t nb, Py_ssize_t rows_u,
                                 const conv_tile* tile) noexcept nogil:
    # One of the GEMMs on the tile, which reads 64 of V's columns in place (rows `block` apart)
    # and broadcasts U's: no packing, as V is written for it. Per block of 64 columns, every
    # row tile of U, so the block (cin x 256 bytes) stays in L1. A last, partial block of more
    # than WINO_SLIVER columns reads past its row into the next, and past V's last row into the
    # workspace after it (M): those sums land in columns that are dropped. Measured on
    # convnet-train's 32 -> 64 layer at 32x32 (the 2-core EPYC, Zen 4): the 16 GEMMs took 6.6
    # ms of the call's 11.3 through MKL (81 GFLOP/s); on the tile the call takes 0.95x the time
    # on 1 thread, 0.89x on 2.
    cdef const float* px[CONV_PIX_MAX]
    cdef float part[CONV_PIX_MAX * 64]
    cdef Py_ssize_t zero = 0, b, t, r0, r, p, rows, cols, cin = k.s.cin, ld = k.block
    for b in range(0, nb, 64):
        cols = min(64, nb - b)
        if cols <= WINO_SLIVER:  # a few columns left: the BLAS, not a tile 64 wide
            gemm_ld(False, False, rows_u, cols, cin, u, cin, v + b, ld, m + b, ld, False)
            continue
        for t in range(ceil_div(rows_u, tile.pix)):
            r0 = t * tile.pix
            rows = min(tile.pix, rows_u - r0)
            for p in range(tile.pix):  # a short last tile reads its last row again
                px[p] = u + min(r0 + p, rows_u - 1) * cin
            if rows == tile.pix and cols == 64:
                tile.gather(px, 1, &zero, 1, cin, v + b, ld, m + r0 * ld + b, ld, 0)
                continue
            tile.gather(px, 1, &zero, 1, cin, v + b, ld, part, 64, 0)
            for r in range(rows):
                memcpy(m + (r0 + r) * ld + b, part + r * 64, <size_t>cols * sizeof(float))


cdef inline void wino_shared_block(const wino_call* c, float* area, Py_ssize_t blk,
                                   int nt) noexcept nogil:
    # block blk of tiles on nt threads, fewer blocks than threads, off the row tiles: its input
    # transform by input channels, its GEMMs by xi, its output transform by output channels
    # (wino_item's steps, in other threads)
    cdef const wino_conv* k = c.k
    cdef int64_t first = 0, nb = wino_block_tiles(k, blk, &first)
    cdef float* m = area + 16 * k.vld
    cdef Py_ssize_t ci, xi, o
    cdef int previous = 0
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for ci in prange(k.s.cin, schedule="static"):
            wino_input(k, c.x, area, first, nb, ci, ci + 1)
        for xi in prange(16, schedule="static"):
            c.gemm(k, c.u + xi * c.uld, area + xi * k.vld, m + xi * k.mld, nb, 0, k.s.cout)
        for o in prange(k.s.cout, schedule="static"):
            wino_output(k, m, c.bias, c.y, first, nb, o, o + 1)
        blas_restore_threads(previous)


cdef inline Conv wino_backward(const Conv* s) noexcept nogil:
    # conv2d_backward_data at stride 1 is the convolution of dy by the filters transposed (in <->
    # out channels) and turned by 180 degrees, padded by k - 1 - p (the lowering checks it is
    # not negative; conv_data.h): this is that convolution's geometry, for conv2d_winograd with
    # flip
    cdef Conv t = s[0]
    t.cin, t.cout, t.h, t.w, t.oh, t.ow = s.cout, s.cin, s.oh, s.ow, s.h, s.w
    t.ph, t.pw = conv_data_pad(s.kh, 1, s.ph), conv_data_pad(s.kw, 1, s.pw)
    t.has_bias, t.activation = 0, 0
    return t


cdef inline int conv2d_winograd(const float* x, const float* w, const float* bias,
                                float* y, float* ws, bint flip,
                                const Conv* s) noexcept nogil:
    # U = G g G^T of w (flip: the data gradient's filters) into ws, then the work items
    cdef wino_conv k = wino_geometry(s)
    cdef wino_call c
    cdef Py_ssize_t items = k.nblocks * k.splits, uld = wino_uld(&k), o, i
    cdef float* area = ws + 16 * uld
    cdef int nt = run_threads(s), previous = 0
    c.k, c.x, c.u, c.bias, c.y, c.uld = &k, x, ws, bias, y, uld
    c.gemm = wino_gemm_rows if k.rows else wino_gemm_own
    if nt == 1:
        wino_filter(&k, w, ws, uld, flip, 0, k.urows)
        for i in range(items):
            wino_item(&c, area, i)
        return KERNEL_OK
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for o in prange(k.urows, schedule="static"):
            wino_filter(&k, w, ws, uld, flip, o, o + 1)
        if items >= nt or k.rows:  # taken as threads come: a late one leaves its items
            for i in prange(items, schedule="dynamic"):
                wino_item(&c, area + threadid() * k.slot, i)
        blas_restore_threads(previous)
    if items < nt and not k.rows:  # too few blocks to share off the row tiles: share steps
        for i in range(k.nblocks):
            wino_shared_block(&c, area, i, nt)
    return KERNEL_OK
