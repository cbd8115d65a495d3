# RMS norm (mgegraph/ops/sequence.py): y = x / sqrt(mean(x^2) + eps) * weight over each row.
#
# Parameter layout: the ints are the RmsNorm struct below, whose field names this module exports
# (RMS_NORM_FIELDS) for the lowering, mgegraph/_kernels/lowering/rms_norm.py, to pack by name;
# the floats are [eps]. Buffers: x, weight, then y. The gradient is a composition of other ops
# (ops/sequence.py), so there is no backward kernel.
#
# Design: layer norm's without the mean. The units of work are the rows; threads
# (parallel.pyx) take contiguous ranges of them, so every output is computed as on one thread.
# A row's sum of squares is one pass with double accumulators in LANES independent lanes
# (lane_sums.pxd, shared with the other norms); each output is x * rstd * weight in x's dtype,
# rstd rounded to it once, never contracted (csrc_cuda/rms_norm.cu computes the same roundings).
# Safe in place: a row is read whole before any of its outputs is written.

from libc.math cimport sqrt
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .lane_sums cimport run_sum
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct RmsNorm:            # x (rows, cols), weight (cols,)
    Py_ssize_t rows, cols, threads

cdef RmsNorm _rn
RMS_NORM_FIELDS = fields_of(_rn, sizeof(RmsNorm))


cdef inline int rows_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                          floating* tag) noexcept nogil:
    cdef const RmsNorm* s = <const RmsNorm*>c.ints
    cdef Py_ssize_t n = s.cols, row, j
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef const floating* w = <const floating*>c.bufs[1]
    cdef floating* y = <floating*>c.bufs[2]
    cdef const floating* px
    cdef floating* py
    cdef floating rstd
    for row in range(lo, hi):
        px, py = x + row * n, y + row * n
        rstd = <floating>(1 / sqrt(run_sum(px, n, 0, True) / n + c.floats[0]))
        for j in range(n):
            py[j] = px[j] * rstd * w[j]
    return KERNEL_OK


cdef int part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return rows_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return rows_part(<const Call*>c, lo, hi, <double*>NULL)


cdef int rms_norm_f32(const Call* c) noexcept nogil:
    cdef const RmsNorm* s = <const RmsNorm*>c.ints
    return parallel_for(s.threads, s.rows, part_f32, <void*>c)
cdef int rms_norm_f64(const Call* c) noexcept nogil:
    cdef const RmsNorm* s = <const RmsNorm*>c.ints
    return parallel_for(s.threads, s.rows, part_f64, <void*>c)

KERNELS = {
    "rms_norm_f32": kernel_address(rms_norm_f32),
    "rms_norm_f64": kernel_address(rms_norm_f64),
}
