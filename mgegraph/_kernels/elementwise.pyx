# Elementwise kernels: unary, binary with broadcasting, comparisons, where, cast.
#
# Parameter layout (ints), written by mgegraph._kernels.lowering.elementwise:
#   [opcode, ndim, shape[ndim], strides of input 0 [ndim], strides of input 1 [ndim], ..., threads]
# Strides are in elements and 0 on broadcast dimensions, so broadcast inputs are never
# materialised. The output is contiguous with the given shape. Last, the threads the lowering
# planned (parallel.threads_for; after the layout that the CUDA kernels read from the front).
# floats: a unary op's parameters (leaky_relu's slope, clip's bounds), in the table's order.
#
# Design: what each op computes is not written here. The op codes, the scalar function of every
# op and the loops that apply one op over a row come from ew_ops.pxd, which setup.py generates
# from mgegraph/ops/elementwise_table.py; the fused kernel and the GEMM epilogues use the same
# functions, so every path gives bitwise the same results. This module walks the rows: a thread
# takes a contiguous range of output elements (parallel.pyx), which changes no result.

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t
from libc.string cimport memcpy

from .dtypes cimport ew_num_t
from .abi cimport Call, KERNEL_OK, KERNEL_NEGATIVE_POWER, KERNEL_UNSUPPORTED, kernel_address
from .nditer cimport dims_ok, Odometer, odometer_init, odometer_next, odometer_seek, count_rows
from .parallel cimport parallel_for, part_fn
from .scalar cimport float_to_i32, float_to_i64
from .ew_ops cimport (EW_POW, EW_FIRST_BINARY, EW_FIRST_COMPARE, EW_COUNT, ew_opcodes, ew_n_params,
                      ew_unary_run, ew_binary_run, ew_compare_run)

cdef extern from "half.h" nogil:
    float mg_f16_to_float(uint16_t h)
    float mg_bf16_to_float(uint16_t h)
    uint16_t mg_double_to_f16(double d)
    uint16_t mg_double_to_bf16(double d)

# a second fused type over every dtype, so cast can vary source and destination independently;
# uint16_t holds either half type (the cast's mode says which)
ctypedef fused dst_t:
    float
    double
    int32_t
    int64_t
    uint8_t
    int8_t
    int16_t
    uint16_t

OPCODES = ew_opcodes()  # op name -> code, as the table orders them (the lowering checks)


# -- one thread's part: elements [lo, hi) of the output, in C order --------------------------------
ctypedef struct Span:
    # the rows of a part; a run is the piece of one row inside it, read from o.offset + col * s
    Odometer o
    Py_ssize_t at, end, col, inner


cdef inline void span_init(Span* sp, const Call* c, int nops, Py_ssize_t lo,
                           Py_ssize_t hi) noexcept nogil:
    cdef int ndim = <int>c.ints[1]
    sp.inner = c.ints[2 + ndim - 1] if ndim > 0 else 1
    sp.at, sp.end, sp.col = lo, hi, 0
    odometer_init(&sp.o, ndim, c.ints + 2, c.ints + 2 + ndim, nops)
    if lo < hi:  # (inner > 0 then)
        odometer_seek(&sp.o, lo // sp.inner)
        sp.col = lo % sp.inner


cdef inline Py_ssize_t span_run(const Span* sp) noexcept nogil:
    # elements in the current run, 0 once the part is done
    return min(sp.inner - sp.col, sp.end - sp.at)


cdef inline void span_next(Span* sp, Py_ssize_t n) noexcept nogil:
    sp.at += n
    sp.col = 0
    odometer_next(&sp.o)


cdef inline Py_ssize_t inner_stride(const Call* c, int operand) noexcept nogil:
    # the innermost element stride of input `operand` (0 for a 0-d layout: a scalar)
    cdef int ndim = <int>c.ints[1]
    return c.ints[2 + (operand + 2) * ndim - 1] if ndim > 0 else 0


cdef inline int unary_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                           ew_num_t* tag) noexcept nogil:
    cdef const ew_num_t* x = <const ew_num_t*>c.bufs[0]
    cdef ew_num_t* y = <ew_num_t*>c.bufs[1] + lo
    cdef int op = <int>c.ints[0]
    cdef Py_ssize_t s = inner_stride(c, 0) if c.ints[1] > 0 else 1, n
    cdef ew_num_t p = 0, q = 0
    cdef Span sp
    if op < 0 or op >= EW_FIRST_BINARY:
        return KERNEL_UNSUPPORTED
    if ew_n_params(op) > 0:  # in the data's dtype, as the fused kernel takes them
        p = <ew_num_t>c.floats[0]
    if ew_n_params(op) > 1:
        q = <ew_num_t>c.floats[1]
    span_init(&sp, c, 1, lo, hi)
    n = span_run(&sp)
    while n > 0:
        if not ew_unary_run(op, y, x + sp.o.offset[0] + sp.col * s, s, p, q, n):
            return KERNEL_UNSUPPORTED
        y += n
        span_next(&sp, n)
        n = span_run(&sp)
    return KERNEL_OK


cdef inline int binary_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                            ew_num_t* tag) noexcept nogil:
    cdef const ew_num_t* x = <const ew_num_t*>c.bufs[0]
    cdef const ew_num_t* z = <const ew_num_t*>c.bufs[1]
    cdef ew_num_t* y = <ew_num_t*>c.bufs[2] + lo
    cdef int op = <int>c.ints[0]
    cdef Py_ssize_t sx = inner_stride(c, 0), sz = inner_stride(c, 1), n, i
    cdef const ew_num_t* pz
    cdef bint int_pow = op == EW_POW and not (ew_num_t is float or ew_num_t is double)
    cdef Span sp
    if op < EW_FIRST_BINARY or op >= EW_FIRST_COMPARE:
        return KERNEL_UNSUPPORTED
    span_init(&sp, c, 2, lo, hi)
    n = span_run(&sp)
    while n > 0:
        pz = z + sp.o.offset[1] + sp.col * sz
        if int_pow:  # integers to negative integer powers: an error, as in NumPy
            for i in range(n):
                if pz[i * sz] < 0:
                    return KERNEL_NEGATIVE_POWER
        if not ew_binary_run(op, y, x + sp.o.offset[0] + sp.col * sx, sx, pz, sz, n):
            return KERNEL_UNSUPPORTED
        y += n
        span_next(&sp, n)
        n = span_run(&sp)
    return KERNEL_OK


cdef inline int compare_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                             ew_num_t* tag) noexcept nogil:
    cdef const ew_num_t* x = <const ew_num_t*>c.bufs[0]
    cdef const ew_num_t* z = <const ew_num_t*>c.bufs[1]
    cdef uint8_t* y = <uint8_t*>c.bufs[2] + lo
    cdef int op = <int>c.ints[0]
    cdef Py_ssize_t sx = inner_stride(c, 0), sz = inner_stride(c, 1), n
    cdef Span sp
    if op < EW_FIRST_COMPARE or op >= EW_COUNT:
        return KERNEL_UNSUPPORTED
    span_init(&sp, c, 2, lo, hi)
    n = span_run(&sp)
    while n > 0:
        ew_compare_run(op, y, x + sp.o.offset[0] + sp.col * sx, sx,
                       z + sp.o.offset[1] + sp.col * sz, sz, n)
        y += n
        span_next(&sp, n)
        n = span_run(&sp)
    return KERNEL_OK


cdef inline void where_run(const uint8_t* pc, Py_ssize_t sc, const ew_num_t* px, Py_ssize_t sx,
                           const ew_num_t* pz, Py_ssize_t sz, ew_num_t* y,
                           Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    cdef ew_num_t a, b
    if sc == 1 and sx == 1 and sz == 1:
        # both branches loaded unconditionally: a select the compiler can vectorise
        for i in range(n):
            a, b = px[i], pz[i]
            y[i] = a if pc[i] else b
    elif sc == 1 and sx == 1 and sz == 0:
        b = pz[0]
        for i in range(n):
            a = px[i]
            y[i] = a if pc[i] else b
    else:
        for i in range(n):
            y[i] = px[i * sx] if pc[i * sc] else pz[i * sz]


cdef inline int where_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                           ew_num_t* tag) noexcept nogil:
    # ints: [unused opcode, ndim, shape, strides cond, strides x, strides z, threads]
    cdef const uint8_t* cond = <const uint8_t*>c.bufs[0]
    cdef const ew_num_t* x = <const ew_num_t*>c.bufs[1]
    cdef const ew_num_t* z = <const ew_num_t*>c.bufs[2]
    cdef ew_num_t* y = <ew_num_t*>c.bufs[3] + lo
    cdef Py_ssize_t sc = inner_stride(c, 0), sx = inner_stride(c, 1), sz = inner_stride(c, 2), n
    cdef Span sp
    span_init(&sp, c, 3, lo, hi)
    n = span_run(&sp)
    while n > 0:
        where_run(cond + sp.o.offset[0] + sp.col * sc, sc, x + sp.o.offset[1] + sp.col * sx, sx,
                  z + sp.o.offset[2] + sp.col * sz, sz, y, n)
        y += n
        span_next(&sp, n)
        n = span_run(&sp)
    return KERNEL_OK


# how cast_rows writes a uint8_t or uint16_t destination
cdef enum:
    CAST_PLAIN = 0
    CAST_TO_BOOL = 1   # a uint8_t y is bool (x != 0); else uint8, which keeps the low bits
    CAST_TO_F16 = 2    # a uint16_t y is float16
    CAST_TO_BF16 = 3   # a uint16_t y is bfloat16


cdef inline void put(dst_t* y, ew_num_t v, int mode) noexcept nogil:
    if dst_t is uint8_t and mode == CAST_TO_BOOL:
        y[0] = v != 0
    elif dst_t is uint16_t:
        y[0] = mg_double_to_bf16(<double>v) if mode == CAST_TO_BF16 else mg_double_to_f16(<double>v)
    elif (ew_num_t is float or ew_num_t is double) and dst_t is int32_t:
        y[0] = float_to_i32(v)  # NaN, inf, out of range: INT_MIN
    elif (ew_num_t is float or ew_num_t is double) and dst_t is int64_t:
        y[0] = float_to_i64(v)
    elif (ew_num_t is float or ew_num_t is double) and \
            (dst_t is uint8_t or dst_t is int8_t or dst_t is int16_t):
        # NumPy's on x86: truncated to int32 (INT_MIN for NaN, inf, out of its range), then its
        # low bits (scalar.pxd, float_to_i32)
        y[0] = <dst_t>float_to_i32(v)
    else:
        y[0] = <dst_t>v


# a cast's source: every dtype; uint16_t holds either half type (the part says which)
ctypedef fused src_t:
    float
    double
    int32_t
    int64_t
    uint8_t
    int8_t
    int16_t
    uint16_t


cdef inline void cast_rows(const Call* c, Py_ssize_t lo, Py_ssize_t hi, const src_t* x,
                           bint bf16, dst_t* y, int mode) noexcept nogil:
    # a half source is read into a float exactly, then written as a float would be
    cdef Py_ssize_t s = inner_stride(c, 0) if c.ints[1] > 0 else 1, n, i
    cdef const src_t* px
    cdef Span sp
    span_init(&sp, c, 1, lo, hi)
    y += lo
    n = span_run(&sp)
    while n > 0:
        px = x + sp.o.offset[0] + sp.col * s
        for i in range(n):
            if src_t is uint16_t:
                put(y + i, mg_bf16_to_float(px[i * s]) if bf16 else mg_f16_to_float(px[i * s]),
                    mode)
            else:
                put(y + i, px[i * s], mode)
        y += n
        span_next(&sp, n)
        n = span_run(&sp)


cdef inline int cast_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi, src_t* tag,
                          bint bf16) noexcept nogil:
    # ints[0] is the destination dtype code (mgegraph.ir.types.SUPPORTED); bf16: a uint16_t
    # source is bfloat16, not float16
    cdef int dst = <int>c.ints[0]
    cdef const src_t* x = <const src_t*>c.bufs[0]
    if dst == 0:
        cast_rows(c, lo, hi, x, bf16, <float*>c.bufs[1], CAST_PLAIN)
    elif dst == 1:
        cast_rows(c, lo, hi, x, bf16, <double*>c.bufs[1], CAST_PLAIN)
    elif dst == 2:
        cast_rows(c, lo, hi, x, bf16, <int32_t*>c.bufs[1], CAST_PLAIN)
    elif dst == 3:
        cast_rows(c, lo, hi, x, bf16, <int64_t*>c.bufs[1], CAST_PLAIN)
    elif dst == 4:
        cast_rows(c, lo, hi, x, bf16, <uint8_t*>c.bufs[1], CAST_TO_BOOL)
    elif dst == 5:
        cast_rows(c, lo, hi, x, bf16, <uint8_t*>c.bufs[1], CAST_PLAIN)
    elif dst == 6:
        cast_rows(c, lo, hi, x, bf16, <int8_t*>c.bufs[1], CAST_PLAIN)
    elif dst == 7:
        cast_rows(c, lo, hi, x, bf16, <int16_t*>c.bufs[1], CAST_PLAIN)
    elif dst == 8:
        cast_rows(c, lo, hi, x, bf16, <uint16_t*>c.bufs[1], CAST_TO_F16)
    elif dst == 9:
        cast_rows(c, lo, hi, x, bf16, <uint16_t*>c.bufs[1], CAST_TO_BF16)
    else:
        return KERNEL_UNSUPPORTED
    return KERNEL_OK


# -- the instruction: its parts on the threads the lowering planned -------------------------------
cdef inline int ew_run(const Call* c, int n_inputs, part_fn part) noexcept nogil:
    # ints: [opcode, ndim, shape, strides per input, threads]; checked before any is read
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>c.ints[1]
    cdef Py_ssize_t size = count_rows(ndim, c.ints + 2) * (c.ints[1 + ndim] if ndim > 0 else 1)
    return parallel_for(c.ints[2 + ndim * (1 + n_inputs)], size, part, <void*>c)


# -- entry points: one per (kernel family, dtype), each a part function and the kernel -------
cdef int unary_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int unary_f32(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_f32)
cdef int unary_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int unary_f64(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_f64)
cdef int unary_part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <int32_t*>NULL)
cdef int unary_i32(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_i32)
cdef int unary_part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <int64_t*>NULL)
cdef int unary_i64(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_i64)

cdef int binary_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int binary_f32(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_f32)
cdef int binary_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int binary_f64(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_f64)
cdef int binary_part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <int32_t*>NULL)
cdef int binary_i32(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_i32)
cdef int binary_part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <int64_t*>NULL)
cdef int binary_i64(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_i64)

cdef int compare_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int compare_f32(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_f32)
cdef int compare_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int compare_f64(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_f64)
cdef int compare_part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <int32_t*>NULL)
cdef int compare_i32(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_i32)
cdef int compare_part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <int64_t*>NULL)
cdef int compare_i64(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_i64)
cdef int compare_part_bool(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <uint8_t*>NULL)
cdef int compare_bool(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_bool)

cdef int where_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int where_f32(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_f32)
cdef int where_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int where_f64(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_f64)
cdef int where_part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <int32_t*>NULL)
cdef int where_i32(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_i32)
cdef int where_part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <int64_t*>NULL)
cdef int where_i64(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_i64)
cdef int where_part_bool(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <uint8_t*>NULL)
cdef int where_bool(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_bool)

cdef int cast_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <float*>NULL, False)
cdef int cast_f32(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_f32)
cdef int cast_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <double*>NULL, False)
cdef int cast_f64(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_f64)
cdef int cast_part_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <int32_t*>NULL, False)
cdef int cast_i32(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_i32)
cdef int cast_part_i64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <int64_t*>NULL, False)
cdef int cast_i64(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_i64)
cdef int cast_part_bool(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <uint8_t*>NULL, False)
cdef int cast_bool(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_bool)


# the small integers: uint8 shares bool's compare, where and cast (the source is read alike;
# the destination code says bool or uint8)
cdef int unary_part_u8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <uint8_t*>NULL)
cdef int unary_u8(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_u8)
cdef int unary_part_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <int8_t*>NULL)
cdef int unary_i8(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_i8)
cdef int unary_part_i16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return unary_part(<const Call*>c, lo, hi, <int16_t*>NULL)
cdef int unary_i16(const Call* c) noexcept nogil:
    return ew_run(c, 1, unary_part_i16)
cdef int binary_part_u8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <uint8_t*>NULL)
cdef int binary_u8(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_u8)
cdef int binary_part_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <int8_t*>NULL)
cdef int binary_i8(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_i8)
cdef int binary_part_i16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return binary_part(<const Call*>c, lo, hi, <int16_t*>NULL)
cdef int binary_i16(const Call* c) noexcept nogil:
    return ew_run(c, 2, binary_part_i16)
cdef int compare_part_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <int8_t*>NULL)
cdef int compare_i8(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_i8)
cdef int compare_part_i16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return compare_part(<const Call*>c, lo, hi, <int16_t*>NULL)
cdef int compare_i16(const Call* c) noexcept nogil:
    return ew_run(c, 2, compare_part_i16)
cdef int where_part_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <int8_t*>NULL)
cdef int where_i8(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_i8)
cdef int where_part_i16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return where_part(<const Call*>c, lo, hi, <int16_t*>NULL)
cdef int where_i16(const Call* c) noexcept nogil:
    return ew_run(c, 3, where_part_i16)
cdef int cast_part_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <int8_t*>NULL, False)
cdef int cast_i8(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_i8)
cdef int cast_part_i16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <int16_t*>NULL, False)
cdef int cast_i16(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_i16)

# the half types: casts from them; where moves their bits as int16's does, and assign (the one
# unary op they have, a contiguous copy of the same shape: _lower_assign) copies them
cdef int copy_part_2(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const Call* call = <const Call*>c
    memcpy(call.bufs[1] + 2 * lo, call.bufs[0] + 2 * lo, 2 * (hi - lo))
    return KERNEL_OK
cdef int copy_2(const Call* c) noexcept nogil:
    return ew_run(c, 1, copy_part_2)
cdef int cast_part_f16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <uint16_t*>NULL, False)
cdef int cast_f16(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_f16)
cdef int cast_part_bf16(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return cast_part(<const Call*>c, lo, hi, <uint16_t*>NULL, True)
cdef int cast_bf16(const Call* c) noexcept nogil:
    return ew_run(c, 1, cast_part_bf16)

KERNELS = {
    "unary_f32": kernel_address(unary_f32), "unary_f64": kernel_address(unary_f64),
    "unary_i32": kernel_address(unary_i32), "unary_i64": kernel_address(unary_i64),
    "binary_f32": kernel_address(binary_f32), "binary_f64": kernel_address(binary_f64),
    "binary_i32": kernel_address(binary_i32), "binary_i64": kernel_address(binary_i64),
    "compare_f32": kernel_address(compare_f32), "compare_f64": kernel_address(compare_f64),
    "compare_i32": kernel_address(compare_i32), "compare_i64": kernel_address(compare_i64),
    "compare_bool": kernel_address(compare_bool),
    "where_f32": kernel_address(where_f32), "where_f64": kernel_address(where_f64), "where_i32": kernel_address(where_i32),
    "where_i64": kernel_address(where_i64), "where_bool": kernel_address(where_bool),
    "cast_f32": kernel_address(cast_f32), "cast_f64": kernel_address(cast_f64), "cast_i32": kernel_address(cast_i32),
    "cast_i64": kernel_address(cast_i64), "cast_bool": kernel_address(cast_bool),
    "unary_u8": kernel_address(unary_u8), "unary_i8": kernel_address(unary_i8),
    "unary_i16": kernel_address(unary_i16),
    "binary_u8": kernel_address(binary_u8), "binary_i8": kernel_address(binary_i8),
    "binary_i16": kernel_address(binary_i16),
    "compare_u8": kernel_address(compare_bool), "compare_i8": kernel_address(compare_i8),
    "compare_i16": kernel_address(compare_i16),
    "where_u8": kernel_address(where_bool), "where_i8": kernel_address(where_i8),
    "where_i16": kernel_address(where_i16),
    "cast_u8": kernel_address(cast_bool), "cast_i8": kernel_address(cast_i8),
    "cast_i16": kernel_address(cast_i16),
    "cast_f16": kernel_address(cast_f16), "cast_bf16": kernel_address(cast_bf16),
    "where_f16": kernel_address(where_i16), "where_bf16": kernel_address(where_i16),
    "unary_f16": kernel_address(copy_2), "unary_bf16": kernel_address(copy_2),
}
