# Reductions over any set of axes: sum, prod, mean, var, max, min, argmax, argmin.
#
# Parameter layout (ints): the Reduce struct below, whose field names this module exports as
# REDUCE_FIELDS (the lowering, mgegraph/_kernels/lowering/reduce.py, packs them by name), then
#   kept shape[kept_ndim], kept strides[kept_ndim], ndr, reduced shape[ndr], reduced strides[ndr],
#   threads (what the lowering planned, parallel.threads_for; last, so the CUDA kernels that
#   read this layout from the front are unchanged)
#
# The bodies of every dtype live in reduce.h (its Design: the walk over kept and reduced dims,
# columns or rows, NumPy's pairwise sums, the units the threads split), which the C runtime
# (mgegraph/deploy) compiles too, so both give the same bits; this module binds them to the
# executor's calling convention and threads. Results are bitwise the same at any thread count.

from libc.stdint cimport int64_t

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

cdef extern from "reduce.h" nogil:
    enum:
        MG_R_SUM, MG_R_PROD, MG_R_MEAN, MG_R_VAR, MG_R_MAX, MG_R_MIN, MG_R_ARGMAX, MG_R_ARGMIN
    enum:
        MG_REDUCE_F32, MG_REDUCE_F64, MG_REDUCE_I32, MG_REDUCE_I64, MG_REDUCE_U8
    ctypedef struct mg_reduce_run:
        int64_t units, threads
    int mg_reduce_setup(mg_reduce_run* r, const int64_t* ints, const void* x, char* y, int dtype)
    void mg_reduce_part(const mg_reduce_run* r, int64_t lo, int64_t hi)

REDUCE_OPS = {"sum": MG_R_SUM, "prod": MG_R_PROD, "mean": MG_R_MEAN, "var": MG_R_VAR,
              "max": MG_R_MAX, "min": MG_R_MIN, "argmax": MG_R_ARGMAX, "argmin": MG_R_ARGMIN}

ctypedef struct Reduce:  # then the kept and reduced groups (the layout above)
    Py_ssize_t op, kept_ndim  # op: reduce.h's MG_R_ codes

cdef Reduce _reduce
REDUCE_FIELDS = fields_of(_reduce, sizeof(Reduce))


cdef int reduce_part(void* r, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    mg_reduce_part(<const mg_reduce_run*>r, lo, hi)
    return KERNEL_OK


cdef int reduce_impl(const Call* c, int dtype) noexcept nogil:
    cdef mg_reduce_run r
    cdef int status = mg_reduce_setup(&r, <const int64_t*>c.ints, c.bufs[0], c.bufs[1], dtype)
    if status != KERNEL_OK or r.units == 0:
        return status
    return parallel_for(r.threads, r.units, reduce_part, &r)


# -- entry points ---------------------------------------------------------------------------------
cdef int reduce_f32(const Call* c) noexcept nogil:
    return reduce_impl(c, MG_REDUCE_F32)
cdef int reduce_f64(const Call* c) noexcept nogil:
    return reduce_impl(c, MG_REDUCE_F64)
cdef int reduce_i32(const Call* c) noexcept nogil:
    return reduce_impl(c, MG_REDUCE_I32)
cdef int reduce_i64(const Call* c) noexcept nogil:
    return reduce_impl(c, MG_REDUCE_I64)
cdef int reduce_bool(const Call* c) noexcept nogil:
    return reduce_impl(c, MG_REDUCE_U8)

KERNELS = {
    "reduce_f32": kernel_address(reduce_f32), "reduce_f64": kernel_address(reduce_f64),
    "reduce_i32": kernel_address(reduce_i32), "reduce_i64": kernel_address(reduce_i64),
    "reduce_bool": kernel_address(reduce_bool),
    # uint8 is read as bool is (uint8_t): sums in uint64, max/min/argmax by value
    "reduce_u8": kernel_address(reduce_bool),
}
