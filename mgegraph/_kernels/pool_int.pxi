# Pooling of quantized int8 and uint8 values (included by pool.pyx: its Pool block, windows and
# divisors). pool2d_i8 / pool2d_u8: bufs x, y; floats[0] the zero point (the integer a padded
# cell counted by "average" holds: the real 0).
#
# Design: the forward poolings keep their input's quantization (ops/conv.py), so they work on
# the integers alone. A max is the max of the cells inside the input: padding never wins. An
# average is the window's integer sum (int64, exact for any plane), the counted padding adding
# zero_point each, divided by the divisor and rounded half to even in integer arithmetic: the
# floor quotient q and remainder r (0 <= r < div) are exact, and r compared with div / 2 (as 2r
# with div) decides the rounding, so the result is the exact rint(sum / div) with no float
# step. It lies between the window's least and greatest integer, so it needs no saturation.
# Every window is clamped as pool_cell's are; threads take contiguous runs of planes.
from libc.stdint cimport int8_t, int64_t, uint8_t

ctypedef fused small_int:
    int8_t
    uint8_t


ctypedef struct IntPoolRun:
    Pool s
    const void* x
    void* y
    int64_t zero_point


cdef inline small_int int_window_max(const small_int* x, Py_ssize_t w, Py_ssize_t cs,
                                     Py_ssize_t nr, Py_ssize_t nc) noexcept nogil:
    cdef small_int m = x[0], v
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            v = x[r * w + j * cs]
            m = v if v > m else m
    return m


cdef inline int64_t int_window_sum(const small_int* x, Py_ssize_t w, Py_ssize_t cs,
                                   Py_ssize_t nr, Py_ssize_t nc) noexcept nogil:
    cdef int64_t acc = 0
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            acc += x[r * w + j * cs]
    return acc


cdef inline int64_t rounded_quotient(int64_t total, int64_t div) noexcept nogil:
    # total / div (div > 0) rounded to nearest, ties to even; C's division truncates toward 0,
    # so a negative remainder moves q down one to the floor
    cdef int64_t q = total / div, r = total - q * div
    if r < 0:
        q -= 1
        r += div
    if 2 * r > div or (2 * r == div and (q & 1)):
        q += 1
    return q


cdef inline void int_pool_plane(const Pool* s, const small_int* x, small_int* y,
                                int64_t zero_point) noexcept nogil:
    cdef bint is_max = s.mode == P_MAX or s.mode == P_ADAPTIVE_MAX
    cdef Py_ssize_t oh, ow, at, div
    cdef int64_t total
    cdef Span rows, cols
    for oh in range(s.oh):
        rows = window(s, True, oh)
        for ow in range(s.ow):
            cols = window(s, False, ow)
            at = rows.lo * s.w + cols.lo
            if is_max:
                y[ow] = int_window_max(x + at, s.dh * s.w, s.dw, rows.n, cols.n)
                continue
            div = divisor(s, rows, cols)
            total = int_window_sum(x + at, s.dh * s.w, s.dw, rows.n, cols.n)
            total += zero_point * (div - rows.n * cols.n)  # the counted padding's cells
            y[ow] = <small_int>rounded_quotient(total, div)
        y += s.ow


cdef inline int int_planes_part(const IntPoolRun* r, Py_ssize_t lo, Py_ssize_t hi,
                                small_int* tag) noexcept nogil:
    # planes [lo, hi) of r (tag, always NULL, picks the dtype)
    cdef const Pool* s = &r.s
    cdef Py_ssize_t p, full = s.h * s.w, pooled = s.oh * s.ow
    for p in range(lo, hi):
        int_pool_plane(s, <const small_int*>r.x + p * full, <small_int*>r.y + p * pooled,
                       r.zero_point)
    return KERNEL_OK


cdef int int_planes_i8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return int_planes_part(<const IntPoolRun*>ctx, lo, hi, <int8_t*>NULL)
cdef int int_planes_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return int_planes_part(<const IntPoolRun*>ctx, lo, hi, <uint8_t*>NULL)


cdef inline int int_pool2d(const Call* c, part_fn planes) noexcept nogil:
    cdef IntPoolRun r
    r.s = (<const Pool*>c.ints)[0]
    r.x, r.y, r.zero_point = c.bufs[0], c.bufs[1], <int64_t>c.floats[0]
    return parallel_for(r.s.threads, r.s.planes, planes, &r)


cdef int pool2d_i8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_i8)
cdef int pool2d_u8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_u8)
