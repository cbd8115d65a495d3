# Group norm and its backward (mgegraph/ops/norm.py).
#
# Parameter layout: the ints are the GroupNorm struct below, whose field names this module
# exports (GROUP_NORM_FIELDS) for the lowering, mgegraph/_kernels/lowering/norm.py, to pack by
# name; the floats are [eps]. Buffers: group_norm x, weight, bias, then y; group_norm_backward
# x, weight, dy, then dx, dweight, dbias and a workspace of 2 N C doubles.
#
# Design: the units of work are the N * groups groups, each a contiguous run of
# (C / groups) * inner values; threads (parallel.pyx) take contiguous ranges of them, so every
# output is computed as on one thread. A group's statistics take two passes (mean, then squared
# deviations) with double accumulators in LANES independent lanes (lane_sums.pxd, shared with
# layer and batch norm), which vectorise without reassociation. The elementwise pass runs in x's
# dtype on x minus the mean rounded to it, with per-channel factors computed in double:
# PyTorch's precision at its speed (folding the mean into the shift instead, x * scale + shift,
# left 2e-4 where a group's values are all equal). The backward writes each (sample, channel)'s
# sums for dweight and dbias to the workspace and adds them over the samples in order at the
# end, so the bits do not depend on the thread count. Both are safe in place: a group is read
# whole before any of its outputs is written, each output at the index it reads.

from libc.math cimport sqrt
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .lane_sums cimport GRAD_LANES, lanes_total, run_sum
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct GroupNorm:          # x (batch, channels, inner); channels % groups == 0
    Py_ssize_t batch, channels, inner, groups, threads

cdef GroupNorm _gn
GROUP_NORM_FIELDS = fields_of(_gn, sizeof(GroupNorm))


cdef void grad_sums(const floating* x, const floating* g, Py_ssize_t n, double centre,
                    double* sg, double* sgd, double* sdd) noexcept nogil:
    # sg, sgd, sdd = the sums over a run of g, of g (x - centre) and of (x - centre)^2
    cdef double lg[GRAD_LANES]
    cdef double lgd[GRAD_LANES]
    cdef double ldd[GRAD_LANES]
    cdef double d
    cdef Py_ssize_t q, l, i, whole = n - n % GRAD_LANES
    for l in range(GRAD_LANES):
        lg[l] = lgd[l] = ldd[l] = 0
    for q in range(whole // GRAD_LANES):
        for l in range(GRAD_LANES):
            i = q * GRAD_LANES + l
            d = x[i] - centre
            lg[l] += g[i]
            lgd[l] += g[i] * d
            ldd[l] += d * d
    for i in range(whole, n):
        d = x[i] - centre
        lg[i - whole] += g[i]
        lgd[i - whole] += g[i] * d
        ldd[i - whole] += d * d
    sg[0], sgd[0], sdd[0] = lanes_total(lg, GRAD_LANES), lanes_total(lgd, GRAD_LANES), \
        lanes_total(ldd, GRAD_LANES)


cdef inline void group_stats(const floating* x, Py_ssize_t n, double eps, double* mean,
                             double* rstd) noexcept nogil:
    # Two passes: no cancellation when |mean| >> std
    mean[0] = run_sum(x, n, 0, False) / n
    rstd[0] = 1 / sqrt(run_sum(x, n, mean[0], True) / n + eps)


cdef inline int forward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                             floating* tag) noexcept nogil:
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef Py_ssize_t per = s.channels // s.groups, M = s.inner, unit, k, ch, m
    cdef double mean, rstd
    cdef floating centre, scale, shift
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef const floating* w = <const floating*>c.bufs[1]
    cdef const floating* b = <const floating*>c.bufs[2]
    cdef floating* y = <floating*>c.bufs[3]
    cdef const floating* px
    cdef floating* py
    for unit in range(lo, hi):
        px, py = x + unit * per * M, y + unit * per * M
        group_stats(px, per * M, c.floats[0], &mean, &rstd)
        centre = <floating>mean
        for k in range(per):
            ch = (unit % s.groups) * per + k
            scale = <floating>(rstd * w[ch])
            shift = b[ch]
            for m in range(k * M, (k + 1) * M):
                py[m] = (px[m] - centre) * scale + shift
    return KERNEL_OK


cdef inline int backward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    # dx = rstd (g w - mean(g w) - xhat mean(g w xhat)) over the group; per (sample, channel)
    # the workspace gets sum g xhat and sum g (dweight's and dbias's terms).
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef Py_ssize_t G = s.groups, per = s.channels // G, M = s.inner, K = per * M
    cdef Py_ssize_t unit, k, ch, m
    cdef double mean, rstd, sg, sgd, sdd, a, bsum, var
    cdef floating centre, p, q, r
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef const floating* w = <const floating*>c.bufs[1]
    cdef const floating* g = <const floating*>c.bufs[2]
    cdef floating* dx = <floating*>c.bufs[3]
    cdef double* acc = <double*>c.bufs[6]
    cdef const floating* px
    cdef const floating* pg
    cdef floating* pdx
    for unit in range(lo, hi):
        px, pg, pdx = x + unit * K, g + unit * K, dx + unit * K
        # the mean, then one pass for the squared deviations (the variance's second pass) and
        # the gradient's sums together
        mean = run_sum(px, K, 0, False) / K if K else 0
        a = bsum = var = 0
        for k in range(per):
            ch = (unit % G) * per + k
            grad_sums(px + k * M, pg + k * M, M, mean, &sg, &sgd, &sdd)
            acc[2 * (unit * per + k)] = sgd  # times rstd below
            acc[2 * (unit * per + k) + 1] = sg
            a += w[ch] * sg
            bsum += w[ch] * sgd
            var += sdd
        rstd = 1 / sqrt(var / K + c.floats[0]) if K else 0  # no values: zeros, not NaN
        for k in range(per):
            acc[2 * (unit * per + k)] *= rstd
        a /= K
        bsum *= rstd / K
        # dx = dy (rstd w) + (x - mean) (-rstd^2 bsum) - rstd a, per channel
        centre, q, r = <floating>mean, <floating>(-rstd * rstd * bsum), <floating>(-rstd * a)
        for k in range(per):
            p = <floating>(rstd * w[(unit % G) * per + k])
            for m in range(k * M, (k + 1) * M):
                pdx[m] = pg[m] * p + (px[m] - centre) * q + r
    return KERNEL_OK


cdef int forward_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return forward_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int forward_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return forward_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int backward_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return backward_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int backward_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return backward_part(<const Call*>c, lo, hi, <double*>NULL)


cdef inline void param_grads(const Call* c, floating* dw, floating* db) noexcept nogil:
    # the samples' sums in order: the same bits at any thread count
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef const double* acc = <const double*>c.bufs[6]
    cdef Py_ssize_t C = s.channels, n, ch
    cdef double tw, tb
    for ch in range(C):
        tw = tb = 0
        for n in range(s.batch):
            tw += acc[2 * (n * C + ch)]
            tb += acc[2 * (n * C + ch) + 1]
        dw[ch], db[ch] = <floating>tw, <floating>tb


cdef int group_norm_f32(const Call* c) noexcept nogil:
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    return parallel_for(s.threads, s.batch * s.groups, forward_f32, <void*>c)
cdef int group_norm_f64(const Call* c) noexcept nogil:
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    return parallel_for(s.threads, s.batch * s.groups, forward_f64, <void*>c)

cdef int group_norm_backward_f32(const Call* c) noexcept nogil:
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef int status = parallel_for(s.threads, s.batch * s.groups, backward_f32, <void*>c)
    if status == KERNEL_OK:
        param_grads(c, <float*>c.bufs[4], <float*>c.bufs[5])
    return status
cdef int group_norm_backward_f64(const Call* c) noexcept nogil:
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef int status = parallel_for(s.threads, s.batch * s.groups, backward_f64, <void*>c)
    if status == KERNEL_OK:
        param_grads(c, <double*>c.bufs[4], <double*>c.bufs[5])
    return status

KERNELS = {
    "group_norm_f32": kernel_address(group_norm_f32),
    "group_norm_f64": kernel_address(group_norm_f64),
    "group_norm_backward_f32": kernel_address(group_norm_backward_f32),
    "group_norm_backward_f64": kernel_address(group_norm_backward_f64),
}
