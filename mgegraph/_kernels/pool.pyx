# 2-D pooling over NCHW tensors (max, average, adaptive) and the passes its gradients use.
#
# Parameter layout (ints): the Pool struct below, whose field names this module exports as
# POOL_FIELDS (the lowering, mgegraph/_kernels/lowering/pool.py, packs them by name; a struct of
# Py_ssize_t fields has no padding, so it overlays the int array exactly):
#   pool2d:                 bufs: x, y (int8 and uint8: pool_int.pxi, floats[0] the zero point)
#   max_pool2d_backward:    bufs: x, dy, dx
#   avg_pool2d_backward:    bufs: dy, dx
#   max_pool2d_select:      bufs: x, h, y (y = h at the argmax of each window of x)
# ``mode`` is one of POOL_MODES; the planes are the N * C images of the input; ``threads`` the
# threads the lowering planned (parallel.threads_for), split over planes.

from libc.math cimport INFINITY, NAN
from libc.string cimport memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_fn, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for, part_fn
from .window cimport ceil_div, clamp

ctypedef struct Pool:
    # ph, pw: padding before the image, eh, ew: after it; dh, dw: dilation
    Py_ssize_t mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, eh, ew, threads

cdef enum PoolMode:
    P_MAX, P_AVG_INCLUDE, P_AVG_EXCLUDE, P_ADAPTIVE_MAX, P_ADAPTIVE_AVG

POOL_MODES = {"max": P_MAX, "average": P_AVG_INCLUDE,
              "average_count_exclude_padding": P_AVG_EXCLUDE,
              "adaptive_max": P_ADAPTIVE_MAX, "adaptive_average": P_ADAPTIVE_AVG}


cdef Pool _pool
POOL_FIELDS = fields_of(_pool, sizeof(Pool))




# Design: every pooling kernel walks one output row at a time. The columns whose windows lie wholly
# inside the image (all of them when there is no padding) go through row_interior: loops over
# windows with no clamping whose per-window work is branch-free (maxss, compares and selects).
# Given a literal window shape (the common 2x2/2, 3x3/3, 3x3/2, 3x3/1), the C compiler unrolls
# the window and vectorises across windows. The argmax ops (max backward, select) run in chunks
# of three passes: maxima, first-hit indices, then the scatter or gather. Border columns and
# adaptive windows take pool_cell, which clamps each window. NaN semantics are np.max's: a NaN in
# a window is its maximum, and the argmax ops use the first maximum in row-major order, or the
# first NaN. Windows that tile the input (stride == kernel, no padding) let the max and avg
# backward passes store rather than zero all of dx and then add; adaptive windows that divide
# the input evenly are such windows (as_sliding), and the global average of a plane, a chain of
# dependent adds when summed alone, sums 8 planes at once (global_sums).
# Threads: planes are independent; each thread pools a contiguous run of them (parallel.pyx), so
# results are bitwise the same at any thread count and no two threads write one cell of dx.
cdef enum RowOp:
    R_MAX, R_AVG, R_MAX_BACKWARD, R_SELECT, R_AVG_BACKWARD


cdef inline bint is_max(floating v, floating m) noexcept nogil:
    # v is a cell the maximum m came from: equal to it, or NaN (then m is NaN too)
    return (v == m) | (v != v)


ctypedef struct Span:
    # The cells one window reads along one axis: lo, lo + step, ... (n of them, padding cut
    # off), and how many of its cells lie inside the input or its padding (the divisor of
    # "average": a ceil-mode overhang past the padding is not counted).
    Py_ssize_t lo, n, padded


cdef inline bint is_adaptive(const Pool* s) noexcept nogil:
    return s.mode == P_ADAPTIVE_MAX or s.mode == P_ADAPTIVE_AVG


cdef inline Span window(const Pool* s, bint rows, Py_ssize_t o) noexcept nogil:
    # Window o along the rows (or columns). Adaptive windows are PyTorch's:
    # [floor(o * size / osize), ceil((o + 1) * size / osize)). The shape rules keep every window
    # at least one cell inside the input.
    cdef Py_ssize_t size = s.h if rows else s.w, osize = s.oh if rows else s.ow
    cdef Py_ssize_t k = s.kh if rows else s.kw, d = s.dh if rows else s.dw
    cdef Py_ssize_t start, first, stop
    cdef Span r
    if is_adaptive(s):
        r.lo = o * size // osize
        r.n = r.padded = ((o + 1) * size + osize - 1) // osize - r.lo
        return r
    start = o * (s.sh if rows else s.sw) - (s.ph if rows else s.pw)
    first = ceil_div(-start, d) if start < 0 else 0
    stop = clamp(ceil_div(size - start, d), 0, k)
    r.lo = start + first * d
    r.n = stop - first if stop > first else 0
    r.padded = clamp(ceil_div(size + (s.eh if rows else s.ew) - start, d), 0, k)
    return r


cdef inline Py_ssize_t divisor(const Pool* s, Span r, Span c) noexcept nogil:
    return r.padded * c.padded if s.mode == P_AVG_INCLUDE else r.n * c.n


cdef inline bint dilated(const Pool* s) noexcept nogil:
    return s.dh != 1 or s.dw != 1


cdef inline void interior(const Pool* s, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    # The output columns [lo, hi) whose windows need no clamping; none for adaptive windows
    # (they vary in width) or dilated ones (rare: pool_cell steps through them).
    lo[0] = hi[0] = 0
    if is_adaptive(s) or dilated(s) or s.w + s.pw < s.kw:
        return
    lo[0] = clamp(ceil_div(s.pw, s.sw), 0, s.ow)
    hi[0] = clamp((s.w + s.pw - s.kw) // s.sw + 1, lo[0], s.ow)


# -- one window: rows r < nr, columns j < nc of a plane of row length w, clamping already done --
cdef inline floating window_max(const floating* x, Py_ssize_t w, Py_ssize_t cs, Py_ssize_t nr,
                                Py_ssize_t nc) noexcept nogil:
    # `v if v > m else m` is exactly maxss/maxsd (vector or scalar): no branch either way.
    # NaNs, which it skips, are counted beside it, so the maximum of a window with one is NaN.
    cdef floating m = -INFINITY, v
    cdef bint nan = False
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            v = x[r * w + j * cs]
            m = v if v > m else m
            nan = nan | (v != v)
    return NAN if nan else m


cdef inline int first_hit(const floating* x, Py_ssize_t w, Py_ssize_t cs, Py_ssize_t nr,
                          Py_ssize_t nc, floating m) noexcept nogil:
    # The row-major index r * nc + j of the first cell holding the window's maximum m (or the
    # first NaN). Scanning backwards, the last hit is the first; an int select over float compares
    # vectorises across windows, or is a cmov in scalar code, where a float one would branch.
    cdef int best = 0
    cdef Py_ssize_t r, j
    for r in range(nr - 1, -1, -1):
        for j in range(nc - 1, -1, -1):
            best = <int>(r * nc + j) if is_max(x[r * w + j * cs], m) else best
    return best


cdef inline Py_ssize_t first_max(const floating* x, Py_ssize_t w, Py_ssize_t cs, Py_ssize_t nr,
                                 Py_ssize_t nc) noexcept nogil:
    # The offset of the cell window_max's value comes from
    cdef int k = first_hit(x, w, cs, nr, nc, window_max(x, w, cs, nr, nc))
    return (k // nc) * w + (k % nc) * cs


cdef inline double window_sum(const floating* x, Py_ssize_t w, Py_ssize_t cs, Py_ssize_t nr,
                              Py_ssize_t nc) noexcept nogil:
    # Accumulates in double: a global pool sums thousands of float32 values.
    cdef double acc = 0
    cdef Py_ssize_t r, j
    if nc == w and cs == 1:  # whole rows are one contiguous run (global pooling)
        for r in range(nr * w):
            acc += x[r]
        return acc
    for r in range(nr):
        for j in range(nc):
            acc += x[r * w + j * cs]
    return acc


cdef inline void window_route(const floating* x, floating* dx, Py_ssize_t w, Py_ssize_t cs,
                              Py_ssize_t nr, Py_ssize_t nc, floating g) noexcept nogil:
    dx[first_max(x, w, cs, nr, nc)] += g


cdef inline floating window_select(const floating* x, const floating* h, Py_ssize_t w,
                                   Py_ssize_t cs, Py_ssize_t nr, Py_ssize_t nc) noexcept nogil:
    # h at the cell window_route sends the gradient to
    return h[first_max(x, w, cs, nr, nc)]


cdef inline void window_spread(floating* dx, Py_ssize_t w, Py_ssize_t cs, Py_ssize_t nr,
                               Py_ssize_t nc, floating share, bint overwrite) noexcept nogil:
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            if overwrite:
                dx[r * w + j * cs] = share
            else:
                dx[r * w + j * cs] += share


# -- one output row ------------------------------------------------------------------------------
# Full-size side (offset like x): x, h, dx. Pooled side (offset like y): pin (dy), pout (y).
# A window's cells are nr rows w apart by nc columns cs apart (w: dilation x row length).
cdef inline void window_op(RowOp op, const floating* x, const floating* h, floating* dx,
                           const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t cs,
                           Py_ssize_t nr, Py_ssize_t nc, double div,
                           bint overwrite) noexcept nogil:
    if op == R_MAX:
        pout[0] = window_max(x, w, cs, nr, nc)
    elif op == R_AVG:
        pout[0] = <floating>(window_sum(x, w, cs, nr, nc) / div)
    elif op == R_MAX_BACKWARD:
        window_route(x, dx, w, cs, nr, nc, pin[0])
    elif op == R_SELECT:
        pout[0] = window_select(x, h, w, cs, nr, nc)
    else:
        window_spread(dx, w, cs, nr, nc, pin[0] / <floating>div, overwrite)


# -- 2x2 windows, stride 2 (the commonest max pooling) ---------------------------------------------
# A loop the compiler vectorises across windows, bitwise what window_max gives: a left-leaning
# tree of `b if b > a else a` over the cells in row-major order keeps the first maximum as the
# sequential scan does (so -0.0 and 0.0 come out as there), with NaN flagged beside it.
cdef inline floating max4(floating a, floating b, floating c, floating d) noexcept nogil:
    a = b if b > a else a
    c = d if d > c else c
    a = c if c > a else a
    return NAN if (a != a) | (b != b) | (c != c) | (d != d) else a


cdef void max_2x2(const floating* x, Py_ssize_t w, floating* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t o
    for o in range(n):
        y[o] = max4(x[2 * o], x[2 * o + 1], x[w + 2 * o], x[w + 2 * o + 1])


# -- 3x3 windows, stride 2 (ResNet's stem pooling) ------------------------------------------------
# As max_2x2: each row's three cells folded in order, then the rows in order. `b if b > a else a`
# keeps the first of equal values, and that fold is associative, so this is the row-major scan of
# window_max (the same -0.0 or 0.0), bitwise, with NaN flagged beside it.
cdef inline floating max3(floating a, floating b, floating c) noexcept nogil:
    a = b if b > a else a
    return c if c > a else a


cdef inline bint nan3(floating a, floating b, floating c) noexcept nogil:
    return (a != a) | (b != b) | (c != c)


cdef void max_3x3_s2(const floating* x, Py_ssize_t w, floating* y, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t o
    cdef floating a, b
    cdef const floating* r1 = x + w
    cdef const floating* r2 = x + 2 * w
    for o in range(n):
        a = max3(x[2 * o], x[2 * o + 1], x[2 * o + 2])
        b = max3(r1[2 * o], r1[2 * o + 1], r1[2 * o + 2])
        a = b if b > a else a
        b = max3(r2[2 * o], r2[2 * o + 1], r2[2 * o + 2])
        a = b if b > a else a
        y[o] = NAN if (nan3(x[2 * o], x[2 * o + 1], x[2 * o + 2])
                       | nan3(r1[2 * o], r1[2 * o + 1], r1[2 * o + 2])
                       | nan3(r2[2 * o], r2[2 * o + 1], r2[2 * o + 2])) else a


cdef enum:
    CHUNK = 64  # windows per pass of row_argmax; its scratch lives on the stack


cdef inline void chunk_hits(const floating* x, floating* m, int* k, Py_ssize_t cnt, Py_ssize_t w,
                           Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride) noexcept nogil:
    # m[o], k[o]: the maximum of window o and the index of its first cell holding it
    cdef Py_ssize_t o
    for o in range(cnt):
        m[o] = window_max(x + o * stride, w, 1, nr, nc)
    for o in range(cnt):
        k[o] = first_hit(x + o * stride, w, 1, nr, nc, m[o])


cdef void chunk_argmax(const floating* x, floating* m, int* k, Py_ssize_t cnt, Py_ssize_t w,
                       Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride) noexcept nogil:
    # row_interior's literal cases, applied here: GCC will not inline the whole of row_argmax
    # into each of them, but does inline these two loops.
    cdef Py_ssize_t o
    if nr == 2 and nc == 2 and stride == 2:
        for o in range(cnt):
            m[o] = max4(x[2 * o], x[2 * o + 1], x[w + 2 * o], x[w + 2 * o + 1])
        for o in range(cnt):
            k[o] = first_hit(x + 2 * o, w, 1, 2, 2, m[o])
    elif nr == 3 and nc == 3 and stride == 3:
        chunk_hits(x, m, k, cnt, w, 3, 3, 3)
    elif nr == 3 and nc == 3 and stride == 2:
        chunk_hits(x, m, k, cnt, w, 3, 3, 2)
    elif nr == 3 and nc == 3 and stride == 1:
        chunk_hits(x, m, k, cnt, w, 3, 3, 1)
    else:
        chunk_hits(x, m, k, cnt, w, nr, nc, stride)


cdef inline void row_argmax(bint select, const floating* x, const floating* h, floating* dx,
                            const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                            Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride,
                            bint overwrite) noexcept nogil:
    # max_pool2d_backward (dx += dy at each window's argmax) or _select (y = h there), in three
    # passes per chunk so the first two, maxima and then argmax indices, vectorise across
    # windows; the third reads or scatters. overwrite: the windows tile these nr rows, so they
    # are zeroed here rather than by a memset of all of dx.
    cdef floating m[CHUNK]
    cdef int k[CHUNK]
    cdef Py_ssize_t offset[CHUNK]  # of each window index k, when a window has <= CHUNK cells
    cdef Py_ssize_t c, base, o, cnt, at, r
    cdef bint table = nr * nc <= CHUNK
    if table:
        for r in range(nr * nc):
            offset[r] = (r // nc) * w + r % nc  # a lookup: no division per window
    if overwrite:
        for r in range(nr):
            memset(dx + r * w, 0, <size_t>(n * stride) * sizeof(floating))
    for c in range((n + CHUNK - 1) // CHUNK):
        base = c * CHUNK
        cnt = n - base if n - base < CHUNK else CHUNK
        chunk_argmax(x + base * stride, m, k, cnt, w, nr, nc, stride)
        for o in range(cnt):
            at = offset[k[o]] if table else (k[o] // nc) * w + k[o] % nc
            at += (base + o) * stride
            if select:
                pout[base + o] = h[at]
            else:
                dx[at] += pin[base + o]


cdef inline void row_windows(RowOp op, const floating* x, const floating* h, floating* dx,
                             const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                             Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride, double div,
                             bint overwrite) noexcept nogil:
    # n windows of nr x nc cells, `stride` columns apart; pooled-side pointers step by one
    cdef Py_ssize_t o
    for o in range(n):
        window_op(op, x + o * stride, h + o * stride, dx + o * stride, pin + o, pout + o, w, 1,
                  nr, nc, div, overwrite)


cdef inline void row_interior(RowOp op, const floating* x, const floating* h, floating* dx,
                              const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                              Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride, double div,
                              bint overwrite) noexcept nogil:
    # Literal window shapes for the common layers, so each call below compiles to its own loop
    cdef bint two = nr == 2 and nc == 2 and stride == 2
    if op == R_MAX and two:
        max_2x2(x, w, pout, n)
    elif op == R_MAX and nr == 3 and nc == 3 and stride == 2:
        max_3x3_s2(x, w, pout, n)
    elif op == R_MAX_BACKWARD or op == R_SELECT:  # specialised per chunk instead
        row_argmax(op == R_SELECT, x, h, dx, pin, pout, w, n, nr, nc, stride, overwrite)
    elif nr == 2 and nc == 2 and stride == 2:
        row_windows(op, x, h, dx, pin, pout, w, n, 2, 2, 2, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 3:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 3, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 2:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 2, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 1:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 1, div, overwrite)
    else:
        row_windows(op, x, h, dx, pin, pout, w, n, nr, nc, stride, div, overwrite)


cdef inline void pool_cell(RowOp op, const Pool* s, Py_ssize_t ow, Span rows, const floating* x,
                           const floating* h, floating* dx, const floating* pin,
                           floating* pout) noexcept nogil:
    # One clamped window (border, adaptive or dilated); accumulates into dx, never overwrites
    cdef Span cols = window(s, False, ow)
    cdef Py_ssize_t at = rows.lo * s.w + cols.lo
    window_op(op, x + at, h + at, dx + at, pin + ow, pout + ow, s.dh * s.w, s.dw, rows.n,
              cols.n, <double>divisor(s, rows, cols), False)


cdef inline void pool_plane(RowOp op, const Pool* s, const floating* x, const floating* h,
                            floating* dx, const floating* pin, floating* pout,
                            bint overwrite) noexcept nogil:
    cdef Py_ssize_t lo, hi, oh, ow, at
    cdef Span rows, full  # full: an interior window's columns
    full.lo, full.n, full.padded = 0, s.kw, s.kw
    interior(s, &lo, &hi)
    for oh in range(s.oh):
        rows = window(s, True, oh)
        at = rows.lo * s.w + lo * s.sw - s.pw
        if overwrite:  # a literal, so the stores compile without a test
            row_interior(op, x + at, h + at, dx + at, pin + lo, pout + lo, s.w, hi - lo,
                         rows.n, s.kw, s.sw, <double>divisor(s, rows, full), True)
        elif hi > lo:
            row_interior(op, x + at, h + at, dx + at, pin + lo, pout + lo, s.w, hi - lo,
                         rows.n, s.kw, s.sw, <double>divisor(s, rows, full), False)
        for ow in range(lo):
            pool_cell(op, s, ow, rows, x, h, dx, pin, pout)
        for ow in range(hi, s.ow):
            pool_cell(op, s, ow, rows, x, h, dx, pin, pout)
        pin += s.ow
        pout += s.ow


cdef inline bint tiles(const Pool* s) noexcept nogil:
    # Windows that are disjoint, unclamped and adjacent: a backward pass can store, not add.
    # (A ceil-mode window past the image's end is clamped: then they do not.)
    return (not is_adaptive(s) and not dilated(s) and s.ph == 0 and s.pw == 0 and s.eh == 0
            and s.ew == 0 and s.sh == s.kh and s.sw == s.kw and s.oh * s.kh <= s.h
            and s.ow * s.kw <= s.w)


cdef inline void clear_untiled(floating* dx, const Pool* s) noexcept nogil:
    # Zero the cells of one plane that no tiling window covers: the last rows and columns
    cdef Py_ssize_t r, used_h = s.oh * s.kh, used_w = s.ow * s.kw
    if used_w < s.w:
        for r in range(used_h):
            memset(dx + r * s.w + used_w, 0, <size_t>(s.w - used_w) * sizeof(floating))
    memset(dx + used_h * s.w, 0, <size_t>((s.h - used_h) * s.w) * sizeof(floating))


ctypedef struct PoolRun:
    # one pooling instruction, for the parts parallel_for runs: planes [lo, hi) each
    RowOp op
    Pool s               # the windows (adaptive ones made sliding where they can be)
    const void* x
    const void* h
    void* dx
    const void* pin
    void* pout


cdef inline void as_sliding(Pool* s) noexcept nogil:
    # Adaptive windows over sizes the output divides are sliding windows of the quotient: the
    # same cells, divisors (no padding: include == exclude) and argmax order; they tile the input.
    if not is_adaptive(s) or s.oh <= 0 or s.ow <= 0 or s.h % s.oh != 0 or s.w % s.ow != 0:
        return
    s.mode = P_MAX if s.mode == P_ADAPTIVE_MAX else P_AVG_INCLUDE
    s.kh = s.sh = s.h // s.oh
    s.kw = s.sw = s.w // s.ow
    s.ph = s.pw = s.eh = s.ew = 0
    s.dh = s.dw = 1


cdef inline bint is_global_avg(RowOp op, const Pool* s) noexcept nogil:
    return op == R_AVG and s.oh == 1 and s.ow == 1 and s.kh == s.h and s.kw == s.w and tiles(s)


cdef void global_sums(const floating* x, floating* y, Py_ssize_t planes, Py_ssize_t full,
                      double div) noexcept nogil:
    # y[p] = sum of plane p / div, each plane summed in order as window_sum does (so bitwise its
    # result), 8 planes at a time: one plane's adds wait on each other, 8 chains overlap.
    cdef double acc[8]
    cdef Py_ssize_t p = 0, i, k
    while p + 8 <= planes:
        for k in range(8):
            acc[k] = 0
        for i in range(full):
            for k in range(8):
                acc[k] += x[k * full + i]
        for k in range(8):
            y[p + k] = <floating>(acc[k] / div)
        x += 8 * full
        p += 8
    for p in range(p, planes):
        y[p] = <floating>(window_sum(x, full, 1, 1, full) / div)
        x += full


cdef inline int planes_part(const PoolRun* r, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    # Planes [lo, hi) of r (tag, always NULL, picks the dtype). An op's unused pointers are set
    # to used ones of the same layout, and are never read.
    cdef const Pool* s = &r.s
    cdef Py_ssize_t p, full = s.h * s.w, pooled = s.oh * s.ow
    cdef bint backward = r.op == R_MAX_BACKWARD or r.op == R_AVG_BACKWARD
    cdef bint overwrite = backward and tiles(s)
    cdef const floating* x = <const floating*>r.x + lo * full
    cdef const floating* h = <const floating*>r.h + lo * full
    cdef floating* dx = <floating*>r.dx + lo * full
    cdef const floating* pin = <const floating*>r.pin + lo * pooled
    cdef floating* pout = <floating*>r.pout + lo * pooled
    if is_global_avg(r.op, s):
        global_sums(x, pout, hi - lo, full, <double>(s.h * s.w))
        return KERNEL_OK
    if backward and not overwrite:
        memset(dx, 0, <size_t>((hi - lo) * full) * sizeof(floating))
    for p in range(hi - lo):
        if overwrite:
            clear_untiled(dx + p * full, s)
        pool_plane(r.op, s, x + p * full, h + p * full, dx + p * full, pin + p * pooled,
                   pout + p * pooled, overwrite)
    return KERNEL_OK


cdef int planes_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return planes_part(<const PoolRun*>ctx, lo, hi, <float*>NULL)
cdef int planes_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return planes_part(<const PoolRun*>ctx, lo, hi, <double*>NULL)


cdef inline int pool_planes(RowOp op, const Pool* s, const floating* x, const floating* h,
                            floating* dx, const floating* pin, floating* pout) noexcept nogil:
    cdef PoolRun r
    r.op, r.s = op, s[0]
    as_sliding(&r.s)
    r.x, r.h, r.dx, r.pin, r.pout = x, h, dx, pin, pout
    return parallel_for(s.threads, s.planes, planes_f32 if floating is float else planes_f64, &r)


cdef inline int pool2d_impl(const floating* x,  # IN  (planes, h, w)
                            floating* y,        # OUT (planes, oh, ow)
                            const Pool* s) noexcept nogil:
    if s.mode == P_MAX or s.mode == P_ADAPTIVE_MAX:
        return pool_planes(R_MAX, s, x, x, y, y, y)
    return pool_planes(R_AVG, s, x, x, y, y, y)


cdef inline int max_pool2d_backward_impl(const floating* x,   # IN  (planes, h, w)
                                         const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window's gradient goes to its argmax; overlapping windows add up.
    return pool_planes(R_MAX_BACKWARD, s, x, x, dx, dy, dx)


cdef inline int max_pool2d_select_impl(const floating* x,  # IN  (planes, h, w)
                                       const floating* h,  # IN  (planes, h, w)
                                       floating* y,        # OUT (planes, oh, ow)
                                       const Pool* s) noexcept nogil:
    # The adjoint of max_pool2d_backward in its gradient argument: read h where it wrote.
    return pool_planes(R_SELECT, s, x, h, y, y, y)


cdef inline int avg_pool2d_backward_impl(const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window spreads dy / divisor over the cells it read; overlapping windows add up.
    return pool_planes(R_AVG_BACKWARD, s, dx, dx, dx, dy, dx)


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int pool2d_f32(const Call* c) noexcept nogil:
    return pool2d_impl(<const float*>c.bufs[0], <float*>c.bufs[1], <const Pool*>c.ints)
cdef int pool2d_f64(const Call* c) noexcept nogil:
    return pool2d_impl(<const double*>c.bufs[0], <double*>c.bufs[1], <const Pool*>c.ints)

cdef int max_pool2d_backward_f32(const Call* c) noexcept nogil:
    return max_pool2d_backward_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                    <float*>c.bufs[2], <const Pool*>c.ints)
cdef int max_pool2d_backward_f64(const Call* c) noexcept nogil:
    return max_pool2d_backward_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                    <double*>c.bufs[2], <const Pool*>c.ints)

cdef int max_pool2d_select_f32(const Call* c) noexcept nogil:
    return max_pool2d_select_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                  <float*>c.bufs[2], <const Pool*>c.ints)
cdef int max_pool2d_select_f64(const Call* c) noexcept nogil:
    return max_pool2d_select_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                  <double*>c.bufs[2], <const Pool*>c.ints)

cdef int avg_pool2d_backward_f32(const Call* c) noexcept nogil:
    return avg_pool2d_backward_impl(<const float*>c.bufs[0], <float*>c.bufs[1],
                                    <const Pool*>c.ints)
cdef int avg_pool2d_backward_f64(const Call* c) noexcept nogil:
    return avg_pool2d_backward_impl(<const double*>c.bufs[0], <double*>c.bufs[1],
                                    <const Pool*>c.ints)

include "pool_int.pxi"

KERNELS = {
    "pool2d_i8": kernel_address(pool2d_i8), "pool2d_u8": kernel_address(pool2d_u8),
    "pool2d_f32": kernel_address(pool2d_f32), "pool2d_f64": kernel_address(pool2d_f64),
    "max_pool2d_backward_f32": kernel_address(max_pool2d_backward_f32),
    "max_pool2d_backward_f64": kernel_address(max_pool2d_backward_f64),
    "max_pool2d_select_f32": kernel_address(max_pool2d_select_f32),
    "max_pool2d_select_f64": kernel_address(max_pool2d_select_f64),
    "avg_pool2d_backward_f32": kernel_address(avg_pool2d_backward_f32),
    "avg_pool2d_backward_f64": kernel_address(avg_pool2d_backward_f64),
}
