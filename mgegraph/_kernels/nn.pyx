# Neural-network kernels: softmax / log_softmax, cross entropy, layer norm, batch norm, dropout.
#
# Parameter layouts: the ints are the structs below, whose field names this module exports
# (SOFTMAX_FIELDS, ...) for the lowering, mgegraph/_kernels/lowering/nn.py, to pack by name;
# the floats are [label_smooth] for cross entropy, [eps] for the norms, [drop_prob] for dropout.
# Buffers: softmax x, y; cross_entropy pred, label, loss; layer_norm x, weight, bias, y;
# batch_norm x, weight, bias, then y, mean, var (training) or running_mean, running_var, y;
# dropout x, y; cross_entropy_backward pred, label, dloss, dpred; layer_norm_backward x, weight,
# dy, then dx, dweight, dbias and a workspace of 2 N doubles; batch_norm_backward x, weight,
# batch mean, batch var, dy, then dx, dweight, dbias.
#
# Design: ops that reduce over a middle axis of (O, n, M) handle up to CHUNK neighbouring columns
# at once, so every step reads a contiguous run of the inner dims instead of striding by M.
# Statistics accumulate in double; elementwise results are computed in double and rounded once.
# Threads (parallel.pyx): batch norm splits its channels, each computed as on one thread.

from libc.math cimport ceil, exp, expf, log, sqrt, INFINITY
from libc.stdint cimport int32_t, int64_t, uint64_t
from cython cimport floating

from .abi cimport (Call, KERNEL_OK, KERNEL_INDEX_OUT_OF_RANGE, KERNEL_UNSUPPORTED, kernel_fn,
                   kernel_address)
from .lane_sums cimport GRAD_LANES, lanes_total, run_sum
from .params cimport fields_of
from .parallel cimport parallel_for

cdef enum:
    CHUNK = 256

cdef enum Reduction:
    RED_NONE, RED_MEAN, RED_SUM

REDUCTIONS = {"none": RED_NONE, "mean": RED_MEAN, "sum": RED_SUM}

ctypedef struct Softmax:            # softmax, log_softmax: x read as (outer, n, inner), over n
    Py_ssize_t outer, n, inner, take_log

ctypedef struct CrossEntropy:       # and its backward: pred (outer, classes, inner)
    Py_ssize_t outer, classes, inner, with_logits, reduction, label_is_int64  # a Reduction

ctypedef struct LayerNorm:          # and its backward: rows of n; weight and bias of n
    Py_ssize_t rows, n

ctypedef struct BatchNorm:          # x (batch, channels, inner), statistics per channel
    Py_ssize_t batch, channels, inner, training, threads

ctypedef struct BatchNormBackward:  # the training form's
    Py_ssize_t batch, channels, inner

ctypedef struct Dropout:            # has_step: the optional step input is there
    Py_ssize_t size, seed, has_step

cdef Softmax _softmax
cdef CrossEntropy _ce
cdef LayerNorm _ln
cdef BatchNorm _bn
cdef BatchNormBackward _bn_backward
cdef Dropout _dropout
SOFTMAX_FIELDS = fields_of(_softmax, sizeof(Softmax))
CROSS_ENTROPY_FIELDS = fields_of(_ce, sizeof(CrossEntropy))
LAYER_NORM_FIELDS = fields_of(_ln, sizeof(LayerNorm))
BATCH_NORM_FIELDS = fields_of(_bn, sizeof(BatchNorm))
BATCH_NORM_BACKWARD_FIELDS = fields_of(_bn_backward, sizeof(BatchNormBackward))
DROPOUT_FIELDS = fields_of(_dropout, sizeof(Dropout))


cdef inline floating f_exp(floating x) noexcept nogil:
    if floating is float:
        return expf(x)
    else:
        return exp(x)


cdef inline Py_ssize_t chunk_len(Py_ssize_t start, Py_ssize_t total) noexcept nogil:
    return total - start if total - start < CHUNK else CHUNK


# -- softmax / log_softmax ------------------------------------------------------------------------
# The bodies live in softmax.h, which the C runtime (mgegraph/deploy) compiles too.
cdef extern from "softmax.h" nogil:
    void softmax_column_max_f32(const float* x, Py_ssize_t n, Py_ssize_t M, Py_ssize_t cnt,
                                float* mx)
    void softmax_column_max_f64(const double* x, Py_ssize_t n, Py_ssize_t M, Py_ssize_t cnt,
                                double* mx)
    void softmax_column_logsumexp_f32(const float* x, Py_ssize_t n, Py_ssize_t M,
                                      Py_ssize_t cnt, float* mx, double* lse)
    void softmax_column_logsumexp_f64(const double* x, Py_ssize_t n, Py_ssize_t M,
                                      Py_ssize_t cnt, double* mx, double* lse)
    void softmax_rows_f32(const float* x, float* y, Py_ssize_t outer, Py_ssize_t n,
                          Py_ssize_t inner, int take_log)
    void softmax_rows_f64(const double* x, double* y, Py_ssize_t outer, Py_ssize_t n,
                          Py_ssize_t inner, int take_log)


cdef inline void column_max(const floating* x, Py_ssize_t n, Py_ssize_t M, Py_ssize_t cnt,
                            floating* mx) noexcept nogil:
    if floating is float:
        softmax_column_max_f32(x, n, M, cnt, mx)
    else:
        softmax_column_max_f64(x, n, M, cnt, mx)


cdef inline void column_logsumexp(const floating* x, Py_ssize_t n, Py_ssize_t M,
                                  Py_ssize_t cnt, floating* mx, double* lse) noexcept nogil:
    if floating is float:
        softmax_column_logsumexp_f32(x, n, M, cnt, mx, lse)
    else:
        softmax_column_logsumexp_f64(x, n, M, cnt, mx, lse)


cdef int softmax_impl(const floating* x, floating* y, const Call* c) noexcept nogil:
    cdef const Softmax* s = <const Softmax*>c.ints
    if floating is float:
        softmax_rows_f32(x, y, s.outer, s.n, s.inner, s.take_log != 0)
    else:
        softmax_rows_f64(x, y, s.outer, s.n, s.inner, s.take_log != 0)
    return KERNEL_OK


# -- cross entropy --------------------------------------------------------------------------------
cdef inline int64_t label_at(const char* label, Py_ssize_t i, bint wide) noexcept nogil:
    if wide:
        return (<const int64_t*>label)[i]
    return (<const int32_t*>label)[i]


cdef double smoothing_mean(const floating* x, Py_ssize_t C, Py_ssize_t M, Py_ssize_t b,
                           bint logits) noexcept nogil:
    # mean over classes of the logits, or of the log-probabilities
    cdef double acc = 0
    cdef Py_ssize_t i
    for i in range(C):
        acc += x[i * M + b] if logits else log(x[i * M + b])
    return acc / C


cdef int ce_chunk(const floating* x, const char* label, Py_ssize_t C, Py_ssize_t M,
                  Py_ssize_t cnt, bint logits, bint wide, double ls, double* loss) noexcept nogil:
    # loss = logZ - (1 - ls) * x[label] - ls * mean(x), with x = log(p) and logZ = 0 for
    # probabilities; the smoothing term is skipped when ls == 0 so that log(0) of an unused class
    # does not turn the loss into NaN.
    cdef floating mx[CHUNK]
    cdef Py_ssize_t b
    cdef int64_t k
    cdef double picked
    if logits:
        column_logsumexp(x, C, M, cnt, mx, loss)
    for b in range(cnt):
        k = label_at(label, b, wide)
        if k < 0 or k >= C:
            return KERNEL_INDEX_OUT_OF_RANGE
        picked = x[k * M + b] if logits else log(x[k * M + b])
        loss[b] = (loss[b] if logits else 0.0) - (1 - ls) * picked
        if ls != 0:
            loss[b] -= ls * smoothing_mean(x, C, M, b, logits)
    return KERNEL_OK


cdef int ce_impl(const floating* x, const char* label, floating* y, const Call* c) noexcept nogil:
    cdef const CrossEntropy* s = <const CrossEntropy*>c.ints
    cdef Py_ssize_t O = s.outer, C = s.classes, M = s.inner, o, m0, cnt, b, k = 0
    cdef bint logits = s.with_logits != 0, wide = s.label_is_int64 != 0
    cdef int reduction = <int>s.reduction, status
    cdef double ls = c.floats[0], total = 0
    cdef double loss[CHUNK]
    cdef Py_ssize_t item = 8 if wide else 4
    for o in range(O):
        m0 = 0
        while m0 < M:
            cnt = chunk_len(m0, M)
            status = ce_chunk(x + o * C * M + m0, label + k * item, C, M, cnt, logits, wide,
                              ls, loss)
            if status != KERNEL_OK:
                return status
            for b in range(cnt):
                if reduction == RED_NONE:
                    y[k + b] = <floating>loss[b]
                else:
                    total += loss[b]
            k += cnt
            m0 += cnt
    if reduction == RED_MEAN:
        y[0] = <floating>(total / <double>k)  # no samples: 0 / 0 is NaN, as a mean of nothing
    elif reduction == RED_SUM:
        y[0] = <floating>total
    return KERNEL_OK


# -- layer norm -----------------------------------------------------------------------------------
cdef int layer_norm_impl(const floating* x, const floating* w, const floating* bias, floating* y,
                         const Call* c) noexcept nogil:
    cdef const LayerNorm* s = <const LayerNorm*>c.ints
    cdef Py_ssize_t R = s.rows, N = s.n, r, j
    cdef double eps = c.floats[0], mean, rstd
    cdef const floating* px
    cdef floating* py
    for r in range(R):
        px = x + r * N
        py = y + r * N
        mean = run_sum(px, N, 0, False) / N
        rstd = 1 / sqrt(run_sum(px, N, mean, True) / N + eps)
        for j in range(N):
            py[j] = <floating>((px[j] - mean) * rstd * w[j] + bias[j])
    return KERNEL_OK


# -- batch norm -----------------------------------------------------------------------------------
cdef void channel_sums(const floating* x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t M,
                       Py_ssize_t cnt, const double* centre, double* acc) noexcept nogil:
    # Sums over (N, M) for channels [0, cnt) of x; of squared deviations when centre is given.
    cdef Py_ssize_t n, b
    cdef const floating* px
    cdef double d
    for b in range(cnt):
        acc[b] = 0
    for n in range(N):
        px = x + n * C * M
        if M == 1:
            for b in range(cnt):
                d = px[b] - (centre[b] if centre != NULL else 0.0)
                acc[b] += d * d if centre != NULL else d
        else:
            for b in range(cnt):
                acc[b] += run_sum(px + b * M, M, centre[b] if centre != NULL else 0.0,
                                  centre != NULL)


cdef void batch_stats(const floating* x, Py_ssize_t N, Py_ssize_t C, Py_ssize_t M,
                      Py_ssize_t cnt, double* mean, double* var) noexcept nogil:
    # Two passes (mean, then squared deviations): no cancellation when |mean| >> std.
    cdef Py_ssize_t b
    cdef double count = <double>(N * M)
    channel_sums(x, N, C, M, cnt, NULL, mean)
    for b in range(cnt):
        mean[b] /= count  # an empty batch gives NaN statistics
    channel_sums(x, N, C, M, cnt, mean, var)
    for b in range(cnt):
        var[b] /= count


cdef void normalise_channels(const floating* x, floating* y, Py_ssize_t N, Py_ssize_t C,
                             Py_ssize_t M, Py_ssize_t cnt, const floating* mean,
                             const floating* scale, const floating* bias) noexcept nogil:
    cdef Py_ssize_t n, b, m
    cdef const floating* px
    cdef floating* py
    cdef floating centre, factor, shift
    for n in range(N):
        px = x + n * C * M
        py = y + n * C * M
        for b in range(cnt):
            centre, factor, shift = mean[b], scale[b], bias[b]
            for m in range(M):
                py[b * M + m] = (px[b * M + m] - centre) * factor + shift


cdef inline int batch_norm_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                                floating* tag) noexcept nogil:
    # Channels [lo, hi). Both modes normalise with the statistics as stored, in x's dtype: a
    # training batch norm remade from the mean and variance it saved (rematerialisation) is then
    # bitwise the same, in one pass instead of three.
    cdef const BatchNorm* s = <const BatchNorm*>c.ints
    cdef Py_ssize_t N = s.batch, C = s.channels, M = s.inner, c0 = lo, cnt, b
    cdef bint training = s.training != 0
    cdef double eps = c.floats[0]
    cdef double mean[CHUNK]
    cdef double var[CHUNK]
    cdef floating centre[CHUNK]
    cdef floating scale[CHUNK]
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef const floating* w = <const floating*>c.bufs[1]
    cdef const floating* bias = <const floating*>c.bufs[2]
    cdef floating* y = <floating*>c.bufs[3 if training else 5]
    cdef floating* stat0 = <floating*>c.bufs[4 if training else 3]  # mean out / running mean
    cdef floating* stat1 = <floating*>c.bufs[5 if training else 4]  # var out / running var
    while c0 < hi:
        cnt = min(hi - c0, <Py_ssize_t>CHUNK)
        if training:
            batch_stats(x + c0 * M, N, C, M, cnt, mean, var)
            for b in range(cnt):
                stat0[c0 + b] = <floating>mean[b]
                stat1[c0 + b] = <floating>var[b]
        for b in range(cnt):
            centre[b] = stat0[c0 + b]
            scale[b] = <floating>(w[c0 + b] / sqrt(<double>stat1[c0 + b] + eps))
        normalise_channels(x + c0 * M, y + c0 * M, N, C, M, cnt, centre, scale, bias + c0)
        c0 += cnt
    return KERNEL_OK


cdef int batch_norm_part_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return batch_norm_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int batch_norm_part_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return batch_norm_part(<const Call*>c, lo, hi, <double*>NULL)


# -- dropout --------------------------------------------------------------------------------------
cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    # splitmix64's finaliser: a bijection whose outputs look independent for consecutive inputs
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EBULL
    return z ^ (z >> 31)


cdef int dropout_impl(const floating* x, floating* y, const Call* c) noexcept nogil:
    # Counter-based: element i's coin depends only on (seed, step, i), never on the order of
    # work; ``step`` is an optional int64 input (a counter the training step advances), so each
    # run draws a new mask while the backward pass, given the same step, reuses it.
    # It keeps i when u = (hash >> 11) / 2**53, uniform in [0, 1), is >= p, i.e. when
    # hash >> 11 >= ceil(p * 2**53) (exact: scaling by 2**53 does not round).
    cdef const Dropout* s = <const Dropout*>c.ints
    cdef Py_ssize_t n = s.size, i
    cdef uint64_t golden = <uint64_t>0x9E3779B97F4A7C15ULL
    cdef uint64_t key = mix64(<uint64_t>s.seed + golden)
    cdef double p = c.floats[0]
    if s.has_step:
        key = mix64(key ^ mix64(<uint64_t>(<const int64_t*>c.bufs[1])[0] + golden))
    cdef uint64_t threshold
    cdef floating factor[2]  # [dropped, kept]
    if not 0 <= p <= 1:
        return KERNEL_UNSUPPORTED
    threshold = <uint64_t>ceil(p * 9007199254740992.0)
    factor[0] = 0
    factor[1] = <floating>(1 / (1 - p)) if p < 1 else 0
    for i in range(n):
        # an indexed load, not a branch (the coin is unpredictable by design) nor an int-to-float
        # conversion (3x slower here)
        y[i] = x[i] * factor[(mix64(key + <uint64_t>i * golden) >> 11) >= threshold]
    return KERNEL_OK


# -- backward kernels -----------------------------------------------------------------------------
# Design: the training step runs these every step, so each is one pass (two for the norms) over
# its input instead of the ten or so elementwise and reduction nodes of the composed formula.
cdef int ce_backward_chunk(const floating* x, const char* label, floating* dx, Py_ssize_t C,
                           Py_ssize_t M, Py_ssize_t cnt, bint logits, bint wide, double ls,
                           const double* scale) noexcept nogil:
    # d loss / d x_i = (softmax_i - t_i) * scale for logits, -t_i / p_i * scale for
    # probabilities, with the smoothed target t_i = (1 - ls) [i == label] + ls / C. Safe in place
    # (dx == x): each element is read before it is written.
    cdef floating mx[CHUNK]
    cdef double lse[CHUNK]
    cdef int64_t k[CHUNK]
    cdef double off = ls / C, t
    cdef Py_ssize_t i, b
    for b in range(cnt):
        k[b] = label_at(label, b, wide)
        if k[b] < 0 or k[b] >= C:
            return KERNEL_INDEX_OUT_OF_RANGE
    if logits:
        column_logsumexp(x, C, M, cnt, mx, lse)
    for i in range(C):
        for b in range(cnt):
            t = off + (1 - ls if k[b] == i else 0.0)
            if logits:
                dx[i * M + b] = <floating>((f_exp(<floating>(x[i * M + b] - lse[b])) - t)
                                           * scale[b])
            else:  # t == 0 (no smoothing, other class): 0 even where p is 0
                dx[i * M + b] = <floating>(-t / x[i * M + b] * scale[b]) if t != 0 else 0
    return KERNEL_OK


cdef int ce_backward_impl(const floating* x, const char* label, const floating* g, floating* dx,
                          const Call* c) noexcept nogil:
    cdef const CrossEntropy* s = <const CrossEntropy*>c.ints
    cdef Py_ssize_t O = s.outer, C = s.classes, M = s.inner, o, m0, cnt, b, k = 0
    cdef bint logits = s.with_logits != 0, wide = s.label_is_int64 != 0
    cdef int reduction = <int>s.reduction, status
    cdef double ls = c.floats[0], shared = 0
    cdef double scale[CHUNK]
    cdef Py_ssize_t item = 8 if wide else 4
    if O * M == 0:
        return KERNEL_OK  # nothing to write, and no loss gradient to read for "none"
    if reduction != RED_NONE:
        shared = g[0] / <double>(O * M) if reduction == RED_MEAN else g[0]
    for o in range(O):
        m0 = 0
        while m0 < M:
            cnt = chunk_len(m0, M)
            for b in range(cnt):
                scale[b] = g[k + b] if reduction == RED_NONE else shared
            status = ce_backward_chunk(x + o * C * M + m0, label + k * item, dx + o * C * M + m0,
                                       C, M, cnt, logits, wide, ls, scale)
            if status != KERNEL_OK:
                return status
            k += cnt
            m0 += cnt
    return KERNEL_OK


cdef int layer_norm_backward_impl(const floating* x, const floating* w, const floating* g,
                                  floating* dx, floating* dw, floating* db, double* acc,
                                  const Call* c) noexcept nogil:
    # dx = rstd (g w - mean(g w) - xhat mean(g w xhat)); dw, db sum over rows in ``acc`` (double,
    # 2 N) so that float32 inputs with many rows do not lose the small terms. Safe in place.
    cdef const LayerNorm* s = <const LayerNorm*>c.ints
    cdef Py_ssize_t R = s.rows, N = s.n, r, j
    cdef double eps = c.floats[0], mean, rstd, a, bsum, xhat, gw
    cdef const floating* px
    cdef const floating* pg
    cdef floating* pdx
    for j in range(2 * N):
        acc[j] = 0
    for r in range(R):
        px, pg, pdx = x + r * N, g + r * N, dx + r * N
        mean = run_sum(px, N, 0, False) / N
        rstd = 1 / sqrt(run_sum(px, N, mean, True) / N + eps)
        a = 0
        bsum = 0
        for j in range(N):
            gw = <double>pg[j] * w[j]
            a += gw
            bsum += gw * (px[j] - mean)
        a /= N
        bsum *= rstd / N
        for j in range(N):
            xhat = (px[j] - mean) * rstd
            acc[j] += pg[j] * xhat
            acc[N + j] += pg[j]
            pdx[j] = <floating>(rstd * (<double>pg[j] * w[j] - a - xhat * bsum))
    for j in range(N):
        dw[j] = <floating>acc[j]
        db[j] = <floating>acc[N + j]
    return KERNEL_OK


cdef void grad_sums(const floating* x, const floating* g, Py_ssize_t n, double centre,
                    double* sg, double* sgd, double* sd) noexcept nogil:
    # sg, sgd, sd += the sums over a run of g, g (x - centre) and x - centre
    cdef double lg[GRAD_LANES]
    cdef double lgd[GRAD_LANES]
    cdef double ld[GRAD_LANES]
    cdef double d
    cdef const floating* px
    cdef const floating* pg
    cdef Py_ssize_t q, l, i, whole = n - n % GRAD_LANES
    for l in range(GRAD_LANES):
        lg[l] = lgd[l] = ld[l] = 0
    for q in range(whole // GRAD_LANES):
        px, pg = x + q * GRAD_LANES, g + q * GRAD_LANES
        for l in range(GRAD_LANES):
            d = px[l] - centre
            lg[l] += pg[l]
            lgd[l] += pg[l] * d
            ld[l] += d
    for i in range(whole, n):
        d = x[i] - centre
        lg[i - whole] += g[i]
        lgd[i - whole] += g[i] * d
        ld[i - whole] += d
    sg[0] += lanes_total(lg, GRAD_LANES)
    sgd[0] += lanes_total(lgd, GRAD_LANES)
    sd[0] += lanes_total(ld, GRAD_LANES)


cdef int batch_norm_backward_impl(const floating* x, const floating* w, const floating* mean,
                                  const floating* var, const floating* g, floating* dx,
                                  floating* dw, floating* db, const Call* c) noexcept nogil:
    # Per channel with the batch statistics: db = sum g, dw = sum g xhat and
    # dx = w rstd (g - db / count - xhat dw / count). Safe in place.
    # The given mean is rounded to the dtype, which costs float32 digits when |mean| >> std; the
    # first pass also sums x - mean to correct it in double (centre = mean + that sum / count).
    cdef const BatchNormBackward* s = <const BatchNormBackward*>c.ints
    cdef Py_ssize_t N = s.batch, C = s.channels, M = s.inner, c0 = 0, cnt, n, b, m, at
    cdef double eps = c.floats[0], count = <double>(N * M), rstd, d
    # Per channel of the chunk: the sums of the first pass, then the factors of
    # dx = scale (g - sg - (x - centre) sgd) that the second pass applies
    cdef double sg[CHUNK]      # sum g, then that / count
    cdef double sgd[CHUNK]     # sum g (x - mean), then dw rstd / count
    cdef double centre[CHUNK]  # sum (x - mean), then the corrected mean
    cdef double scale[CHUNK]   # w rstd
    while c0 < C:
        cnt = chunk_len(c0, C)
        for b in range(cnt):
            sg[b] = sgd[b] = centre[b] = 0
        for n in range(N):
            at = (n * C + c0) * M
            if M == 1:  # a row of channels: lanes across the chunk, which vectorise
                for b in range(cnt):
                    d = <double>x[at + b] - mean[c0 + b]
                    sg[b] += g[at + b]
                    sgd[b] += g[at + b] * d
                    centre[b] += d
            else:
                for b in range(cnt):
                    grad_sums(x + at + b * M, g + at + b * M, M, mean[c0 + b], &sg[b], &sgd[b],
                              &centre[b])
        for b in range(cnt):
            rstd = 1 / sqrt(var[c0 + b] + eps)
            centre[b] = mean[c0 + b] + centre[b] / count
            sgd[b] = (sgd[b] - (centre[b] - mean[c0 + b]) * sg[b]) * rstd  # sum g xhat
            dw[c0 + b] = <floating>sgd[b]
            db[c0 + b] = <floating>sg[b]
            scale[b] = w[c0 + b] * rstd
            sg[b] /= count
            sgd[b] *= rstd / count
        for n in range(N):
            for b in range(cnt):
                at = (n * C + c0 + b) * M
                for m in range(at, at + M):
                    dx[m] = <floating>(scale[b] * (g[m] - sg[b] - (x[m] - centre[b]) * sgd[b]))
        c0 += cnt
    return KERNEL_OK


# -- entry points ---------------------------------------------------------------------------------
cdef int softmax_f32(const Call* c) noexcept nogil:
    return softmax_impl(<const float*>c.bufs[0], <float*>c.bufs[1], c)
cdef int softmax_f64(const Call* c) noexcept nogil:
    return softmax_impl(<const double*>c.bufs[0], <double*>c.bufs[1], c)

cdef int cross_entropy_f32(const Call* c) noexcept nogil:
    return ce_impl(<const float*>c.bufs[0], c.bufs[1], <float*>c.bufs[2], c)
cdef int cross_entropy_f64(const Call* c) noexcept nogil:
    return ce_impl(<const double*>c.bufs[0], c.bufs[1], <double*>c.bufs[2], c)

cdef int layer_norm_f32(const Call* c) noexcept nogil:
    return layer_norm_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                           <const float*>c.bufs[2], <float*>c.bufs[3], c)
cdef int layer_norm_f64(const Call* c) noexcept nogil:
    return layer_norm_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                           <const double*>c.bufs[2], <double*>c.bufs[3], c)

cdef int batch_norm_f32(const Call* c) noexcept nogil:
    cdef const BatchNorm* s = <const BatchNorm*>c.ints
    return parallel_for(s.threads, s.channels, batch_norm_part_f32, <void*>c)
cdef int batch_norm_f64(const Call* c) noexcept nogil:
    cdef const BatchNorm* s = <const BatchNorm*>c.ints
    return parallel_for(s.threads, s.channels, batch_norm_part_f64, <void*>c)

cdef int dropout_f32(const Call* c) noexcept nogil:
    return dropout_impl(<const float*>c.bufs[0],
                        <float*>c.bufs[1 + (<const Dropout*>c.ints).has_step], c)
cdef int dropout_f64(const Call* c) noexcept nogil:
    return dropout_impl(<const double*>c.bufs[0],
                        <double*>c.bufs[1 + (<const Dropout*>c.ints).has_step], c)

cdef int cross_entropy_backward_f32(const Call* c) noexcept nogil:
    return ce_backward_impl(<const float*>c.bufs[0], c.bufs[1], <const float*>c.bufs[2],
                            <float*>c.bufs[3], c)
cdef int cross_entropy_backward_f64(const Call* c) noexcept nogil:
    return ce_backward_impl(<const double*>c.bufs[0], c.bufs[1], <const double*>c.bufs[2],
                            <double*>c.bufs[3], c)

cdef int layer_norm_backward_f32(const Call* c) noexcept nogil:
    return layer_norm_backward_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                    <const float*>c.bufs[2], <float*>c.bufs[3],
                                    <float*>c.bufs[4], <float*>c.bufs[5], <double*>c.bufs[6], c)
cdef int layer_norm_backward_f64(const Call* c) noexcept nogil:
    return layer_norm_backward_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                    <const double*>c.bufs[2], <double*>c.bufs[3],
                                    <double*>c.bufs[4], <double*>c.bufs[5], <double*>c.bufs[6], c)

cdef int batch_norm_backward_f32(const Call* c) noexcept nogil:
    return batch_norm_backward_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                    <const float*>c.bufs[2], <const float*>c.bufs[3],
                                    <const float*>c.bufs[4], <float*>c.bufs[5],
                                    <float*>c.bufs[6], <float*>c.bufs[7], c)
cdef int batch_norm_backward_f64(const Call* c) noexcept nogil:
    return batch_norm_backward_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                    <const double*>c.bufs[2], <const double*>c.bufs[3],
                                    <const double*>c.bufs[4], <double*>c.bufs[5],
                                    <double*>c.bufs[6], <double*>c.bufs[7], c)

KERNELS = {
    "softmax_f32": kernel_address(softmax_f32), "softmax_f64": kernel_address(softmax_f64),
    "cross_entropy_f32": kernel_address(cross_entropy_f32), "cross_entropy_f64": kernel_address(cross_entropy_f64),
    "layer_norm_f32": kernel_address(layer_norm_f32), "layer_norm_f64": kernel_address(layer_norm_f64),
    "batch_norm_f32": kernel_address(batch_norm_f32), "batch_norm_f64": kernel_address(batch_norm_f64),
    "dropout_f32": kernel_address(dropout_f32), "dropout_f64": kernel_address(dropout_f64),
    "cross_entropy_backward_f32": kernel_address(cross_entropy_backward_f32),
    "cross_entropy_backward_f64": kernel_address(cross_entropy_backward_f64),
    "layer_norm_backward_f32": kernel_address(layer_norm_backward_f32),
    "layer_norm_backward_f64": kernel_address(layer_norm_backward_f64),
    "batch_norm_backward_f32": kernel_address(batch_norm_backward_f32),
    "batch_norm_backward_f64": kernel_address(batch_norm_backward_f64),
}
