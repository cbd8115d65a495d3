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
#     V = B^T d B per (input channel, tile)
#     M[xi] = U[xi] V[xi]                                      16 GEMMs, the BLAS on one thread
#     y = A^T M A per (output channel, tile), with the bias and relu
# so blocks go to threads whole, and a plan gives the same bits on any number of cores. The
# transforms add and subtract (G halves), so results differ from the direct sum by rounding: a
# few ulps of the largest term, which the tests bound against NumPy in float64 and float32.
# Workspace: U (16, cout, cin), then per thread V (16, cin, block) and M (16, cout, block),
# each of the 16 matrices WINO_SKEW elements after the last.

cdef enum:
    WINO_BLOCK_FLOATS = 1 << 19  # V and M of one block: 2 MiB of float32, the L2 and some
    # U, V and M are 16 matrices each, written 16 at a time: were they a power of two apart, the
    # 16 streams would fall in the same cache sets and evict each other (the 512-channel U took
    # 4x the whole convolution's time), so each matrix starts a cache line further
    WINO_SKEW = 16


cdef inline Py_ssize_t wino_ld(Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    # the distance between two of the 16 matrices of (rows, cols)
    return rows * cols + WINO_SKEW


cdef inline Py_ssize_t wino_tiles(const Conv* s) noexcept nogil:
    return s.batch * ceil_div(s.oh, 2) * ceil_div(s.ow, 2)


cdef inline Py_ssize_t wino_block(const Conv* s) noexcept nogil:
    # tiles per block: V and M within WINO_BLOCK_FLOATS, a multiple of 16, at least 32
    cdef Py_ssize_t per_tile = 16 * (s.cin + s.cout)
    return min(max(WINO_BLOCK_FLOATS // per_tile // 16 * 16, 32), wino_tiles(s))


cdef inline Py_ssize_t wino_slot(const Conv* s) noexcept nogil:
    # one thread's V and M
    return 16 * (wino_ld(s.cin, wino_block(s)) + wino_ld(s.cout, wino_block(s)))


cdef inline Py_ssize_t winograd_elems(const Conv* s) noexcept nogil:
    return 16 * wino_ld(s.cout, s.cin) + s.threads * wino_slot(s)


cdef inline void wino_filter(const floating* w, floating* u, Py_ssize_t o,
                             const Conv* s) noexcept nogil:
    # u[xi, o, c] = (G g G^T)[xi] for output channel o's filters g = w[o, c]
    cdef Py_ssize_t c, i, plane = wino_ld(s.cout, s.cin)
    cdef floating t[4][3]
    cdef const floating* g
    cdef floating* dst
    for c in range(s.cin):
        g = w + (o * s.cin + c) * 9
        for i in range(3):  # G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2
            t[0][i] = g[i]
            t[1][i] = (g[i] + g[3 + i] + g[6 + i]) * 0.5
            t[2][i] = (g[i] - g[3 + i] + g[6 + i]) * 0.5
            t[3][i] = g[6 + i]
        dst = u + o * s.cin + c
        for i in range(4):  # (G g) G^T, row by row
            dst[(4 * i) * plane] = t[i][0]
            dst[(4 * i + 1) * plane] = (t[i][0] + t[i][1] + t[i][2]) * 0.5
            dst[(4 * i + 2) * plane] = (t[i][0] - t[i][1] + t[i][2]) * 0.5
            dst[(4 * i + 3) * plane] = t[i][2]


cdef inline void wino_window(const floating* src, Py_ssize_t r0, Py_ssize_t q0, floating d[4][4],
                             const Conv* s) noexcept nogil:
    # the 4x4 input window whose top left is plane cell (r0, q0), zero outside the image
    cdef Py_ssize_t i, j, r, q
    if r0 >= 0 and q0 >= 0 and r0 + 4 <= s.h and q0 + 4 <= s.w:
        for i in range(4):
            for j in range(4):
                d[i][j] = src[(r0 + i) * s.w + q0 + j]
        return
    for i in range(4):
        r = r0 + i
        for j in range(4):
            q = q0 + j
            d[i][j] = src[r * s.w + q] if 0 <= r < s.h and 0 <= q < s.w else 0


cdef inline void wino_input(const floating* x, floating* v, Py_ssize_t first, Py_ssize_t nb,
                            const Conv* s) noexcept nogil:
    # v[xi, c, k] = (B^T d B)[xi] for tile first + k's window d in input channel c; channels
    # outer, so that each of the 16 matrices is written along its rows
    cdef Py_ssize_t th = ceil_div(s.oh, 2), tw = ceil_div(s.ow, 2), c, k, i, j, tile
    cdef Py_ssize_t plane = wino_ld(s.cin, nb)
    cdef floating d[4][4]
    cdef floating t[4][4]
    cdef floating* dst
    for c in range(s.cin):
        for k in range(nb):
            tile = first + k
            wino_window(x + (tile // (th * tw) * s.cin + c) * s.h * s.w,
                        2 * (tile // tw % th) - s.ph, 2 * (tile % tw) - s.pw, d, s)
            for j in range(4):  # B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3
                t[0][j] = d[0][j] - d[2][j]
                t[1][j] = d[1][j] + d[2][j]
                t[2][j] = d[2][j] - d[1][j]
                t[3][j] = d[1][j] - d[3][j]
            dst = v + c * nb + k
            for i in range(4):  # (B^T d) B, row by row
                dst[(4 * i) * plane] = t[i][0] - t[i][2]
                dst[(4 * i + 1) * plane] = t[i][1] + t[i][2]
                dst[(4 * i + 2) * plane] = t[i][2] - t[i][1]
                dst[(4 * i + 3) * plane] = t[i][1] - t[i][3]


cdef inline void wino_output(const floating* m, const floating* bias, floating* y,
                             Py_ssize_t first, Py_ssize_t nb, const Conv* s) noexcept nogil:
    # y's 2x2 cells of tiles [first, first + nb) = A^T M A, cropped to the output, with the
    # epilogue
    cdef Py_ssize_t th = ceil_div(s.oh, 2), tw = ceil_div(s.ow, 2), o, k, i, j, r, q, tile
    cdef Py_ssize_t plane = wino_ld(s.cout, nb), n, a, b
    cdef floating t[2][4]
    cdef floating out[2][2]
    cdef floating add
    cdef const floating* src
    cdef floating* dst
    for o in range(s.cout):
        add = bias[o] if bias != NULL else 0
        for k in range(nb):
            tile = first + k
            n, a, b = tile // (th * tw), tile // tw % th, tile % tw
            src = m + o * nb + k
            for j in range(4):  # A^T M: rows m0 + m1 + m2, m1 - m2 - m3
                t[0][j] = src[j * plane] + src[(4 + j) * plane] + src[(8 + j) * plane]
                t[1][j] = src[(4 + j) * plane] - src[(8 + j) * plane] - src[(12 + j) * plane]
            for i in range(2):  # (A^T M) A
                out[i][0] = t[i][0] + t[i][1] + t[i][2]
                out[i][1] = t[i][1] - t[i][2] - t[i][3]
            dst = y + (n * s.cout + o) * s.oh * s.ow
            for i in range(2):
                r = 2 * a + i
                for j in range(2):
                    q = 2 * b + j
                    if r < s.oh and q < s.ow:
                        dst[r * s.ow + q] = (ew_relu(out[i][j] + add) if s.relu
                                             else out[i][j] + add)


cdef inline void wino_tiles_block(const floating* x, const floating* u, const floating* bias,
                                  floating* y, floating* area, Py_ssize_t k,
                                  const Conv* s) noexcept nogil:
    # block k of tiles, on one thread; area: its V and M
    cdef Py_ssize_t block = wino_block(s), xi
    cdef Py_ssize_t first = k * block, nb = min(block, wino_tiles(s) - k * block)
    cdef floating* v = area
    cdef floating* m = area + 16 * wino_ld(s.cin, block)
    wino_input(x, v, first, nb, s)
    for xi in range(16):
        gemm(False, False, s.cout, nb, s.cin, u + xi * wino_ld(s.cout, s.cin),
             v + xi * wino_ld(s.cin, nb), m + xi * wino_ld(s.cout, nb), False)
    wino_output(m, bias, y, first, nb, s)


cdef inline int conv2d_winograd(const floating* x, const floating* w, const floating* bias,
                                floating* y, floating* ws, const Conv* s) noexcept nogil:
    cdef Py_ssize_t nblocks = ceil_div(wino_tiles(s), wino_block(s)), o, k
    cdef Py_ssize_t slot = wino_slot(s)
    cdef floating* area = ws + 16 * wino_ld(s.cout, s.cin)
    cdef int nt = run_threads(s), previous = 0
    if nt == 1:
        for o in range(s.cout):
            wino_filter(w, ws, o, s)
        for k in range(nblocks):
            wino_tiles_block(x, ws, bias, y, area, k, s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        previous = blas_local_threads(1)
        for o in prange(s.cout, schedule="static"):
            wino_filter(w, ws, o, s)
        for k in prange(nblocks, schedule="static"):
            wino_tiles_block(x, ws, bias, y, area + threadid() * slot, k, s)
        blas_local_threads(previous)
    return KERNEL_OK
