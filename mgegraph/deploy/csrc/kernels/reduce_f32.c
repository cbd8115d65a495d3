/* reduce_f32: sum, prod, mean, var, max and min of float32 over any axes, as reduce.pyx reads
 * them: the parameter block of kernel_abi/reduce.py (op, kept_ndim, kept shape and strides,
 * ndr, reduced shape and strides, threads), the input walked as (kept dims..., reduced dims...)
 * through element strides, the output contiguous over the kept dims. Sums, products and var's
 * two passes accumulate in double in C order and round once to float32: within float32 rounding
 * of reduce.pyx's (which sums pairwise along rows, as NumPy); max and min are exact (a NaN wins,
 * as NumPy's). argmax and argmin are not here (their output is an index). Bufs x, y. */
#include <math.h>

#include "../mgr_kernel.h"

enum { R_SUM, R_PROD, R_MEAN, R_VAR, R_MAX, R_MIN, R_OPS };
#define MGR_REDUCE_DIMS 8

/* the element offsets of a group of dims (shape, strides), visited in C order */
typedef struct {
    int64_t ndim, count;
    const int64_t* shape;
    const int64_t* stride;
} dims;

static dims dims_at(const int64_t* p) { /* p points at the group's ndim */
    dims d = {p[0], 1, p + 1, p + 1 + p[0]};
    for (int64_t i = 0; i < d.ndim; i++) d.count *= d.shape[i];
    return d;
}

/* the offset of the e-th element of group d (C order) */
static int64_t offset_of(const dims* d, int64_t e) {
    int64_t at = 0;
    for (int64_t i = d->ndim - 1; i >= 0; i--) {
        at += e % d->shape[i] * d->stride[i];
        e /= d->shape[i];
    }
    return at;
}

static double reduce_one(int64_t op, const float* x, const dims* r, double centre) {
    double acc = op == R_PROD ? 1.0 : 0.0;
    float best = op == R_MAX ? -INFINITY : INFINITY;
    int nan = 0;
    for (int64_t e = 0; e < r->count; e++) {
        float v = x[offset_of(r, e)];
        if (op == R_MAX || op == R_MIN) {
            nan |= v != v;
            best = op == R_MAX ? (v > best ? v : best) : (v < best ? v : best);
        } else if (op == R_PROD) {
            acc *= v;
        } else if (op == R_VAR) {
            acc += ((double)v - centre) * ((double)v - centre);
        } else {
            acc += v;
        }
    }
    if (op == R_MAX || op == R_MIN) return nan ? NAN : best;
    return op == R_SUM || op == R_PROD ? acc : acc / (double)r->count;
}

int mgr_reduce_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    dims kept = dims_at(s + 1), red = dims_at(s + 2 + 2 * s[1]);
    const float* x = (const float*)call->bufs[0];
    float* y = (float*)call->bufs[1];
    for (int64_t o = 0; o < kept.count; o++) {
        const float* xo = x + offset_of(&kept, o);
        double v = reduce_one(s[0] == R_VAR ? R_MEAN : s[0], xo, &red, 0.0);
        if (s[0] == R_VAR) v = reduce_one(R_VAR, xo, &red, v);
        y[o] = (float)v;
    }
    return MGR_KERNEL_OK;
}

/* a group's sizes and the furthest element it reaches (added to *reach): 0 where malformed */
static int group_ok(const int64_t* p, int64_t* count, int64_t* reach) {
    if (p[0] < 0 || p[0] > MGR_REDUCE_DIMS) return 0;
    *count = 1;
    for (int64_t i = 0; i < p[0]; i++)
        if (p[1 + i] < 0 || !mgr_muladd(0, *count, p[1 + i], count)) return 0;
    if (!mgr_counts_ok(p + 1, (int)p[0])) return 0;
    for (int64_t i = 0; *count > 0 && i < p[0]; i++)
        if (p[1 + p[0] + i] < 0 || !mgr_muladd(*reach, p[1 + i] - 1, p[1 + p[0] + i], reach))
            return 0;
    return 1;
}

const char* mgr_reduce_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t kept, red, reach = 0, loops;
    if (x->n_bufs != 2 || x->n_floats != 0 || x->n_ints < 3)
        return "wants buffers x, y, the reduce block and no floats";
    if (x->buf_dtypes[0] != 0 || x->buf_dtypes[1] != 0) return "reads and writes float32 only";
    if (s[0] < 0 || s[0] >= R_OPS) return "runs sum, prod, mean, var, max and min only";
    if (s[1] < 0 || s[1] > MGR_REDUCE_DIMS || (int64_t)x->n_ints < 3 + 2 * s[1])
        return "its kept dims and the size of its parameter block disagree";
    const int64_t* r = s + 2 + 2 * s[1];
    if (r[0] < 0 || r[0] > MGR_REDUCE_DIMS || (int64_t)x->n_ints != 4 + 2 * s[1] + 2 * r[0])
        return "its reduced dims and the size of its parameter block disagree";
    if (!group_ok(s + 1, &kept, &reach) || !group_ok(r, &red, &reach))
        return "a dimension or stride is negative or too large";
    if (kept > x->buf_bytes[1] / 4) return "its kept dims reach past y's bytes";
    if (kept > 0 && red > 0 && reach >= x->buf_bytes[0] / 4)
        return "its strides reach past x's bytes";
    if (!mgr_muladd(0, kept, red, &loops) || (red == 0 && kept > MGR_EMPTY_DIM))
        return "its sizes make no loop this runtime bounds";
    return NULL;
}
