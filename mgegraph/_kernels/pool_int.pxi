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
# Each output row's interior windows go through pool_int.h's vectorised row passes (AVX-512BW,
# AVX2 or portable C: the same integers), the rest (border, adaptive and over-large windows,
# rows of fewer than PI_MIN_WINDOWS) through the per-window loop here, where a window of whole
# rows (a global pool's plane) of at least PI_B cells is one contiguous run. The variant is the widest this CPU runs, or the one MGEGRAPH_INT8_ISA's
# int8 variant implies; set_int8_pool_isa changes it ("scalar": the per-window loop alone).
# Adaptive windows that divide the input are sliding ones (as_sliding). Threads take
# contiguous runs of planes.
import os

from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t

cdef extern from "pool_int.h":
    int PI_SCALAR, PI_ISAS, PI_MAX_CELLS, PI_MIN_WINDOWS, PI_B
    Py_ssize_t pi_chunk(Py_ssize_t kw, Py_ssize_t sw, Py_ssize_t dw) noexcept nogil
    const char* pi_isa_names[]
    int pi_isa_ok(int isa) noexcept nogil
    int pi_widest() noexcept nogil
    ctypedef struct pi_row:
        const uint8_t* x
        Py_ssize_t step, rows, kw, sw, dw, n, readable
        int32_t div, offset
        uint8_t flip
        uint8_t* y
    ctypedef struct pi_variant:
        void (*row)(const pi_row* a) noexcept nogil
        uint8_t (*run_max)(const uint8_t* x, Py_ssize_t n, uint8_t flip) noexcept nogil
        int64_t (*run_sum)(const uint8_t* x, Py_ssize_t n, uint8_t flip) noexcept nogil
    pi_variant pi_variant_of(int isa) noexcept nogil

ctypedef fused small_int:
    int8_t
    uint8_t


INT8_POOL_ISAS = tuple(pi_isa_names[i].decode() for i in range(PI_ISAS))
# the pooling variant each of the int8 GEMM's variants (MGEGRAPH_INT8_ISA) implies
_FROM_GEMM_ISA = {"portable": "portable", "avx2": "avx2", "avxvnni": "avx2",
                  "avx512vnni": "avx512"}
cdef int _int_pool_isa = pi_widest()


def int8_pool_isas() -> tuple:
    """The int8 pooling variants this CPU runs, narrowest first.

    >>> int8_pool_isas()[:2]
    ('scalar', 'portable')
    """
    return tuple(name for i, name in enumerate(INT8_POOL_ISAS) if pi_isa_ok(i))


def set_int8_pool_isa(name=None) -> str:
    """Makes int8 pooling use variant ``name`` (None: the widest this CPU runs); returns the one
    used before. Every variant gives the same integers: this is for tests and benchmarks."""
    global _int_pool_isa
    before = INT8_POOL_ISAS[_int_pool_isa]
    if name is None:
        _int_pool_isa = pi_widest()
        return before
    if name not in INT8_POOL_ISAS:
        raise ValueError(f"unknown int8 pooling variant {name!r}; one of {INT8_POOL_ISAS}")
    if not pi_isa_ok(INT8_POOL_ISAS.index(name)):
        raise ValueError(f"this CPU does not run the {name} int8 pooling variant; it runs "
                         f"{int8_pool_isas()}")
    _int_pool_isa = INT8_POOL_ISAS.index(name)
    return before


if os.environ.get("MGEGRAPH_INT8_ISA") in _FROM_GEMM_ISA:  # qgemm.pyx refuses other names
    set_int8_pool_isa(_FROM_GEMM_ISA[os.environ["MGEGRAPH_INT8_ISA"]])


ctypedef struct IntPoolRun:
    Pool s
    const void* x
    void* y
    Py_ssize_t size     # of x, in values
    int64_t zero_point
    bint rows           # whether the variant has row passes (not "scalar")
    pi_variant var
    Py_ssize_t lo, hi   # the output columns the row passes pool (vector_columns)


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


cdef inline uint8_t flip_of(small_int* tag) noexcept nogil:
    # pool_int.h's sign flip: int8 taken as uint8 plus 128
    return 0x80 if small_int is int8_t else 0


cdef inline small_int int_cell(const IntPoolRun* r, const small_int* x, Span rows,
                               Py_ssize_t ow) noexcept nogil:
    # One clamped window. Whole rows of the plane (a global pool) are one contiguous run, reduced
    # in vectors where it fills at least one block (a 7x7 plane is quicker cell by cell).
    cdef const Pool* s = &r.s
    cdef Span cols = window(s, False, ow)
    cdef Py_ssize_t div, cells = rows.n * cols.n
    cdef const small_int* at = x + rows.lo * s.w + cols.lo
    cdef bint run = r.rows and cols.n == s.w and (s.dh == 1 or rows.n == 1) and cells >= PI_B
    cdef uint8_t flip = flip_of(<small_int*>NULL)
    cdef int64_t total
    if s.mode == P_MAX or s.mode == P_ADAPTIVE_MAX:
        if run:
            return <small_int>r.var.run_max(<const uint8_t*>at, cells, flip)
        return int_window_max(at, s.dh * s.w, s.dw, rows.n, cols.n)
    div = divisor(s, rows, cols)
    if run:  # the flipped values' sum, less the flip's 128 per cell
        total = r.var.run_sum(<const uint8_t*>at, cells, flip) - (flip != 0) * 128 * cells
    else:
        total = int_window_sum(at, s.dh * s.w, s.dw, rows.n, cols.n)
    total += r.zero_point * (div - cells)  # the counted padding's cells
    return <small_int>rounded_quotient(total, div)


cdef inline void vector_columns(const IntPoolRun* r, Py_ssize_t* lo,
                                Py_ssize_t* hi) noexcept nogil:
    # The output columns [lo, hi) whose windows lie inside the input and pool_int.h's limits
    # take; none for the scalar variant and adaptive windows (they vary in width).
    cdef const Pool* s = &r.s
    cdef Py_ssize_t last = s.w - 1 + s.pw - (s.kw - 1) * s.dw  # the last inside start, + pw
    cdef bint avg = s.mode == P_AVG_INCLUDE or s.mode == P_AVG_EXCLUDE
    lo[0] = hi[0] = 0
    if (not r.rows or is_adaptive(s) or last < 0 or pi_chunk(s.kw, s.sw, s.dw) == 0
            or (avg and s.kh * s.kw > PI_MAX_CELLS)):
        return
    lo[0] = clamp(ceil_div(s.pw, s.sw), 0, s.ow)
    hi[0] = clamp(last // s.sw + 1, lo[0], s.ow)
    if hi[0] - lo[0] < PI_MIN_WINDOWS:
        hi[0] = lo[0]


cdef inline void int_pool_plane(const IntPoolRun* r, const small_int* x,
                                small_int* y) noexcept nogil:
    cdef const Pool* s = &r.s
    cdef bint is_max = s.mode == P_MAX
    cdef uint8_t flip = flip_of(<small_int*>NULL)
    cdef Py_ssize_t oh, ow, lo = r.lo, hi = r.hi
    cdef Span rows, full  # full: an interior window's columns
    cdef pi_row a
    full.lo, full.n, full.padded = 0, s.kw, s.kw
    a.step, a.kw, a.sw, a.dw, a.n, a.flip = s.dh * s.w, s.kw, s.sw, s.dw, hi - lo, flip
    for oh in range(s.oh):
        rows = window(s, True, oh)
        if hi > lo:
            a.x = <const uint8_t*>(x + rows.lo * s.w + lo * s.sw - s.pw)
            a.readable = <const uint8_t*>r.x + r.size - a.x
            a.rows, a.y = rows.n, <uint8_t*>(y + lo)
            a.div = 0 if is_max else <int32_t>divisor(s, rows, full)
            # the counted padding in the flipped values: the zero point plus 128 for int8
            a.offset = 0 if is_max else <int32_t>(
                (r.zero_point + (flip != 0) * 128) * (a.div - rows.n * s.kw))
            r.var.row(&a)
        for ow in range(lo):
            y[ow] = int_cell(r, x, rows, ow)
        for ow in range(hi, s.ow):
            y[ow] = int_cell(r, x, rows, ow)
        y += s.ow


cdef inline int int_planes_part(const IntPoolRun* r, Py_ssize_t lo, Py_ssize_t hi,
                                small_int* tag) noexcept nogil:
    # planes [lo, hi) of r (tag, always NULL, picks the dtype)
    cdef const Pool* s = &r.s
    cdef Py_ssize_t p, full = s.h * s.w, pooled = s.oh * s.ow
    for p in range(lo, hi):
        int_pool_plane(r, <const small_int*>r.x + p * full, <small_int*>r.y + p * pooled)
    return KERNEL_OK


cdef int int_planes_i8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return int_planes_part(<const IntPoolRun*>ctx, lo, hi, <int8_t*>NULL)
cdef int int_planes_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return int_planes_part(<const IntPoolRun*>ctx, lo, hi, <uint8_t*>NULL)


cdef inline int int_pool2d(const Call* c, part_fn planes) noexcept nogil:
    cdef IntPoolRun r
    r.s = (<const Pool*>c.ints)[0]
    as_sliding(&r.s)
    r.x, r.y, r.zero_point = c.bufs[0], c.bufs[1], <int64_t>c.floats[0]
    r.size = r.s.planes * r.s.h * r.s.w
    r.rows = _int_pool_isa != PI_SCALAR
    r.var = pi_variant_of(_int_pool_isa)
    vector_columns(&r, &r.lo, &r.hi)
    return parallel_for(r.s.threads, r.s.planes, planes, &r)


cdef int pool2d_i8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_i8)
cdef int pool2d_u8(const Call* c) noexcept nogil:
    return int_pool2d(c, int_planes_u8)
