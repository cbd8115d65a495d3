# Group norm and its backward (mgegraph/ops/norm.py).
#
# Parameter layout: the ints are the GroupNorm struct below, whose field names this module
# exports (GROUP_NORM_FIELDS) for the lowering, mgegraph/_kernels/lowering/norm.py, to pack by
# name; the floats are [eps]. Buffers: group_norm x, weight, bias, then y; group_norm_backward
# x, weight, dy, then dx, dweight, dbias and a workspace of 2 N C doubles.
#
# Design: the units of work are the N * groups groups, each a contiguous run of
# (C / groups) * inner values; threads (parallel.pyx) take contiguous ranges of them, so every
# output is computed as on one thread. A group's statistics take one pass: the sums of x - k and
# of its squares, k the group's first value, with double accumulators in LANES independent lanes
# (lane_sums.pxd, shared with layer and batch norm), which vectorise without reassociation; k
# lies within a few deviations of the mean, so the variance s2 / n - (s1 / n)^2 keeps double's
# digits even where |mean| >> std (a two-pass mean then squared deviations read x once more:
# the training step read x three times forward and three backward, 1.8x PyTorch's time on Zen 3).
# The backward's one pass takes the same two sums with sum dy and sum dy (x - k) per channel, then
# writes dx: x and dy are each read twice. The elementwise pass runs in x's
# dtype on x minus the mean rounded to it, with per-channel factors computed in double:
# PyTorch's precision at its speed (folding the mean into the shift instead, x * scale + shift,
# left 2e-4 where a group's values are all equal). The backward writes each (sample, channel)'s
# sums for dweight and dbias to the workspace and adds them over the samples in order at the
# end, so the bits do not depend on the thread count. Both are safe in place: a group is read
# whole before any of its outputs is written, each output at the index it reads.

from libc.math cimport sqrt
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .activation cimport activate
from .lane_sums cimport GRAD_LANES, LANES, lanes_total
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct GroupNorm:          # x (batch, channels, inner); channels % groups == 0
    Py_ssize_t batch, channels, inner, groups
    Py_ssize_t activation           # the forward's epilogue (activation.h's codes); 0 backward
    Py_ssize_t threads

cdef GroupNorm _gn
GROUP_NORM_FIELDS = fields_of(_gn, sizeof(GroupNorm))

cdef extern from "group_norm.h":
    ctypedef struct GroupNormLoops:
        void (*sums)(const float* x, Py_ssize_t n, double shift, double* s) noexcept nogil
        void (*grad_sums)(const float* x, const float* g, Py_ssize_t n, double shift,
                          double* s) noexcept nogil
        void (*affine)(const float* x, Py_ssize_t n, float centre, float scale, float shift,
                       int act, float* y) noexcept nogil
        void (*dx)(const float* x, const float* g, Py_ssize_t n, float centre, float p, float q,
                   float r, float* dx) noexcept nogil
    GroupNormLoops group_norm_loops() noexcept nogil
    void gn_forward_f32(const GroupNormLoops* k, const float* x, const float* w, const float* b,
                        float* y, Py_ssize_t channels, Py_ssize_t inner, Py_ssize_t groups,
                        int act, double eps, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil

# float32's loops, vectorised for the widest instruction set this CPU runs (the same bits as
# the loops below, which float64 takes)
cdef GroupNormLoops F32 = group_norm_loops()


cdef void shifted_sums(const floating* x, Py_ssize_t n, double shift, double* s1,
                       double* s2) noexcept nogil:
    # s1, s2 = the sums over a run of x - shift and of its squares, in one pass
    cdef double l1[LANES]
    cdef double l2[LANES]
    cdef double d
    cdef const floating* px
    cdef Py_ssize_t q, l, i, whole = n - n % LANES
    for l in range(LANES):
        l1[l] = l2[l] = 0
    for q in range(whole // LANES):
        px = x + q * LANES
        for l in range(LANES):
            d = px[l] - shift
            l1[l] += d
            l2[l] += d * d
    for i in range(whole, n):
        d = x[i] - shift
        l1[i - whole] += d
        l2[i - whole] += d * d
    s1[0], s2[0] = lanes_total(l1, LANES), lanes_total(l2, LANES)


cdef void grad_sums(const floating* x, const floating* g, Py_ssize_t n, double shift,
                    double* sums) noexcept nogil:
    # sums[0..3] = the sums over a run of g, g (x - shift), x - shift and (x - shift)^2
    cdef double lg[GRAD_LANES]
    cdef double lgd[GRAD_LANES]
    cdef double ld[GRAD_LANES]
    cdef double ldd[GRAD_LANES]
    cdef double d
    cdef Py_ssize_t q, l, i, whole = n - n % GRAD_LANES
    for l in range(GRAD_LANES):
        lg[l] = lgd[l] = ld[l] = ldd[l] = 0
    for q in range(whole // GRAD_LANES):
        for l in range(GRAD_LANES):
            i = q * GRAD_LANES + l
            d = x[i] - shift
            lg[l] += g[i]
            lgd[l] += g[i] * d
            ld[l] += d
            ldd[l] += d * d
    for i in range(whole, n):
        d = x[i] - shift
        lg[i - whole] += g[i]
        lgd[i - whole] += g[i] * d
        ld[i - whole] += d
        ldd[i - whole] += d * d
    sums[0] = lanes_total(lg, GRAD_LANES)
    sums[1] = lanes_total(lgd, GRAD_LANES)
    sums[2] = lanes_total(ld, GRAD_LANES)
    sums[3] = lanes_total(ldd, GRAD_LANES)


cdef inline double group_variance(double s1, double s2, Py_ssize_t n) noexcept nogil:
    # The variance from the shifted sums: with the shift one of the group's values, s1 / n is
    # within a few deviations of 0, so the difference keeps double's digits where a sum of raw
    # squares would cancel (|mean| >> std); never below 0
    cdef double v = (s2 - s1 * (s1 / n)) / n
    return v if v > 0 else 0


cdef inline void group_stats(const floating* x, Py_ssize_t n, double eps, double* mean,
                             double* rstd) noexcept nogil:
    # One pass over the group, shifted by its first value (float64's; gn_forward_f32 float32's)
    cdef double s[2]
    cdef double shift = x[0] if n else 0
    shifted_sums(x, n, shift, &s[0], &s[1])
    mean[0] = shift + s[0] / n
    rstd[0] = 1 / sqrt(group_variance(s[0], s[1], n) + eps)


cdef inline int forward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                             floating* tag) noexcept nogil:
    # float32: group_norm.h's body, which the C runtime runs too; float64: the same steps here
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
    if floating is float:
        gn_forward_f32(&F32, x, w, b, y, s.channels, M, s.groups, <int>s.activation,
                       c.floats[0], lo, hi)
        return KERNEL_OK
    for unit in range(lo, hi):
        px, py = x + unit * per * M, y + unit * per * M
        group_stats(px, per * M, c.floats[0], &mean, &rstd)
        centre = <floating>mean
        for k in range(per):
            ch = (unit % s.groups) * per + k
            scale = <floating>(rstd * w[ch])
            shift = b[ch]
            for m in range(k * M, (k + 1) * M):
                py[m] = activate((px[m] - centre) * scale + shift, s.activation)
    return KERNEL_OK


cdef inline int backward_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    # dx = rstd (g w - mean(g w) - xhat mean(g w xhat)) over the group; per (sample, channel)
    # the workspace gets sum g xhat and sum g (dweight's and dbias's terms).
    cdef const GroupNorm* s = <const GroupNorm*>c.ints
    cdef Py_ssize_t G = s.groups, per = s.channels // G, M = s.inner, K = per * M
    cdef Py_ssize_t unit, k, ch, m
    cdef double mean, rstd, sg, sgd, a, bsum, shift, s1, s2
    cdef double sums[4]
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
        # one pass over x and dy for the statistics and the gradient's sums together, shifted
        # by the group's first value (group_stats' way), then dx
        shift = px[0] if K else 0
        s1 = s2 = 0
        for k in range(per):  # the workspace holds each channel's sum g and sum g (x - shift)
            if floating is float:
                F32.grad_sums(px + k * M, pg + k * M, M, shift, sums)
            else:
                grad_sums(px + k * M, pg + k * M, M, shift, sums)
            acc[2 * (unit * per + k)], acc[2 * (unit * per + k) + 1] = sums[1], sums[0]
            s1 += sums[2]
            s2 += sums[3]
        mean = shift + s1 / K if K else 0
        rstd = 1 / sqrt(group_variance(s1, s2, K) + c.floats[0]) if K else 0  # no values: 0
        a = bsum = 0
        for k in range(per):
            ch = (unit % G) * per + k
            sg = acc[2 * (unit * per + k) + 1]
            sgd = acc[2 * (unit * per + k)] - (mean - shift) * sg  # sum g (x - mean)
            acc[2 * (unit * per + k)] = sgd * rstd
            acc[2 * (unit * per + k) + 1] = sg
            a += w[ch] * sg
            bsum += w[ch] * sgd
        a /= K
        bsum *= rstd / K
        # dx = dy (rstd w) + (x - mean) (-rstd^2 bsum) - rstd a, per channel
        centre, q, r = <floating>mean, <floating>(-rstd * rstd * bsum), <floating>(-rstd * a)
        for k in range(per):
            p = <floating>(rstd * w[(unit % G) * per + k])
            if floating is float:
                F32.dx(px + k * M, pg + k * M, M, centre, p, q, r, pdx + k * M)
            else:
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
