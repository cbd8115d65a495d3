# The GEMM paths of conv.pyx ("direct", "im2col", "shifted", "batched") on several threads.
#
# Design: one pool of threads for every parallel kernel (OpenMP's, as the tiles and the fused
# kernels use), and no BLAS threads under it: each of our threads calls the BLAS with
# blas_one_thread(), so the GEMMs run where the split puts them instead of two pools taking
# turns on the cores. How the work is split:
# - conv2d: whole (image, group) units per thread, each thread with its own scratch (a slot),
#   when there are at least two units per thread or a multiple of the threads (whole_units);
#   otherwise (a batch of one) the threads share each unit: first its im2col matrix (or padded
#   copy) by input channels, then its GEMM by blocks of output rows. The batched path builds
#   its matrix by images, then splits its one GEMM by output rows.
# - the backward passes: by (group, input channel) pairs, which own disjoint rows of W^T dy and
#   so disjoint planes of dx after col2im, and disjoint columns of dW. No two threads write the
#   same cell, dW needs no sum across threads, and the split depends on the plan's thread count
#   (s.threads, the lowering's), not on how many threads run it, so a plan gives the same bits
#   on however many threads it finds.
# s.threads is decided per instruction by the lowering from the FLOPs; a forked child runs on
# one thread (GCC's pool does not survive fork). The BLAS runs on one thread under each of ours
# even then (conv.pyx's entry points set it for the calling thread, each parallel region for its
# threads), so that the instruction gets the threads the lowering gave it, and the same bits.

from cython.parallel cimport parallel
from libc.stdint cimport int64_t

from .parallel cimport parallel_for

cdef enum:
    ROW_BLOCK = 16  # output rows per GEMM block are a multiple of this: whole register tiles


cdef inline bint whole_units(const Conv* s) noexcept nogil:
    cdef Py_ssize_t units = s.batch * s.groups
    return s.threads > 1 and (units >= 2 * s.threads or units % s.threads == 0)


cdef inline Py_ssize_t pair_chunk(const Conv* s) noexcept nogil:
    # (group, input channel) pairs per thread on the backward passes
    return max(ceil_div(s.cin, s.threads), 1)


cdef inline Py_ssize_t gemm_slot(const Conv* s, int op) noexcept nogil:
    # one thread's scratch on the GEMM paths, in elements
    cdef Py_ssize_t cg = s.cin // s.groups, npix = s.oh * s.ow, taps = s.kh * s.kw
    if op != OP_FORWARD:
        return min(pair_chunk(s), cg) * taps * npix if s.path == C_IM2COL else 0
    if s.path == C_BATCHED and table_fits(s):
        return 0  # its im2col goes straight into the batch's matrix
    if s.path == C_IM2COL and s.transposed:  # then y^T, (cells, output channels of a group)
        return cg * taps * npix + npix * (s.cout // s.groups)
    if s.path == C_IM2COL or s.path == C_BATCHED:
        return cg * taps * npix
    if s.path == C_SHIFTED:
        return shifted_of(s).npadded + shifted_of(s).nrows
    return 0


cdef inline Py_ssize_t gemm_slots(const Conv* s, int op) noexcept nogil:
    # the slots a call needs: one per thread, unless conv2d's threads share each unit
    if op == OP_FORWARD and s.path != C_BATCHED and not whole_units(s):
        return 1
    return max(s.threads, 1)


cdef inline Py_ssize_t row_step(Py_ssize_t rows, Py_ssize_t nt) noexcept nogil:
    # output rows per block of a GEMM split among nt threads (one block when there are none)
    return max(round_up(ceil_div(rows, nt), ROW_BLOCK), ROW_BLOCK)


# -- conv2d ---------------------------------------------------------------------------------------
cdef inline void forward_rows(const floating* src, const floating* w, const floating* bias,
                              floating* y, floating* rows, Py_ssize_t o0, Py_ssize_t o1,
                              const Shifted* t, const Conv* s) noexcept nogil:
    # output channels [o0, o1) of one unit: src its im2col matrix (or padded planes), w and bias
    # its group's, y its output
    cdef Py_ssize_t kdim = s.cin // s.groups * s.kh * s.kw, npix = s.oh * s.ow
    cdef Py_ssize_t ocg = s.cout // s.groups
    cdef floating* yt
    if s.path == C_SHIFTED:
        shifted_rows(src, w, y, rows, o0, o1, t, s)
    elif s.transposed:
        # y^T[:, o0:o1] = col^T w[o0:o1]^T into the slot after the im2col matrix (src), then
        # rows o0.. of y: a shape MKL runs faster on few cells (lowering/conv.py, _transposed_pays)
        yt = <floating*>src + kdim * npix
        gemm_ld(True, True, npix, o1 - o0, kdim, src, npix, w + o0 * kdim, kdim, yt + o0, ocg,
                False)
        transpose_block(yt, y, o0, o1, npix, ocg)
    else:
        gemm_ld(False, False, o1 - o0, npix, kdim, w + o0 * kdim, kdim, src, npix,
                y + o0 * npix, npix, False)
    if bias != NULL or s.activation:
        epilogue_rows(y + o0 * npix, bias + o0 if bias != NULL else NULL, s.activation, o1 - o0,
                      npix)


cdef inline void transpose_block(const floating* yt, floating* y, Py_ssize_t o0, Py_ssize_t o1,
                                 Py_ssize_t npix, Py_ssize_t ld) noexcept nogil:
    # y[o, p] = yt[p, o] for o in [o0, o1): 16 channels at a time, so the reads of a cell are
    # one cache line and the 16 rows written stay in L1
    cdef Py_ssize_t b = o0, o, p, end
    while b < o1:
        end = min(b + ROW_BLOCK, o1)
        for p in range(npix):
            for o in range(b, end):
                y[o * npix + p] = yt[p * ld + o]
        b = end


cdef inline void forward_unit(const floating* x, const floating* w, const floating* bias,
                              floating* y, floating* area, Py_ssize_t u, const Shifted* t,
                              const Conv* s) noexcept nogil:
    # unit u (image u // groups, group u % groups) on one thread; area: its slot
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, g = u % s.groups
    cdef Py_ssize_t kdim = cg * s.kh * s.kw
    cdef const floating* src = x + (u // s.groups * s.cin + g * cg) * s.h * s.w
    if s.path == C_IM2COL:
        im2col(src, area, s)
        src = area
    elif s.path == C_SHIFTED and t.npadded:
        pad_planes(src, area, 0, cg, t, s)
        src = area
    forward_rows(src, w + g * ocg * kdim, bias + g * ocg if bias != NULL else NULL,
                 y + (u // s.groups * s.cout + g * ocg) * s.oh * s.ow, area + t.npadded, 0, ocg,
                 t, s)


cdef inline void forward_shared(const floating* x, const floating* w, const floating* bias,
                                floating* y, floating* area, Py_ssize_t u, const Shifted* t,
                                const Conv* s, int nt) noexcept nogil:
    # unit u on nt threads: its im2col matrix (or padded planes) by input channels, then its
    # GEMM by blocks of output rows (as many as the plan's threads, however many run them)
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, g = u % s.groups
    cdef Py_ssize_t kdim = cg * s.kh * s.kw, npix = s.oh * s.ow, step = row_step(ocg, s.threads)
    cdef Py_ssize_t c, k, nblocks = ceil_div(ocg, step)
    cdef const floating* xg = x + (u // s.groups * s.cin + g * cg) * s.h * s.w
    cdef const floating* src = xg
    cdef const floating* wg = w + g * ocg * kdim
    cdef const floating* bg = bias + g * ocg if bias != NULL else NULL
    cdef floating* yg = y + (u // s.groups * s.cout + g * ocg) * npix
    cdef bint copies = s.path == C_IM2COL or t.npadded
    cdef int previous = 0
    if copies:
        src = area
    if nt == 1:
        if copies:
            input_rows(xg, area, 0, cg, t, s)
        for k in range(nblocks):
            forward_rows(src, wg, bg, yg, area + t.npadded, k * step, min(ocg, (k + 1) * step),
                         t, s)
        return
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        if copies:
            for c in prange(cg, schedule="static"):
                input_rows(xg, area, c, c + 1, t, s)
        for k in prange(nblocks, schedule="static"):
            forward_rows(src, wg, bg, yg, area + t.npadded, k * step, min(ocg, (k + 1) * step),
                         t, s)
        blas_restore_threads(previous)


cdef inline void input_rows(const floating* x, floating* area, Py_ssize_t c0, Py_ssize_t c1,
                            const Shifted* t, const Conv* s) noexcept nogil:
    # input channels [c0, c1) of one unit's im2col matrix, or of its padded planes
    if s.path == C_IM2COL:
        im2col_range(x, area + c0 * s.kh * s.kw * s.oh * s.ow, c0, c1, s)
    else:
        pad_planes(x, area, c0, c1, t, s)


cdef inline int conv2d_gemm(const floating* x, const floating* w, const floating* bias,
                            floating* y, floating* ws, const Conv* s) noexcept nogil:
    # the direct, im2col and shifted paths; ws: the shifted path's packed weights, then slots
    cdef Py_ssize_t u, k, units = s.batch * s.groups
    cdef Py_ssize_t slot = gemm_slot(s, OP_FORWARD), nslots = gemm_slots(s, OP_FORWARD)
    cdef Shifted t
    cdef floating* area
    cdef int nt = run_threads(s), previous = 0
    memset(&t, 0, sizeof(t))
    if s.path == C_SHIFTED:
        t = shifted_of(s)
        pack_taps(w, ws, s)
        w = ws
        ws += t.npacked
        for k in range(nslots):
            zero(ws + k * slot, t.npadded)
    if whole_units(s) and nt == 1:
        for u in range(units):
            forward_unit(x, w, bias, y, ws, u, &t, s)
    elif whole_units(s):
        with parallel(num_threads=nt):
            previous = blas_one_thread()
            for u in prange(units, schedule="static"):
                forward_unit(x, w, bias, y, ws + threadid() * slot, u, &t, s)
            blas_restore_threads(previous)
    else:
        for u in range(units):
            forward_shared(x, w, bias, y, ws, u, &t, s, nt)
    return KERNEL_OK


# Design: on small planes (a ResNet's last stages at 64x64 input: 8x8 down to 2x2) one image's
# GEMM has a few dozen columns, too thin for BLAS to reach speed; stacking the batch's im2col
# matrices side by side makes it one GEMM of batch times the columns, whose result rows are then
# scattered to the images (groups == 1; the lowering checks).
cdef enum:
    TABLE_MAX = 1024  # taps x output cells of a plane small enough for an im2col table


cdef inline bint table_fits(const Conv* s) noexcept nogil:
    return s.kh * s.kw * s.oh * s.ow <= TABLE_MAX


cdef inline void fill_table(Py_ssize_t* table, const Conv* s) noexcept nogil:
    # table[tap, cell]: where in an input plane tap (i, j) of output cell (oh, ow) reads, or -1
    # in the padding
    cdef Py_ssize_t i, j, oh, ow, ih, iw
    for i in range(s.kh):
        for j in range(s.kw):
            for oh in range(s.oh):
                ih = oh * s.sh - s.ph + i * s.dh
                for ow in range(s.ow):
                    iw = ow * s.sw - s.pw + j * s.dw
                    table[0] = ih * s.w + iw if 0 <= ih < s.h and 0 <= iw < s.w else -1
                    table += 1


cdef inline void batch_columns(const floating* x, floating* area, floating* col, Py_ssize_t n,
                               const Conv* s) noexcept nogil:
    # image n's im2col matrix into its columns of col (rows batch * oh * ow long). Small planes
    # (the ones this path is for) read through a table of each cell's source: one pass, where
    # im2col's per-tap copies are a few cells each; others go through area.
    cdef Py_ssize_t table[TABLE_MAX]
    cdef Py_ssize_t npix = s.oh * s.ow, taps = s.kh * s.kw, ldc = s.batch * npix, k, c, p
    cdef const floating* plane
    cdef floating* row
    cdef floating v
    cdef Py_ssize_t i
    if not table_fits(s):
        im2col(x + n * s.cin * s.h * s.w, area, s)
        for k in range(s.cin * taps):
            memcpy(col + k * ldc + n * npix, area + k * npix, <size_t>npix * sizeof(floating))
        return
    fill_table(table, s)
    for c in range(s.cin):
        plane = x + (n * s.cin + c) * s.h * s.w
        for k in range(taps):
            row = col + (c * taps + k) * ldc + n * npix
            for p in range(npix):  # a load and a select: no branch on the padding
                i = table[k * npix + p]
                v = plane[i if i >= 0 else 0]
                row[p] = v if i >= 0 else 0


cdef inline void batch_out(const floating* res, floating* y, const floating* bias,
                           Py_ssize_t n, const Conv* s) noexcept nogil:
    # image n's output: its columns of the result, with the epilogue
    cdef Py_ssize_t npix = s.oh * s.ow, o
    for o in range(s.cout):
        memcpy(y + (n * s.cout + o) * npix, res + o * s.batch * npix + n * npix,
               <size_t>npix * sizeof(floating))
    if bias != NULL or s.activation:
        epilogue_rows(y + n * s.cout * npix, bias, s.activation, s.cout, npix)


cdef inline int conv2d_batched(const floating* x, const floating* w, const floating* bias,
                               floating* y, floating* ws, const Conv* s) noexcept nogil:
    # ws: a slot per thread, then every image's im2col, then the GEMM's result
    cdef Py_ssize_t kdim = s.cin * s.kh * s.kw, ncols = s.batch * s.oh * s.ow
    cdef Py_ssize_t slot = gemm_slot(s, OP_FORWARD), n, k, step
    cdef floating* col = ws + gemm_slots(s, OP_FORWARD) * slot
    cdef floating* res = col + kdim * ncols
    cdef int nt = run_threads(s), previous = 0
    step = row_step(s.cout, s.threads)
    if nt == 1:
        for n in range(s.batch):
            batch_columns(x, ws, col, n, s)
        for k in range(ceil_div(s.cout, step)):
            gemm_ld(False, False, min(s.cout - k * step, step), ncols, kdim, w + k * step * kdim,
                    kdim, col, ncols, res + k * step * ncols, ncols, False)
        for n in range(s.batch):
            batch_out(res, y, bias, n, s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for n in prange(s.batch, schedule="static"):
            batch_columns(x, ws + threadid() * slot, col, n, s)
        for k in prange(ceil_div(s.cout, step), schedule="static"):
            gemm_ld(False, False, min(s.cout - k * step, step), ncols, kdim, w + k * step * kdim,
                    kdim, col, ncols, res + k * step * ncols, ncols, False)
        for n in prange(s.batch, schedule="static"):
            batch_out(res, y, bias, n, s)
        blas_restore_threads(previous)
    return KERNEL_OK


# -- the backward passes, by (group, input channel) pairs -----------------------------------------
# Design: at a stride, backward data stays one GEMM W_g^T dy_g through the BLAS's transpose flag
# into the whole col matrix, then col2im_rows. On the U-Net's transposed layer (64 -> 32, 3x3/2,
# 32x32 -> 64x64: a 288 x 1024 x 64 GEMM) perf gave the GEMM (SciPy's OpenBLAS, kernel and
# packing) about 70% of the kernel's time and col2im with its zeroing 30% (AMD Zen 3, 1
# thread). Alternatives measured against it in one process, old and new kernels interleaved
# (ABBA, medians of 200-300 calls; the shared 2-core machine at load 9-12, so ratios only):
# - W^T stored contiguous, so the GEMM needs no transpose flag (what packing the weight once
#   at compile time would give): 0.985-0.987 of the time at 1 thread, 0.980 at 2: not worth a
#   packed op; copying W^T into the slot on every call instead was 1.00-1.06x slower over
#   seven shapes (1.23x on a 2x2 plane), though SciPy's sgemm alone ran 16-22% faster so.
# - the GEMM by blocks of dy's rows, each block's dx rows made by col2im_rows at once, while
#   its columns are in L2: 1.04-1.14x slower on that layer, up to 1.5x on 128 -> 64 at 16x16
#   (thin GEMMs of 96-320 columns; col rows a plane apart).
# - the sub-pixel form (four stride-1 convolutions of dy by the 1x1, 2x1, 1x2 and 2x2 subsets
#   of the taps, one per output phase, interleaved): as a graph of conv2d's paths (pointwise,
#   row tiles), the four convolutions alone took 1160 us against this kernel's 1216 (profiler
#   medians), before any interleaving: the saving can only be col2im's, and only with tiles
#   that store the phases interleaved at the GEMM's speed.
# - the same GEMM on gemm_tile.h's panels, then the same col2im (the "tiles" way below, the C
#   runtime's: bitwise C's): benchmarks/unet_layers.py conv-transpose --ways, the two plans
#   called by turns, medians of 100-200 calls, four runs each (AMD EPYC Zen 3, OpenBLAS, load
#   11-15 on the 2 cores, so ratios only), tiles / BLAS at 1 thread: 3x3/2 64 -> 32 at 32x32
#   1.04-1.19, the U-Net's 2x2/2 at 64x64 1.13-2.67 (col's rows 16 KiB apart: the tiles'
#   stores of a panel land in few cache sets); at 2 threads 1.50-1.57 and 1.48 (both 70-130
#   ms: the scheduler's, and the tiles way wakes the threads twice per image and group). So
#   the rules keep the BLAS; compile(tune="deterministic") takes the tiles.
cdef inline void data_pairs(const floating* w, const floating* dy, const floating* bias,
                            floating* dx, floating* area, Py_ssize_t p0, Py_ssize_t p1,
                            const Conv* s) noexcept nogil:
    # dx's planes of pairs [p0, p1) in every image: rows of W_g^T dy_g, then col2im (im2col
    # path; the direct path's rows are the planes); then the bias, if any (NULL: none), on
    # planes just written (col2im_rows adds it to each row while the row is in L1)
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, taps = s.kh * s.kw
    cdef Py_ssize_t kdim = cg * taps, npix = s.oh * s.ow, plane = s.h * s.w, n, g, c0, c1
    cdef floating* dxg
    cdef const floating* dyg
    cdef const floating* bg
    for n in range(s.batch):
        for g in range(p0 // cg, ceil_div(p1, cg)):
            c0, c1 = max(p0 - g * cg, 0), min(p1 - g * cg, cg)
            dxg = dx + (n * s.cin + g * cg) * plane
            dyg = dy + (n * s.cout + g * ocg) * npix
            bg = bias + g * cg if bias != NULL else NULL
            if s.path == C_IM2COL:
                gemm_ld(True, False, (c1 - c0) * taps, npix, ocg, w + g * ocg * kdim + c0 * taps,
                        kdim, dyg, npix, area, npix, False)
                if s.sh > 1 or s.sw > 1:
                    col2im_rows(area, dxg, bg, c0, c1, s)
                    continue  # its rows took the bias
                zero(dxg + c0 * plane, (c1 - c0) * plane)
                col2im_range(area, dxg, c0, c1, s)
            else:
                gemm_ld(True, False, c1 - c0, npix, ocg, w + g * ocg * kdim + c0, kdim, dyg, npix,
                        dxg + c0 * npix, npix, False)
            if bg != NULL:
                epilogue_rows(dxg + c0 * plane, bg + c0, 0, c1 - c0, plane)


cdef inline void filter_pairs(const floating* x, const floating* dy, floating* dw, floating* area,
                              Py_ssize_t p0, Py_ssize_t p1, const Conv* s) noexcept nogil:
    # dW's columns of pairs [p0, p1), summed over the images in order by the GEMM (beta = 1)
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, taps = s.kh * s.kw
    cdef Py_ssize_t kdim = cg * taps, npix = s.oh * s.ow, n, g, c0, c1
    cdef const floating* src
    for n in range(s.batch):
        for g in range(p0 // cg, ceil_div(p1, cg)):
            c0, c1 = max(p0 - g * cg, 0), min(p1 - g * cg, cg)
            src = x + (n * s.cin + g * cg + c0) * s.h * s.w
            if s.path == C_IM2COL:
                im2col_range(x + (n * s.cin + g * cg) * s.h * s.w, area, c0, c1, s)
                src = area
            gemm_ld(False, True, ocg, (c1 - c0) * taps, npix, dy + (n * s.cout + g * ocg) * npix,
                    npix, src, npix, dw + g * ocg * kdim + c0 * taps, kdim, True)


cdef inline int backward_gemm(const floating* a, const floating* dy, const floating* bias,
                              floating* result, floating* ws, bint data,
                              const Conv* s) noexcept nogil:
    # backward data (a: w, result: dx, bias: dx's or NULL) or filter (a: x, result: dw, bias
    # NULL) on the GEMM paths
    cdef Py_ssize_t chunk = pair_chunk(s), slot = gemm_slot(s, OP_DATA), k
    cdef Py_ssize_t nchunks = ceil_div(s.cin, chunk)
    cdef int nt = run_threads(s), previous = 0
    if not data:
        zero(result, s.cout * (s.cin // s.groups) * s.kh * s.kw)
    if nt == 1:
        for k in range(nchunks):
            if data:
                data_pairs(a, dy, bias, result, ws, k * chunk, min(s.cin, (k + 1) * chunk), s)
            else:
                filter_pairs(a, dy, result, ws, k * chunk, min(s.cin, (k + 1) * chunk), s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        previous = blas_one_thread()
        for k in prange(nchunks, schedule="static"):
            if data:
                data_pairs(a, dy, bias, result, ws + threadid() * slot, k * chunk,
                           min(s.cin, (k + 1) * chunk), s)
            else:
                filter_pairs(a, dy, result, ws + threadid() * slot, k * chunk,
                             min(s.cin, (k + 1) * chunk), s)
        blas_restore_threads(previous)
    return KERNEL_OK


# -- backward data's "tiles" way: conv_data_gemm.h, the C runtime's GEMM path --------------------
# Design: the GEMM W_g^T dy_g on gemm_tile.h's panels (dy_g packed, W_g^T's row tiles where they
# pay), then col2im by dx's channels: the header the C runtime's data_gemm runs, with its scratch
# in the workspace, so an export gives this way's bits at any thread count (compile(tune=
# "deterministic") takes it where the rules' way is the BLAS). Per (image, group) a GEMM run of
# the threads, then a col2im run; the BLAS ways split by channel pairs instead, each thread its
# rows' GEMM and col2im while they are in cache, which the panels cannot (op(A)^T's columns are
# read m apart: a block of them is no operand of theirs).
cdef extern from "conv_data_gemm.h":
    ctypedef void (*mg_gemm_part_fn)(void* ctx, int64_t lo, int64_t hi) noexcept nogil
    ctypedef void (*mg_gemm_pool_fn)(int64_t n, int64_t most, mg_gemm_part_fn part,
                                     void* ctx) noexcept nogil
    ctypedef struct conv_data_gemm_shape:
        int64_t batch, cin, cout, groups
        conv_col2im_geometry g
    int64_t conv_data_gemm_floats(const conv_data_gemm_shape* s, int64_t* gemm_at) noexcept nogil
    void conv_data_gemm_run(const conv_data_gemm_shape* s, const float* w, const float* dy,
                            const float* bias, float* dx, float* scratch, mg_gemm_pool_fn pool,
                            int64_t gemm_threads, int64_t threads) noexcept nogil


include "gemm_pool.pxi"


cdef inline conv_data_gemm_shape data_shape(const Conv* s) noexcept nogil:
    cdef conv_data_gemm_shape t
    t.batch, t.cin, t.cout, t.groups = s.batch, s.cin, s.cout, s.groups
    t.g.h, t.g.w, t.g.oh, t.g.ow, t.g.kh, t.g.kw = s.h, s.w, s.oh, s.ow, s.kh, s.kw
    t.g.sh, t.g.sw, t.g.ph, t.g.pw, t.g.dh, t.g.dw = s.sh, s.sw, s.ph, s.pw, s.dh, s.dw
    return t


cdef inline Py_ssize_t data_tiles_elems(const Conv* s) noexcept nogil:
    # the header's scratch (col, then the GEMM's), one float at least: the workspace is a buffer
    cdef conv_data_gemm_shape t = data_shape(s)
    cdef int64_t gemm_at
    return max(conv_data_gemm_floats(&t, &gemm_at), 1)


cdef inline int data_tiles(const float* w, const float* dy, const float* bias, float* dx,
                           float* ws, const Conv* s) noexcept nogil:
    cdef conv_data_gemm_shape t = data_shape(s)
    cdef int nt = run_threads(s)
    if not cpu_isa_ok(1):
        return KERNEL_UNSUPPORTED  # no FMA: the lowering offers this way only with it
    conv_data_gemm_run(&t, w, dy, bias, dx, ws, pool_run, nt, nt)
    return KERNEL_OK
