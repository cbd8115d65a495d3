# Elementwise kernels: unary, binary with broadcasting, comparisons, where, cast.
#
# Parameter layout (ints), written by mgegraph._kernels.lowering.elementwise:
#   [opcode, ndim, shape[ndim], strides of input 0 [ndim], strides of input 1 [ndim], ...]
# Strides are in elements and 0 on broadcast dimensions, so broadcast inputs are never
# materialised. The output is contiguous with the given shape. floats: a unary op's parameters
# (leaky_relu's slope, clip's bounds), in the order of the table's ``params``.
#
# Design: what each op computes is not written here. The op codes, the scalar function of every
# op and the loops that apply one op over a row come from ew_ops.pxd, which setup.py generates
# from mgegraph/ops/elementwise_table.py; the fused kernel and the GEMM epilogues use the same
# functions, so every path gives bitwise the same results. This module walks the rows.

from libc.stdint cimport int32_t, int64_t, uint8_t

from .dtypes cimport any_t, num_t
from .abi cimport Call, KERNEL_OK, KERNEL_NEGATIVE_POWER, KERNEL_UNSUPPORTED, kernel_address
from .nditer cimport dims_ok, Odometer, odometer_init, odometer_next, count_rows
from .scalar cimport float_to_i32, float_to_i64
from .ew_ops cimport (EW_POW, EW_FIRST_BINARY, EW_FIRST_COMPARE, EW_COUNT, ew_opcodes, ew_n_params,
                      ew_unary_run, ew_binary_run, ew_compare_run)

# a second fused type over every dtype, so cast can vary source and destination independently
ctypedef fused dst_t:
    float
    double
    int32_t
    int64_t
    uint8_t

OPCODES = ew_opcodes()  # op name -> code, as the table orders them (the lowering checks)


# -- loops --------------------------------------------------------------------------------------
cdef inline int unary_impl(const num_t* x, num_t* y, const Call* c) noexcept nogil:
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    cdef int op = <int>c.ints[0], ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t s = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t rows = count_rows(ndim, shape), r
    cdef num_t p = 0, q = 0
    cdef Odometer o
    if op < 0 or op >= EW_FIRST_BINARY:
        return KERNEL_UNSUPPORTED
    if ew_n_params(op) > 0:  # in the data's dtype, as the fused kernel takes them
        p = <num_t>c.floats[0]
    if ew_n_params(op) > 1:
        q = <num_t>c.floats[1]
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 1)
    for r in range(rows):
        if not ew_unary_run(op, y, x + o.offset[0], s, p, q, inner):
            return KERNEL_UNSUPPORTED
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int binary_impl(const num_t* x, const num_t* z, num_t* y, const Call* c) noexcept nogil:
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    cdef int op = <int>c.ints[0], ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sx = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    cdef bint int_pow = op == EW_POW and not (num_t is float or num_t is double)
    if op < EW_FIRST_BINARY or op >= EW_FIRST_COMPARE:
        return KERNEL_UNSUPPORTED
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        if int_pow:  # integers to negative integer powers: an error, as in NumPy
            for i in range(inner):
                if z[o.offset[1] + i * sz] < 0:
                    return KERNEL_NEGATIVE_POWER
        if not ew_binary_run(op, y, x + o.offset[0], sx, z + o.offset[1], sz, inner):
            return KERNEL_UNSUPPORTED
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int compare_impl(const any_t* x, const any_t* z, uint8_t* y, const Call* c) noexcept nogil:
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    cdef int op = <int>c.ints[0], ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sx = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r
    cdef Odometer o
    if op < EW_FIRST_COMPARE or op >= EW_COUNT:
        return KERNEL_UNSUPPORTED
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 2)
    for r in range(rows):
        ew_compare_run(op, y, x + o.offset[0], sx, z + o.offset[1], sz, inner)
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline int where_impl(const uint8_t* cond, const any_t* x, const any_t* z, any_t* y,
                           const Call* c) noexcept nogil:
    # ints: [unused opcode, ndim, shape, strides cond, strides x, strides z]
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t sc = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sx = c.ints[2 + 3 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t sz = c.ints[2 + 4 * ndim - 1] if ndim > 0 else 0
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    cdef const uint8_t* pc
    cdef const any_t* px
    cdef const any_t* pz
    cdef any_t a, b
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 3)
    for r in range(rows):
        pc, px, pz = cond + o.offset[0], x + o.offset[1], z + o.offset[2]
        if sc == 1 and sx == 1 and sz == 1:
            # both branches loaded unconditionally: a select the compiler can vectorise
            for i in range(inner):
                a, b = px[i], pz[i]
                y[i] = a if pc[i] else b
            y += inner
            odometer_next(&o)
            continue
        if sc == 1 and sx == 1 and sz == 0:
            b = pz[0]
            for i in range(inner):
                a = px[i]
                y[i] = a if pc[i] else b
            y += inner
            odometer_next(&o)
            continue
        for i in range(inner):
            if cond[o.offset[0] + i * sc]:
                y[i] = x[o.offset[1] + i * sx]
            else:
                y[i] = z[o.offset[2] + i * sz]
        y += inner
        odometer_next(&o)
    return KERNEL_OK


cdef inline void cast_rows(const any_t* x, dst_t* y, const Call* c) noexcept nogil:
    cdef int ndim = <int>c.ints[1]
    cdef const Py_ssize_t* shape = c.ints + 2
    cdef Py_ssize_t inner = shape[ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t s = c.ints[2 + 2 * ndim - 1] if ndim > 0 else 1
    cdef Py_ssize_t rows = count_rows(ndim, shape), r, i
    cdef Odometer o
    odometer_init(&o, ndim, shape, c.ints + 2 + ndim, 1)
    for r in range(rows):
        for i in range(inner):
            if dst_t is uint8_t:
                y[i] = x[o.offset[0] + i * s] != 0
            elif (any_t is float or any_t is double) and dst_t is int32_t:
                y[i] = float_to_i32(x[o.offset[0] + i * s])  # NaN, inf, out of range: INT_MIN
            elif (any_t is float or any_t is double) and dst_t is int64_t:
                y[i] = float_to_i64(x[o.offset[0] + i * s])
            else:
                y[i] = <dst_t>x[o.offset[0] + i * s]
        y += inner
        odometer_next(&o)


cdef inline int cast_impl(const any_t* x, char* y, const Call* c) noexcept nogil:
    # ints[0] is the destination dtype code (mgegraph.ir.types.SUPPORTED)
    cdef int dst = <int>c.ints[0]
    if not dims_ok(c.ints[1], 0):
        return KERNEL_UNSUPPORTED
    if dst == 0:
        cast_rows(x, <float*>y, c)
    elif dst == 1:
        cast_rows(x, <double*>y, c)
    elif dst == 2:
        cast_rows(x, <int32_t*>y, c)
    elif dst == 3:
        cast_rows(x, <int64_t*>y, c)
    elif dst == 4:
        cast_rows(x, <uint8_t*>y, c)
    else:
        return KERNEL_UNSUPPORTED
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int unary_f32(const Call* c) noexcept nogil:
    return unary_impl(<const float*>c.bufs[0], <float*>c.bufs[1], c)
cdef int unary_f64(const Call* c) noexcept nogil:
    return unary_impl(<const double*>c.bufs[0], <double*>c.bufs[1], c)
cdef int unary_i32(const Call* c) noexcept nogil:
    return unary_impl(<const int32_t*>c.bufs[0], <int32_t*>c.bufs[1], c)
cdef int unary_i64(const Call* c) noexcept nogil:
    return unary_impl(<const int64_t*>c.bufs[0], <int64_t*>c.bufs[1], c)

cdef int binary_f32(const Call* c) noexcept nogil:
    return binary_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <float*>c.bufs[2], c)
cdef int binary_f64(const Call* c) noexcept nogil:
    return binary_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <double*>c.bufs[2], c)
cdef int binary_i32(const Call* c) noexcept nogil:
    return binary_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1], <int32_t*>c.bufs[2], c)
cdef int binary_i64(const Call* c) noexcept nogil:
    return binary_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1], <int64_t*>c.bufs[2], c)

cdef int compare_f32(const Call* c) noexcept nogil:
    return compare_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_f64(const Call* c) noexcept nogil:
    return compare_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_i32(const Call* c) noexcept nogil:
    return compare_impl(<const int32_t*>c.bufs[0], <const int32_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_i64(const Call* c) noexcept nogil:
    return compare_impl(<const int64_t*>c.bufs[0], <const int64_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)
cdef int compare_bool(const Call* c) noexcept nogil:
    return compare_impl(<const uint8_t*>c.bufs[0], <const uint8_t*>c.bufs[1], <uint8_t*>c.bufs[2], c)

cdef int where_f32(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const float*>c.bufs[1], <const float*>c.bufs[2],
                      <float*>c.bufs[3], c)
cdef int where_f64(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const double*>c.bufs[1],
                      <const double*>c.bufs[2], <double*>c.bufs[3], c)
cdef int where_i32(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const int32_t*>c.bufs[1],
                      <const int32_t*>c.bufs[2], <int32_t*>c.bufs[3], c)
cdef int where_i64(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const int64_t*>c.bufs[1],
                      <const int64_t*>c.bufs[2], <int64_t*>c.bufs[3], c)
cdef int where_bool(const Call* c) noexcept nogil:
    return where_impl(<const uint8_t*>c.bufs[0], <const uint8_t*>c.bufs[1],
                      <const uint8_t*>c.bufs[2], <uint8_t*>c.bufs[3], c)

cdef int cast_f32(const Call* c) noexcept nogil:
    return cast_impl(<const float*>c.bufs[0], c.bufs[1], c)
cdef int cast_f64(const Call* c) noexcept nogil:
    return cast_impl(<const double*>c.bufs[0], c.bufs[1], c)
cdef int cast_i32(const Call* c) noexcept nogil:
    return cast_impl(<const int32_t*>c.bufs[0], c.bufs[1], c)
cdef int cast_i64(const Call* c) noexcept nogil:
    return cast_impl(<const int64_t*>c.bufs[0], c.bufs[1], c)
cdef int cast_bool(const Call* c) noexcept nogil:
    return cast_impl(<const uint8_t*>c.bufs[0], c.bufs[1], c)

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
}
