# 2-D pooling over NCHW tensors (max, average, adaptive) and the passes its gradients use: the
# bindings of pool.h (float32 and float64) and pool_int.h (int8 and uint8), the headers the C
# runtime's pooling kernels include too (one source, the same bits; their notes say how each
# pass walks its windows). This module reads the parameter block and splits the planes among the
# threads the lowering planned (parallel_for); csrc_cuda/pool.cu is the CUDA twin.
#
# Parameter layout (ints): the Pool struct below, whose field names this module exports as
# POOL_FIELDS (the lowering, mgegraph/_kernels/lowering/pool.py, packs them by name; a struct of
# Py_ssize_t fields has no padding, so it overlays the int array and pool.h's pool_block):
#   pool2d:                 bufs: x, y (int8 and uint8: pool_int.pxi, floats[0] the zero point)
#   max_pool2d_backward:    bufs: x, dy, dx
#   avg_pool2d_backward:    bufs: dy, dx
#   max_pool2d_select:      bufs: x, h, y (y = h at the argmax of each window of x)
# ``mode`` is one of POOL_MODES; the planes are the N * C images of the input; ``threads`` the
# threads the lowering planned (parallel.threads_for), split over planes.

from libc.stdint cimport int64_t

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for, part_fn

ctypedef struct Pool:
    # ph, pw: padding before the image, eh, ew: after it; dh, dw: dilation
    Py_ssize_t mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, eh, ew, threads

cdef extern from "pool.h" nogil:
    ctypedef struct pool_block:
        pass
    int POOL_MAX, POOL_AVG_INCLUDE, POOL_AVG_EXCLUDE, POOL_ADAPTIVE_MAX, POOL_ADAPTIVE_AVG
    int POOL_R_MAX, POOL_R_AVG, POOL_R_MAX_BACKWARD, POOL_R_SELECT, POOL_R_AVG_BACKWARD
    ctypedef struct pool_run:
        pass
    ctypedef void (*pool_part_fn)(void* ctx, int64_t lo, int64_t hi) noexcept nogil
    pool_run pool_run_of(int op, const pool_block* s, const void* x, const void* h, void* dx,
                         const void* pin, void* pout)

# the parts of each pass: the averages built for the baseline and AVX2 (the build for each run
# is picked per call), the max and the gradients for the baseline (pool.h's POOL_PARTS says why)
cdef extern from *:
    """
    POOL_BASE_PART(pool_max_f32_part, pool_max_f32)
    POOL_BASE_PART(pool_max_f64_part, pool_max_f64)
    POOL_PARTS(pool_avg_f32_part, pool_avg_f32)
    POOL_PARTS(pool_avg_f64_part, pool_avg_f64)
    POOL_BASE_PART(pool_backward_f32_part, pool_backward_f32)
    POOL_BASE_PART(pool_backward_f64_part, pool_backward_f64)
    """
    pool_part_fn pool_max_f32_part(const pool_run* r) noexcept nogil
    pool_part_fn pool_max_f64_part(const pool_run* r) noexcept nogil
    pool_part_fn pool_avg_f32_part(const pool_run* r) noexcept nogil
    pool_part_fn pool_avg_f64_part(const pool_run* r) noexcept nogil
    pool_part_fn pool_backward_f32_part(const pool_run* r) noexcept nogil
    pool_part_fn pool_backward_f64_part(const pool_run* r) noexcept nogil

POOL_MODES = {"max": POOL_MAX, "average": POOL_AVG_INCLUDE,
              "average_count_exclude_padding": POOL_AVG_EXCLUDE,
              "adaptive_max": POOL_ADAPTIVE_MAX, "adaptive_average": POOL_ADAPTIVE_AVG}

cdef Pool _pool
POOL_FIELDS = fields_of(_pool, sizeof(Pool))

ctypedef pool_part_fn (*part_picker)(const pool_run* r) noexcept nogil


ctypedef struct PoolCall:
    pool_run run
    pool_part_fn part   # the build for run (pool.h's POOL_PARTS)


cdef int planes_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef PoolCall* c = <PoolCall*>ctx
    c.part(&c.run, lo, hi)
    return KERNEL_OK


cdef int pool_planes(const Call* c, int op, part_picker pick, const void* x, const void* h,
                     void* dx, const void* pin, void* pout) noexcept nogil:
    cdef const Pool* s = <const Pool*>c.ints
    cdef PoolCall r
    r.run = pool_run_of(op, <const pool_block*>s, x, h, dx, pin, pout)
    r.part = pick(&r.run)
    return parallel_for(s.threads, s.planes, planes_part, &r)


cdef inline bint is_max_mode(const Call* c) noexcept nogil:
    cdef Py_ssize_t mode = (<const Pool*>c.ints).mode
    return mode == POOL_MAX or mode == POOL_ADAPTIVE_MAX


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
# pool2d: bufs x, y; max_pool2d_backward: x, dy, dx; max_pool2d_select: x, h, y;
# avg_pool2d_backward: dy, dx (the pass's unused pointers are used ones of the same layout)
cdef int pool2d_float(const Call* c, part_picker max_part, part_picker avg_part) noexcept nogil:
    if is_max_mode(c):
        return pool_planes(c, POOL_R_MAX, max_part, c.bufs[0], c.bufs[0], c.bufs[1], c.bufs[1],
                           c.bufs[1])
    return pool_planes(c, POOL_R_AVG, avg_part, c.bufs[0], c.bufs[0], c.bufs[1], c.bufs[1],
                       c.bufs[1])


cdef int max_backward(const Call* c, part_picker part) noexcept nogil:
    # each window's gradient goes to its argmax; overlapping windows add up
    return pool_planes(c, POOL_R_MAX_BACKWARD, part, c.bufs[0], c.bufs[0], c.bufs[2], c.bufs[1],
                       c.bufs[2])


cdef int max_select(const Call* c, part_picker part) noexcept nogil:
    # the adjoint of max_pool2d_backward in its gradient argument: read h where it wrote
    return pool_planes(c, POOL_R_SELECT, part, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[2],
                       c.bufs[2])


cdef int avg_backward(const Call* c, part_picker part) noexcept nogil:
    # each window spreads dy / divisor over the cells it read; overlapping windows add up
    return pool_planes(c, POOL_R_AVG_BACKWARD, part, c.bufs[1], c.bufs[1], c.bufs[1], c.bufs[0],
                       c.bufs[1])


cdef int pool2d_f32(const Call* c) noexcept nogil:
    return pool2d_float(c, pool_max_f32_part, pool_avg_f32_part)
cdef int pool2d_f64(const Call* c) noexcept nogil:
    return pool2d_float(c, pool_max_f64_part, pool_avg_f64_part)
cdef int max_pool2d_backward_f32(const Call* c) noexcept nogil:
    return max_backward(c, pool_backward_f32_part)
cdef int max_pool2d_backward_f64(const Call* c) noexcept nogil:
    return max_backward(c, pool_backward_f64_part)
cdef int max_pool2d_select_f32(const Call* c) noexcept nogil:
    return max_select(c, pool_backward_f32_part)
cdef int max_pool2d_select_f64(const Call* c) noexcept nogil:
    return max_select(c, pool_backward_f64_part)
cdef int avg_pool2d_backward_f32(const Call* c) noexcept nogil:
    return avg_backward(c, pool_backward_f32_part)
cdef int avg_pool2d_backward_f64(const Call* c) noexcept nogil:
    return avg_backward(c, pool_backward_f64_part)

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
