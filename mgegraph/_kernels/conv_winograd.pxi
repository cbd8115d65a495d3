# conv.pyx's "winograd" path: 3x3 convolutions at stride 1 by Winograd's minimal filtering
# F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).
#
# Design: each 2x2 block of output cells (a tile) is A^T [(G g G^T) * (B^T d B)] A, where d is the
# 4x4 input window under it and g the 3x3 filter: 16 multiplies per tile and channel pair where
# the direct sum takes 36. Summed over input channels, the 16 elementwise products become 16
# GEMMs, M[xi] (cout, tiles) = U[xi] (cout, cin) @ V[xi] (cin, tiles), one per position xi of the
# 4x4 transformed tile. Every image's tiles are numbered together (as the batched path stacks
# images, so small planes still make wide GEMMs) and taken in blocks whose V and M stay in the
# L2 cache between the transforms and the GEMMs (V and M of a whole plane are 4x and 8x its
# size: streaming them through memory cost more than the multiplies saved, measured on ResNet's
# 56x56 layer). The steps:
#   U = G g G^T per (output, input channel), once per call    split by output channels
#   per block of tiles, on one thread with its own V and M:
#     V = B^T d B per (input channel, tile)                   wino_tile.h's vectors, by rows of
#                                                              tiles
#     M[xi] = U[xi] V[xi]                                      16 GEMMs on one thread: float32
#                                                              on the gather tiles (AVX-512,
#                                                              blocks of whole 64 tiles), the
#                                                              row tiles (AVX2, U packed), else
#                                                              the BLAS
#     y = A^T M A per (output channel, tile), with the bias     wino_tile.h's vectors
#       and activation
# so blocks go to threads whole (or, when there are fewer blocks than threads, the threads share
# each block's three steps), and a plan gives the same bits on any number of cores. The
# transforms add and subtract (G halves), so results differ from the direct sum by rounding: a
# few ulps of the largest term, which the tests bound against NumPy. float32 only (the lowering
# takes no other dtype here).
# conv2d_backward_data at stride 1 runs here too, as the convolution it is (wino_backward).
# Workspace: U (16, cout, cin; on the row tiles cout rounded up to CONV_PACK and packed), then
# per thread V (16, cin, block) and M (16, cout, block), each of the 16 matrices WINO_SKEW
# elements after the last. Several threads take the blocks as they come (OpenMP's dynamic
# schedule): a thread the system started late leaves its blocks to the others instead of
# holding the closing barrier for its share.

cdef extern from "wino_tile.h":
    ctypedef void (*wino_in_fn)(const float* const* rows, Py_ssize_t q0, Py_ssize_t w,
                                Py_ssize_t count, float* dst, Py_ssize_t ld) noexcept nogil
    ctypedef void (*wino_out_fn)(const float* m, Py_ssize_t ld, Py_ssize_t count, float* y0,
                                 float* y1, Py_ssize_t end, float add, int act) noexcept nogil
    ctypedef struct wino_transforms:
        wino_in_fn in_ "in"
        wino_out_fn out
    wino_transforms wino_of(int isa) noexcept nogil


cdef enum:
    WINO_BLOCK_FLOATS = 1 << 19  # V and M of one block: 2 MiB of float32, the L2 and some
    # U, V and M are 16 matrices each, written 16 at a time: were they a power of two apart, the
    # 16 streams would fall in the same cache sets and evict each other (the 512-channel U took
    # 4x the whole convolution's time), so each matrix starts a cache line further
    WINO_SKEW = 16
    # the most columns left after a block's whole 64-column tiles that go to the BLAS rather
    # than a tile 64 wide: tiles ÷ BLAS for ResNet's layers at batch 1 (abwino.py, 1 / 2
    # threads) went from 1.03 / 1.10 to 0.96 / 0.93 at 28x28 (34 left) and 1.03 / 1.16 to
    # 1.03 / 0.92 at 56x56 (4 left); 14x14 (49 left) kept the tile: 0.80 / 0.85
    WINO_SLIVER = 40
    # the row tiles' columns (AVX2's conv_tile_avx2; the baseline tile's 8 divide it): blocks of
    # whole panels leave no partial panel, which costs a whole one
    WINO_ROW_COLS = 24


cdef inline Py_ssize_t wino_ld(Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    # the distance between two of the 16 matrices of (rows, cols)
    return rows * cols + WINO_SKEW


cdef inline bint wino_row_tiles(const Conv* s) noexcept nogil:
    # whether the 16 GEMMs run on conv_tile.h's row tiles (AVX2 plans): U packed in blocks of
    # CONV_PACK output channels, V read in place
    return s.isa == 1


cdef inline Py_ssize_t wino_urows(const Conv* s) noexcept nogil:
    # U's rows: the output channels, on the row tiles rounded up to whole packed blocks (zeros)
    return round_up(s.cout, CONV_PACK) if wino_row_tiles(s) else s.cout


cdef inline Py_ssize_t wino_tiles(const Conv* s) noexcept nogil:
    return s.batch * ceil_div(s.oh, 2) * ceil_div(s.ow, 2)


cdef inline Py_ssize_t wino_block(const Conv* s) noexcept nogil:
    # tiles per block: V and M within WINO_BLOCK_FLOATS (or 32 tiles), in a number of blocks the
    # plan's threads divide where there are 32 tiles a thread
    cdef Py_ssize_t ntiles = wino_tiles(s)
    cdef Py_ssize_t n = ceil_div(ntiles, max(WINO_BLOCK_FLOATS // (16 * (s.cin + s.cout)), 32))
    cdef Py_ssize_t whole
    if s.threads > 1 and ntiles >= 32 * s.threads:
        n = round_up(n, s.threads)
    if wino_row_tiles(s) and ntiles >= WINO_ROW_COLS * max(n, 1):
        # whole panels for wino_gemm_rows: blocks rounded up to them (at most WINO_ROW_COLS - 1
        # tiles past the budget), where the threads still divide the number of blocks
        whole = round_up(ceil_div(ntiles, max(n, 1)), WINO_ROW_COLS)
        if ceil_div(ntiles, whole) % max(s.threads, 1) == 0:
            return whole
    if s.isa == 2 and ntiles >= 64 * max(n, 1):
        # whole 64-column tiles for wino_gemm_tiles, where the threads still share the tiles
        # evenly: a number of blocks they divide, the last more than half full (ResNet's 56x56
        # layer at batch 1: 784 tiles in 4 blocks of 196, not 5 of 192, which took 1.16x the
        # time on 2 threads). float64's blocks follow the same rule, as the workspace the
        # lowering sized does.
        whole = ceil_div(ntiles, max(n, 1)) // 64 * 64
        if (ceil_div(ntiles, whole) % max(s.threads, 1) == 0
                and ceil_div(ntiles, whole) * whole - ntiles < whole // 2):
            return whole
    return max(ceil_div(ntiles, max(n, 1)), 1)  # an empty batch still has a block, of nothing


cdef inline Py_ssize_t wino_slot(const Conv* s) noexcept nogil:
    # one thread's V and M
    return 16 * (wino_ld(s.cin, wino_block(s)) + wino_ld(s.cout, wino_block(s)))


cdef inline Py_ssize_t winograd_elems(const Conv* s) noexcept nogil:
    return 16 * wino_ld(wino_urows(s), s.cin) + s.threads * wino_slot(s)


cdef inline void wino_filter(const float* w, float* u, Py_ssize_t o, bint flip,
                             const Conv* s) noexcept nogil:
    # u[xi, o, c] = (G g G^T)[xi] for output channel o's filters g = w[o, c]; with flip (the
    # backward pass, wino_backward), g = w[c, o] turned by 180 degrees. On the row tiles U[xi]
    # is packed, u[xi, o // CONV_PACK, c, o % CONV_PACK], and rows o >= cout are zeros.
    cdef Py_ssize_t c, i, plane = wino_ld(wino_urows(s), s.cin)
    cdef bint packed = wino_row_tiles(s)
    cdef float g[9]
    cdef float t[4][3]
    cdef float* dst
    for c in range(s.cin):
        for i in range(9):
            g[i] = 0
        if o < s.cout:
            for i in range(9):
                g[i] = w[conv_data_weight(0, o, c, i, s.cin, s.cout, 9) if flip
                         else (o * s.cin + c) * 9 + i]
        for i in range(3):  # G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2
            t[0][i] = g[i]
            t[1][i] = (g[i] + g[3 + i] + g[6 + i]) * 0.5
            t[2][i] = (g[i] - g[3 + i] + g[6 + i]) * 0.5
            t[3][i] = g[6 + i]
        dst = (u + (o // CONV_PACK * s.cin + c) * CONV_PACK + o % CONV_PACK if packed
               else u + o * s.cin + c)
        for i in range(4):  # (G g) G^T, row by row
            dst[(4 * i) * plane] = t[i][0]
            dst[(4 * i + 1) * plane] = (t[i][0] + t[i][1] + t[i][2]) * 0.5
            dst[(4 * i + 2) * plane] = (t[i][0] - t[i][1] + t[i][2]) * 0.5
            dst[(4 * i + 3) * plane] = t[i][2]


cdef inline Py_ssize_t wino_run(Py_ssize_t tile, Py_ssize_t left, Py_ssize_t tw) noexcept nogil:
    # tiles from this one to the end of its row of tiles, of the block's left
    return min(tw - tile % tw, left)


cdef inline void wino_input(const float* x, float* v, Py_ssize_t first, Py_ssize_t nb,
                            Py_ssize_t c0, Py_ssize_t c1, const Conv* s) noexcept nogil:
    # v[xi, c, k] = (B^T d B)[xi] for tile first + k's window d in input channel c, by runs of
    # tiles along their rows; channels outer, so each of the 16 matrices is written along rows
    cdef Py_ssize_t th = ceil_div(s.oh, 2), tw = ceil_div(s.ow, 2), c, k, tile, count
    cdef Py_ssize_t ld = wino_ld(s.cin, nb)
    cdef wino_in_fn run = wino_of(s.isa).in_
    cdef const float* rows[4]
    cdef const float* plane
    cdef Py_ssize_t a, i, r
    for c in range(c0, c1):
        k = 0
        while k < nb:
            tile = first + k
            count = wino_run(tile, nb - k, tw)
            plane = x + (tile // (th * tw) * s.cin + c) * s.h * s.w
            a = tile // tw % th
            for i in range(4):  # the windows' rows 2a - ph + i, NULL off the plane
                r = 2 * a - s.ph + i
                rows[i] = plane + r * s.w if 0 <= r < s.h else NULL
            run(rows, 2 * (tile % tw) - s.pw, s.w, count, v + c * nb + k, ld)
            k += count


cdef inline void wino_output(const float* m, const float* bias, float* y,
                             Py_ssize_t first, Py_ssize_t nb, Py_ssize_t o0, Py_ssize_t o1,
                             const Conv* s) noexcept nogil:
    # y's cells of tiles [first, first + nb) = A^T M A, by runs of tiles along their rows
    cdef Py_ssize_t th = ceil_div(s.oh, 2), tw = ceil_div(s.ow, 2), o, k, tile, count
    cdef Py_ssize_t ld = wino_ld(s.cout, nb)
    cdef wino_out_fn run = wino_of(s.isa).out
    cdef float add
    cdef float* out
    for o in range(o0, o1):
        add = bias[o] if bias != NULL else 0
        k = 0
        while k < nb:
            tile = first + k
            count = wino_run(tile, nb - k, tw)
            # output rows 2a and 2a + 1 (if the output has it), from column 2b
            out = (y + (tile // (th * tw) * s.cout + o) * s.oh * s.ow
                   + 2 * (tile // tw % th) * s.ow + 2 * (tile % tw))
            run(m + o * nb + k, ld, count, out, out + s.ow if 2 * (tile // tw % th) + 1 < s.oh
                else NULL, min(2 * count, s.ow - 2 * (tile % tw)), add, <int>s.activation)
            k += count


cdef inline void wino_tiles_block(const float* x, const float* u, const float* bias,
                                  float* y, float* area, Py_ssize_t k,
                                  const Conv* s) noexcept nogil:
    # block k of tiles, on one thread; area: its V and M
    cdef Py_ssize_t block = wino_block(s), xi
    cdef Py_ssize_t first = k * block, nb = min(block, wino_tiles(s) - k * block)
    cdef float* m = area + 16 * wino_ld(s.cin, block)
    wino_input(x, area, first, nb, 0, s.cin, s)
    for xi in range(16):
        wino_gemm(u, area, m, nb, xi, s)
    wino_output(m, bias, y, first, nb, 0, s.cout, s)


cdef inline void wino_gemm(const float* u, const float* v, float* m, Py_ssize_t nb,
                           Py_ssize_t xi, const Conv* s) noexcept nogil:
    # M[xi] (cout, nb) = U[xi] (cout, cin) @ V[xi] (cin, nb): on the row tiles for AVX2 plans,
    # for float32 on the 64-column gather tile where the CPU has AVX-512, else the BLAS
    cdef conv_tile tile
    if wino_row_tiles(s):
        wino_gemm_rows(u + xi * wino_ld(wino_urows(s), s.cin), v + xi * wino_ld(s.cin, nb),
                       m + xi * wino_ld(s.cout, nb), nb, s)
        return
    if s.isa == 2 and cpu_isa_ok(2) and packed_tile(2, 64, &tile):
        wino_gemm_tiles(u + xi * wino_ld(s.cout, s.cin), v + xi * wino_ld(s.cin, nb),
                        m + xi * wino_ld(s.cout, nb), nb, s, &tile)
        return
    gemm(False, False, s.cout, nb, s.cin, u + xi * wino_ld(s.cout, s.cin),
         v + xi * wino_ld(s.cin, nb), m + xi * wino_ld(s.cout, nb), False)


cdef inline void wino_gemm_rows(const float* u, const float* v, float* m, Py_ssize_t nb,
                                const Conv* s) noexcept nogil:
    # One of wino_gemm's products on the row tile (AVX2's 4 channels x 24 columns; the
    # baseline's where the CPU lacks AVX2): U packed as the tile reads its weights, V read in
    # place as a plane of cin channels nb apart, so nothing is packed per GEMM (the BLAS copied V
    # on every call). Per panel of the tile's columns (cin x 96 bytes, in L1), every row tile of
    # U. A last, partial panel reads past its row into the next, and past V's last row into the
    # workspace after it (M): those sums land in columns that are dropped. Measured on the
    # shared 2-core AMD EPYC (Zen 3, OpenBLAS), one thread, the two ways in one process
    # interleaved (medians of 25-40 calls each, load about 2), row tiles over the BLAS: the
    # U-Net's 64 -> 32 at 128x128 0.70-0.78, its 32 -> 64 at 64x64 0.82-0.89, convnet's
    # 32 -> 64 at 32x32 (batch 32) 0.80-0.83, ResNet's 64 -> 64 at 56x56 0.81-0.85. The BLAS
    # spent 40% of its GEMMs' time copying V. Blocks of 2^18 or 2^17 floats (L2 is 512 KiB
    # there) were slower than WINO_BLOCK_FLOATS', not faster.
    cdef conv_tile tile = conv_tile_of(1 if cpu_isa_ok(1) else 0)
    cdef float part[CONV_PACK * CONV_COLS_MAX]
    cdef Py_ssize_t zero = 0, b, r0, r, rows, cols, panel, t
    cdef const float* w
    for panel in range(ceil_div(nb, tile.cols)):
        b = panel * tile.cols
        cols = min(tile.cols, nb - b)
        for t in range(ceil_div(s.cout, tile.rows)):
            r0 = t * tile.rows
            rows = min(tile.rows, s.cout - r0)
            w = u + (r0 // CONV_PACK * s.cin) * CONV_PACK + r0 % CONV_PACK
            if cols == tile.cols:
                tile.fn(v + b, nb, &zero, 1, s.cin, w, m + r0 * nb + b, nb, rows, 0)
                continue
            tile.fn(v + b, nb, &zero, 1, s.cin, w, part, tile.cols, rows, 0)
            for r in range(rows):
                memcpy(m + (r0 + r) * nb + b, part + r * tile.cols, <size_t>cols * sizeof(float))


cdef inline void wino_gemm_tiles(const float* u, const float* v, float* m, Py_ssize_t nb,
                                 const Conv* s, const conv_tile* tile) noexcept nogil:
    # One of wino_gemm's products on the tile, which reads 64 of V's columns in place (rows nb
    # apart) and broadcasts U's: no packing, as V is written for it. Per block of 64 columns,
    # every row tile of U, so the block (cin x 256 bytes) stays in L1. A last, partial block of
    # more than WINO_SLIVER columns reads past its row into the next, and past V's last row into
    # the workspace after it (M): those sums land in columns that are dropped. Measured on
    # convnet-train's 32 -> 64 layer at 32x32 (the 2-core EPYC, Zen 4): the 16 GEMMs took 6.6
    # ms of the call's 11.3 through MKL (81 GFLOP/s); on the tile the call takes 0.95x the time
    # on 1 thread, 0.89x on 2.
    cdef const float* px[CONV_PIX_MAX]
    cdef float part[CONV_PIX_MAX * 64]
    cdef Py_ssize_t zero = 0, b, t, r0, r, p, rows, cols
    for b in range(0, nb, 64):
        cols = min(64, nb - b)
        if cols <= WINO_SLIVER:  # a few columns left: the BLAS, not a tile 64 wide
            gemm_ld(False, False, s.cout, cols, s.cin, u, s.cin, v + b, nb, m + b, nb, False)
            continue
        for t in range(ceil_div(s.cout, tile.pix)):
            r0 = t * tile.pix
            rows = min(tile.pix, s.cout - r0)
            for p in range(tile.pix):  # a short last tile reads its last row again
                px[p] = u + min(r0 + p, s.cout - 1) * s.cin
            if rows == tile.pix and cols == 64:
                tile.gather(px, 1, &zero, 1, s.cin, v + b, nb, m + r0 * nb + b, nb, 0)
                continue
            tile.gather(px, 1, &zero, 1, s.cin, v + b, nb, part, 64, 0)
            for r in range(rows):
                memcpy(m + (r0 + r) * nb + b, part + r * 64, <size_t>cols * sizeof(float))


cdef inline void wino_shared_block(const float* x, const float* u, const float* bias,
                                   float* y, float* area, Py_ssize_t k, const Conv* s,
                                   int nt) noexcept nogil:
    # block k of tiles on nt threads, fewer blocks than threads: its input transform by input
    # channels, its GEMMs by xi, its output transform by output channels (the same operations as
    # wino_tiles_block's, in other threads)
    cdef Py_ssize_t block = wino_block(s), xi, c, o
    cdef Py_ssize_t first = k * block, nb = min(block, wino_tiles(s) - k * block)
    cdef float* m = area + 16 * wino_ld(s.cin, block)
    cdef int previous = 0
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for c in prange(s.cin, schedule="static"):
            wino_input(x, area, first, nb, c, c + 1, s)
        for xi in prange(16, schedule="static"):
            wino_gemm(u, area, m, nb, xi, s)
        for o in prange(s.cout, schedule="static"):
            wino_output(m, bias, y, first, nb, o, o + 1, s)
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
    cdef Py_ssize_t nblocks = ceil_div(wino_tiles(s), wino_block(s)), o, k
    cdef Py_ssize_t slot = wino_slot(s)
    cdef float* area = ws + 16 * wino_ld(wino_urows(s), s.cin)
    cdef int nt = run_threads(s), previous = 0
    if nt == 1:
        for o in range(wino_urows(s)):
            wino_filter(w, ws, o, flip, s)
        for k in range(nblocks):
            wino_tiles_block(x, ws, bias, y, area, k, s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for o in prange(wino_urows(s), schedule="static"):
            wino_filter(w, ws, o, flip, s)
        if nblocks >= nt:  # taken as threads come: a late one leaves its blocks to the others
            for k in prange(nblocks, schedule="dynamic"):
                wino_tiles_block(x, ws, bias, y, area + threadid() * slot, k, s)
        blas_restore_threads(previous)
    if nblocks < nt:  # too few blocks to share: share each one's steps
        for k in range(nblocks):
            wino_shared_block(x, ws, bias, y, area, k, s, nt)
    return KERNEL_OK
