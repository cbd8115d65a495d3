/* Reductions over any set of axes (sum, prod, mean, var, max, min, argmax, argmin) of every
 * dtype: the one source of reduce.pyx's kernels and of the C runtime's reduce_f32
 * (mgegraph/deploy/csrc/kernels/reduce_f32.c), so the two give the same bits. The parameter
 * block is kernel_abi/reduce.py's: op, kept_ndim, kept shape and strides, ndr, reduced shape and
 * strides, threads. The input is read as (kept dims..., reduced dims...) through element
 * strides; the output is contiguous over the kept dims. Reduced positions are visited in C
 * order, so argmax's index is the flat index within the reduced axes, as NumPy's. The threads
 * and the checks of a block against its buffers are each caller's.
 *
 * Design: outputs are made in chunks of up to MG_REDUCE_CHUNK. When neighbouring outputs are
 * neighbours in the input (kept innermost stride 1), a chunk is reduced "by columns": every
 * reduced position updates the chunk's accumulators from one contiguous run, so reducing a
 * leading axis streams memory instead of striding through it; four positions a pass over the
 * accumulators (mg_reduce_passes: 0.55-0.8x the time of one a pass on Zen 3). Otherwise each
 * output reduces its own block "by rows". Float sums accumulate in double, pairwise along rows as NumPy does
 * (mg_reduce_pairwise); integer sums and products wrap in uint64 (well defined, and what NumPy's
 * int64 arithmetic gives); var is two passes (the mean, then the squared deviations from it).
 * The unit of work is a chunk by columns (an output by rows), cut on one grid whatever the
 * thread count: a caller's threads take contiguous runs of units, and every output's arithmetic
 * is the same on any number of them (a chunk of one output reduces by rows, on every count).
 * Built without FP contraction in both (build_flags.py, the export's Makefile): every product
 * and sum rounded alone. */
#ifndef MG_REDUCE_H
#define MG_REDUCE_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define MG_REDUCE_CHUNK 1024
#define MG_REDUCE_DIMS 8 /* the most dims of the kept and of the reduced group, collapsed */

/* the op codes (kernel_abi/reduce.py's CODES) */
enum { MG_R_SUM, MG_R_PROD, MG_R_MEAN, MG_R_VAR, MG_R_MAX, MG_R_MIN, MG_R_ARGMAX, MG_R_ARGMIN };
/* the element types: a run's dtype (uint8 and bool are MG_REDUCE_U8) */
enum { MG_REDUCE_F32, MG_REDUCE_F64, MG_REDUCE_I32, MG_REDUCE_I64, MG_REDUCE_U8 };
/* kernel_abi/status.py's codes */
enum { MG_REDUCE_OK = 0, MG_REDUCE_BAD_VALUE = 2, MG_REDUCE_UNSUPPORTED = 3 };

/* The rows of a group of dims in C order: all dims but the innermost, which a loop walks. */
typedef struct {
    int ndim; /* the dims iterated: the group's but its innermost */
    int64_t index[MG_REDUCE_DIMS], shape[MG_REDUCE_DIMS], stride[MG_REDUCE_DIMS];
    int64_t offset; /* the current row's first element */
} mg_rows;

static inline void mg_rows_init(mg_rows* o, int ndim, const int64_t* shape,
                                const int64_t* stride) {
    o->ndim = ndim > 0 ? ndim - 1 : 0;
    o->offset = 0;
    for (int d = 0; d < o->ndim; d++) {
        o->index[d] = 0;
        o->shape[d] = shape[d];
        o->stride[d] = stride[d];
    }
}

static inline void mg_rows_next(mg_rows* o) {
    for (int d = o->ndim - 1; d >= 0; d--) {
        o->offset += o->stride[d];
        if (++o->index[d] < o->shape[d]) return;
        o->offset -= o->stride[d] * o->shape[d];
        o->index[d] = 0;
    }
}

/* a fresh walk moved to its row `row`, as that many mg_rows_next calls would */
static inline void mg_rows_seek(mg_rows* o, int64_t row) {
    for (int d = o->ndim - 1; d >= 0; d--) {
        if (o->shape[d] > 0) {
            o->index[d] = row % o->shape[d];
            row /= o->shape[d];
        }
        o->offset += o->index[d] * o->stride[d];
    }
}

static inline int64_t mg_rows_count(int ndim, const int64_t* shape) {
    int64_t rows = 1;
    for (int d = 0; d < ndim - 1; d++) rows *= shape[d];
    return rows;
}

static inline int64_t mg_reduce_product(int ndim, const int64_t* shape) {
    int64_t p = 1;
    for (int d = 0; d < ndim; d++) p *= shape[d];
    return p;
}

/* the reduced group of a block */
typedef struct {
    int ndr;
    const int64_t* rshape;
    const int64_t* rstride;
    int64_t nred; /* reduced elements per output */
    int64_t n, s; /* the innermost reduced dim: length and stride */
} mg_reduce_layout;

/* One reduction, for the parts a caller's threads run: a unit is `per` outputs of a kept row
 * (one chunk by columns, one output by rows), `nper` units to a row of `last` outputs. */
typedef struct {
    int op, ndo, dtype;
    const int64_t* oshape;
    const int64_t* ostride;
    int64_t last, so, item, per, nper;
    int64_t units;   /* the units of work; 0: nothing to write */
    int64_t threads; /* the block's threads field (what the Python lowering planned) */
    double moved;    /* the bytes it reads and writes (a thread rule's work; no overflow) */
    mg_reduce_layout L;
    const void* x;
    char* y;
} mg_reduce_run;

static inline int64_t mg_reduce_itemsize(int dtype) {
    if (dtype == MG_REDUCE_U8) return 1;
    return dtype == MG_REDUCE_F64 || dtype == MG_REDUCE_I64 ? 8 : 4;
}

/* Mirrors mgegraph.ops.reduce.result_dtype: max/min keep the dtype, arg* give int64, the rest
 * keep float32 and give 8-byte int64/float64 otherwise. */
static inline int64_t mg_reduce_out_itemsize(int op, int dtype, int64_t itemsize) {
    if (op == MG_R_MAX || op == MG_R_MIN) return itemsize;
    if (op < MG_R_ARGMAX && dtype == MG_REDUCE_F32) return 4;
    return 8;
}

/* r set up for the block `ints` over x (of `dtype`, an MG_REDUCE_ type) and y: a status. Its
 * dims are checked to fit mg_rows (whatever the block says, no walk writes past them); the rest
 * is the caller's check of the block against its buffers. */
static inline int mg_reduce_setup(mg_reduce_run* r, const int64_t* ints, const void* x, char* y,
                                  int dtype) {
    int64_t op = ints[0], kept_ndim = ints[1];
    r->units = 0;
    if (kept_ndim < 1 || kept_ndim > MG_REDUCE_DIMS) return MG_REDUCE_UNSUPPORTED;
    const int64_t* reduced = ints + 2 + 2 * kept_ndim; /* at ndr */
    if (reduced[0] < 1 || reduced[0] > MG_REDUCE_DIMS) return MG_REDUCE_UNSUPPORTED;
    if (op < MG_R_SUM || op > MG_R_ARGMIN) return MG_REDUCE_UNSUPPORTED;
    int64_t itemsize = mg_reduce_itemsize(dtype);
    r->op = (int)op;
    r->dtype = dtype;
    r->ndo = (int)kept_ndim;
    r->x = x;
    r->y = y;
    r->oshape = ints + 2;
    r->ostride = r->oshape + r->ndo;
    r->last = r->oshape[r->ndo - 1];
    r->so = r->ostride[r->ndo - 1];
    r->item = mg_reduce_out_itemsize(r->op, dtype, itemsize);
    r->L.ndr = (int)reduced[0];
    r->L.rshape = reduced + 1;
    r->L.rstride = reduced + 1 + r->L.ndr;
    r->L.nred = mg_reduce_product(r->L.ndr, r->L.rshape);
    r->L.n = r->L.rshape[r->L.ndr - 1];
    r->L.s = r->L.rstride[r->L.ndr - 1];
    r->threads = r->L.rstride[r->L.ndr]; /* the field after the reduced strides */
    int64_t outputs = mg_reduce_product(r->ndo, r->oshape);
    r->moved = (double)outputs * ((double)r->L.nred * (double)itemsize + (double)r->item);
    if (outputs == 0) return MG_REDUCE_OK;
    if (r->L.nred == 0 && r->op >= MG_R_MAX)
        return MG_REDUCE_BAD_VALUE; /* refused at build time; kept so a bad plan cannot read past */
    r->per = r->so == 1 ? MG_REDUCE_CHUNK : 1;
    r->nper = (r->last + r->per - 1) / r->per;
    r->units = mg_rows_count(r->ndo, r->oshape) * r->nper;
    return MG_REDUCE_OK;
}

/* the flat index of the first output of unit `unit` (the row's end for its last unit + 1) */
static inline int64_t mg_reduce_first_output(const mg_reduce_run* r, int64_t unit) {
    int64_t at = (unit % r->nper) * r->per;
    return (unit / r->nper) * r->last + (at < r->last ? at : r->last);
}

/* The reduced positions of the columns walk in C order, in passes of four along a row (one at a
 * time at its end): four positions a pass over a chunk's accumulators load and store them a
 * quarter as often as one (each still updated in C order: the same bits). */
typedef struct {
    mg_rows o;
    int64_t rows, r, i, n, s;
} mg_reduce_passes;

static inline void mg_reduce_passes_init(mg_reduce_passes* w, const mg_reduce_layout* L) {
    mg_rows_init(&w->o, L->ndr, L->rshape, L->rstride);
    w->rows = mg_rows_count(L->ndr, L->rshape);
    w->r = w->i = 0;
    w->n = w->rows > 0 ? L->n : 0;
    w->s = L->s;
}

/* the element offsets of the next pass's positions into at[]: 4 of them, 1, or 0 at the end */
static inline int mg_reduce_next_pass(mg_reduce_passes* w, int64_t at[4]) {
    while (w->i >= w->n) {
        if (++w->r >= w->rows) return 0;
        mg_rows_next(&w->o);
        w->i = 0;
    }
    int k = w->i + 4 <= w->n ? 4 : 1;
    for (int j = 0; j < k; j++) at[j] = w->o.offset + (w->i + j) * w->s;
    w->i += k;
    return k;
}

#define MG_REDUCE_FLOAT_IS_NAN(v) ((v) != (v))
#define MG_REDUCE_INT_IS_NAN(v) 0

/* The kernels of element type T (suffix S): ACC accumulates its products, and its sums where
 * FLOATS is 0 (integers: uint64, which wraps; floats: double, ACC double); IS_NAN(v) is 0 for
 * integers; IS_F32 says whether sums, means and products store float32 (else float64, or int64
 * for integer sums and products). The entry point: mg_reduce_part_S(run, lo, hi), the units
 * [lo, hi) of a run. */
#define MG_REDUCE_DEFINE(S, T, ACC, FLOATS, IS_NAN, IS_F32)                                        \
    static inline double mg_reduce_term_##S(T v, double centre, int squares) {                     \
        if (squares) {                                                                             \
            double d = (double)v - centre;                                                         \
            return d * d;                                                                          \
        }                                                                                          \
        return (double)v;                                                                          \
    }                                                                                              \
                                                                                                   \
    /* 8 <= n <= 128 elements into 8 partial sums; inlined with s == 1 for contiguous rows */      \
    static inline double mg_reduce_block8_##S(const T* x, int64_t n, int64_t s, double centre,     \
                                              int squares) {                                       \
        double r[8];                                                                               \
        int64_t i = 8;                                                                             \
        for (int j = 0; j < 8; j++) r[j] = mg_reduce_term_##S(x[j * s], centre, squares);          \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++)                                                            \
                r[j] += mg_reduce_term_##S(x[(i + j) * s], centre, squares);                       \
        double total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));          \
        for (; i < n; i++) total += mg_reduce_term_##S(x[i * s], centre, squares);                 \
        return total;                                                                              \
    }                                                                                              \
                                                                                                   \
    /* NumPy's pairwise summation: error grows like log(n) instead of n */                         \
    static double mg_reduce_pairwise_##S(const T* x, int64_t n, int64_t s, double centre,          \
                                         int squares) {                                            \
        if (n < 8) {                                                                               \
            double total = 0;                                                                      \
            for (int64_t i = 0; i < n; i++)                                                        \
                total += mg_reduce_term_##S(x[i * s], centre, squares);                            \
            return total;                                                                          \
        }                                                                                          \
        if (n <= 128) {                                                                            \
            if (s == 1) return mg_reduce_block8_##S(x, n, 1, centre, squares);                     \
            return mg_reduce_block8_##S(x, n, s, centre, squares);                                 \
        }                                                                                          \
        int64_t half = n / 2;                                                                      \
        half -= half % 8;                                                                          \
        return mg_reduce_pairwise_##S(x, half, s, centre, squares) +                               \
               mg_reduce_pairwise_##S(x + half * s, n - half, s, centre, squares);                 \
    }                                                                                              \
                                                                                                   \
    static inline ACC mg_reduce_fold_step_##S(ACC acc, T v, int mul) {                             \
        return mul ? acc * (ACC)v : acc + (ACC)v; /* (uint64_t) of a negative wraps */             \
    }                                                                                              \
                                                                                                   \
    /* NaN beats every number and nothing beats NaN, so the first NaN wins, as in NumPy */         \
    static inline int mg_reduce_beats_##S(T v, T best, int want_max) {                             \
        if (IS_NAN(v)) return !IS_NAN(best);                                                       \
        return want_max ? v > best : v < best;                                                     \
    }                                                                                              \
                                                                                                   \
    /* a branch-free select (maxss/minss); NaN is never picked here and is tracked aside */        \
    static inline T mg_reduce_pick_##S(T v, T best, int want_max) {                                \
        if (want_max) return v > best ? v : best;                                                  \
        return v < best ? v : best;                                                                \
    }                                                                                              \
                                                                                                   \
    /* eight independent lanes; a NaN is flagged aside and returned when the row holds one */      \
    static inline T mg_reduce_row_extreme_##S(const T* x, int64_t n, int64_t s, int want_max,      \
                                              T best) {                                            \
        T m[8];                                                                                    \
        uint8_t seen[8];                                                                           \
        int64_t i = 0;                                                                             \
        for (int j = 0; j < 8; j++) {                                                              \
            m[j] = best;                                                                           \
            seen[j] = 0;                                                                           \
        }                                                                                          \
        for (; i + 8 <= n; i += 8)                                                                 \
            for (int j = 0; j < 8; j++) {                                                          \
                T v = x[(i + j) * s];                                                              \
                m[j] = mg_reduce_pick_##S(v, m[j], want_max);                                      \
                seen[j] |= IS_NAN(v);                                                              \
            }                                                                                      \
        for (; i < n; i++) {                                                                       \
            T v = x[i * s];                                                                        \
            m[0] = mg_reduce_pick_##S(v, m[0], want_max);                                          \
            seen[0] |= IS_NAN(v);                                                                  \
        }                                                                                          \
        for (int j = 1; j < 8; j++) m[0] = mg_reduce_pick_##S(m[j], m[0], want_max);               \
        for (int j = 0; j < 8; j++)                                                                \
            if (seen[j]) return (T)(FLOATS ? NAN : 0);                                             \
        return m[0];                                                                               \
    }                                                                                              \
                                                                                                   \
    /* -- one output at a time ("rows") -- */                                                      \
    static double mg_reduce_block_sum_##S(const T* x, const mg_reduce_layout* L, double centre,    \
                                          int squares) {                                           \
        int64_t rows = mg_rows_count(L->ndr, L->rshape);                                           \
        double acc = 0;                                                                            \
        mg_rows o;                                                                                 \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            acc += mg_reduce_pairwise_##S(x + o.offset, L->n, L->s, centre, squares);              \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
        return acc;                                                                                \
    }                                                                                              \
                                                                                                   \
    static ACC mg_reduce_block_fold_##S(const T* x, const mg_reduce_layout* L, ACC acc,            \
                                        int mul) {                                                 \
        int64_t rows = mg_rows_count(L->ndr, L->rshape);                                           \
        mg_rows o;                                                                                 \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T* px = x + o.offset;                                                            \
            for (int64_t i = 0; i < L->n; i++)                                                     \
                acc = mg_reduce_fold_step_##S(acc, px[i * L->s], mul);                             \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
        return acc;                                                                                \
    }                                                                                              \
                                                                                                   \
    /* the block is not empty; a NaN is sticky from the first row that has one */                  \
    static inline T mg_reduce_block_extreme_##S(const T* x, const mg_reduce_layout* L,             \
                                                int want_max) {                                    \
        int64_t rows = mg_rows_count(L->ndr, L->rshape);                                           \
        T b = x[0];                                                                                \
        mg_rows o;                                                                                 \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            if (IS_NAN(b)) break;                                                                  \
            if (L->s == 1)                                                                         \
                b = mg_reduce_row_extreme_##S(x + o.offset, L->n, 1, want_max, b);                 \
            else                                                                                   \
                b = mg_reduce_row_extreme_##S(x + o.offset, L->n, L->s, want_max, b);              \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
        return b;                                                                                  \
    }                                                                                              \
                                                                                                   \
    /* the flat index of the first element equal to target (or the first NaN when target is        \
     * NaN): with target the block's extreme, that is NumPy's argmax/argmin */                     \
    static int64_t mg_reduce_block_find_##S(const T* x, const mg_reduce_layout* L, T target) {     \
        int64_t j = 0, rows = mg_rows_count(L->ndr, L->rshape);                                    \
        mg_rows o;                                                                                 \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T* px = x + o.offset;                                                            \
            for (int64_t i = 0; i < L->n; i++) {                                                   \
                if (px[i * L->s] == target) return j + i;                                          \
                if (IS_NAN(target) && IS_NAN(px[i * L->s])) return j + i;                          \
            }                                                                                      \
            j += L->n;                                                                             \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
        return 0;                                                                                  \
    }                                                                                              \
                                                                                                   \
    /* -- cnt neighbouring outputs at once ("columns") -- */                                       \
    /* each acc[b] summed over the reduced positions in C order, four a pass */                    \
    static void mg_reduce_cols_sum_##S(const T* x, const mg_reduce_layout* L, int64_t cnt,         \
                                       double* acc, const double* centre) {                        \
        mg_reduce_passes w;                                                                        \
        int64_t at[4] = {0, 0, 0, 0};                                                              \
        int k;                                                                                     \
        for (int64_t b = 0; b < cnt; b++) acc[b] = 0;                                              \
        mg_reduce_passes_init(&w, L);                                                              \
        while ((k = mg_reduce_next_pass(&w, at)) > 0) {                                            \
            const T *p0 = x + at[0], *p1 = x + at[1], *p2 = x + at[2], *p3 = x + at[3];            \
            if (k == 4 && centre == NULL) {                                                        \
                for (int64_t b = 0; b < cnt; b++)                                                  \
                    acc[b] = (((acc[b] + (double)p0[b]) + (double)p1[b]) + (double)p2[b]) +        \
                             (double)p3[b];                                                        \
            } else if (k == 4) {                                                                   \
                for (int64_t b = 0; b < cnt; b++) {                                                \
                    double c = centre[b], d0 = (double)p0[b] - c, d1 = (double)p1[b] - c;          \
                    double d2 = (double)p2[b] - c, d3 = (double)p3[b] - c;                         \
                    acc[b] = (((acc[b] + d0 * d0) + d1 * d1) + d2 * d2) + d3 * d3;                 \
                }                                                                                  \
            } else if (centre == NULL) {                                                           \
                for (int64_t b = 0; b < cnt; b++) acc[b] += (double)p0[b];                         \
            } else {                                                                               \
                for (int64_t b = 0; b < cnt; b++) {                                                \
                    double d = (double)p0[b] - centre[b];                                          \
                    acc[b] += d * d;                                                               \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* products, and integer sums, in C order, four positions a pass */                            \
    static void mg_reduce_cols_fold_##S(const T* x, const mg_reduce_layout* L, int64_t cnt,        \
                                        ACC* acc, int mul) {                                       \
        mg_reduce_passes w;                                                                        \
        int64_t at[4] = {0, 0, 0, 0};                                                              \
        int k;                                                                                     \
        for (int64_t b = 0; b < cnt; b++) acc[b] = mul ? 1 : 0;                                    \
        mg_reduce_passes_init(&w, L);                                                              \
        while ((k = mg_reduce_next_pass(&w, at)) > 0) {                                            \
            const T *p0 = x + at[0], *p1 = x + at[1], *p2 = x + at[2], *p3 = x + at[3];            \
            if (k == 4) {                                                                          \
                for (int64_t b = 0; b < cnt; b++) {                                                \
                    ACC a = mg_reduce_fold_step_##S(acc[b], p0[b], mul);                           \
                    a = mg_reduce_fold_step_##S(a, p1[b], mul);                                    \
                    a = mg_reduce_fold_step_##S(a, p2[b], mul);                                    \
                    acc[b] = mg_reduce_fold_step_##S(a, p3[b], mul);                               \
                }                                                                                  \
            } else {                                                                               \
                for (int64_t b = 0; b < cnt; b++)                                                  \
                    acc[b] = mg_reduce_fold_step_##S(acc[b], p0[b], mul);                          \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* branch-free over the chunk, a NaN kept aside; four positions a pass, walked here: GCC 12    \
     * vectorises this loop only so, not over mg_reduce_passes (3x the time) */                    \
    static void mg_reduce_cols_extreme_##S(const T* x, const mg_reduce_layout* L, int64_t cnt,     \
                                           int want_max, T* best) {                                \
        int64_t rows = mg_rows_count(L->ndr, L->rshape), n = L->n, s = L->s;                       \
        T seen[MG_REDUCE_CHUNK];                                                                   \
        mg_rows o;                                                                                 \
        for (int64_t b = 0; b < cnt; b++) {                                                        \
            best[b] = x[b];                                                                        \
            seen[b] = 0;                                                                           \
        }                                                                                          \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            const T* row = x + o.offset;                                                           \
            int64_t i = 0;                                                                         \
            for (; i + 4 <= n; i += 4) {                                                           \
                const T *p0 = row + i * s, *p1 = p0 + s, *p2 = p1 + s, *p3 = p2 + s;               \
                for (int64_t b = 0; b < cnt; b++) {                                                \
                    T m = mg_reduce_pick_##S(p0[b], best[b], want_max), k = seen[b];               \
                    m = mg_reduce_pick_##S(p1[b], m, want_max);                                    \
                    m = mg_reduce_pick_##S(p2[b], m, want_max);                                    \
                    best[b] = mg_reduce_pick_##S(p3[b], m, want_max);                              \
                    k = IS_NAN(p0[b]) ? p0[b] : k;                                                 \
                    k = IS_NAN(p1[b]) ? p1[b] : k;                                                 \
                    k = IS_NAN(p2[b]) ? p2[b] : k;                                                 \
                    seen[b] = IS_NAN(p3[b]) ? p3[b] : k;                                           \
                }                                                                                  \
            }                                                                                      \
            for (; i < n; i++)                                                                     \
                for (int64_t b = 0; b < cnt; b++) {                                                \
                    T v = row[i * s + b];                                                          \
                    best[b] = mg_reduce_pick_##S(v, best[b], want_max);                            \
                    seen[b] = IS_NAN(v) ? v : seen[b];                                             \
                }                                                                                  \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
        for (int64_t b = 0; b < cnt; b++)                                                          \
            if (IS_NAN(seen[b])) best[b] = (T)(FLOATS ? NAN : 0);                                  \
    }                                                                                              \
                                                                                                   \
    static void mg_reduce_cols_arg_##S(const T* x, const mg_reduce_layout* L, int64_t cnt,         \
                                       int want_max, T* best, int64_t* idx) {                      \
        int64_t j = 0, rows = mg_rows_count(L->ndr, L->rshape);                                    \
        mg_rows o;                                                                                 \
        for (int64_t b = 0; b < cnt; b++) {                                                        \
            best[b] = x[b];                                                                        \
            idx[b] = 0;                                                                            \
        }                                                                                          \
        mg_rows_init(&o, L->ndr, L->rshape, L->rstride);                                           \
        for (int64_t r = 0; r < rows; r++) {                                                       \
            for (int64_t i = 0; i < L->n; i++) {                                                   \
                const T* px = x + o.offset + i * L->s;                                             \
                for (int64_t b = 0; b < cnt; b++)                                                  \
                    if (mg_reduce_beats_##S(px[b], best[b], want_max)) {                           \
                        best[b] = px[b];                                                           \
                        idx[b] = j;                                                                \
                    }                                                                              \
                j++;                                                                               \
            }                                                                                      \
            mg_rows_next(&o);                                                                      \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* -- a chunk of outputs: rows or columns, then stored in the output dtype -- */               \
    /* sums of floats, means and vars: double accumulators */                                      \
    static void mg_reduce_chunk_moments_##S(int op, const T* x, int64_t so, int64_t cnt,           \
                                            const mg_reduce_layout* L, char* y) {                  \
        double acc[MG_REDUCE_CHUNK], centre[MG_REDUCE_CHUNK];                                      \
        double n = (double)L->nred;                                                                \
        int columns = so == 1 && cnt > 1;                                                          \
        if (columns)                                                                               \
            mg_reduce_cols_sum_##S(x, L, cnt, acc, NULL);                                          \
        else                                                                                       \
            for (int64_t b = 0; b < cnt; b++)                                                      \
                acc[b] = mg_reduce_block_sum_##S(x + b * so, L, 0, 0);                             \
        if (op != MG_R_SUM) /* 0 / 0 is NaN for an empty reduction, as NumPy's mean */             \
            for (int64_t b = 0; b < cnt; b++) acc[b] = acc[b] / n;                                 \
        if (op == MG_R_VAR) {                                                                      \
            for (int64_t b = 0; b < cnt; b++) centre[b] = acc[b];                                  \
            if (columns)                                                                           \
                mg_reduce_cols_sum_##S(x, L, cnt, acc, centre);                                    \
            else                                                                                   \
                for (int64_t b = 0; b < cnt; b++)                                                  \
                    acc[b] = mg_reduce_block_sum_##S(x + b * so, L, centre[b], 1);                 \
            for (int64_t b = 0; b < cnt; b++) acc[b] = acc[b] / n;                                 \
        }                                                                                          \
        for (int64_t b = 0; b < cnt; b++) {                                                        \
            if (IS_F32)                                                                            \
                ((float*)y)[b] = (float)acc[b];                                                    \
            else                                                                                   \
                ((double*)y)[b] = acc[b]; /* float64 inputs, and mean/var of integers */           \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* products, and sums of integers */                                                           \
    static void mg_reduce_chunk_fold_##S(int op, const T* x, int64_t so, int64_t cnt,              \
                                         const mg_reduce_layout* L, char* y) {                     \
        ACC acc[MG_REDUCE_CHUNK];                                                                  \
        int mul = op == MG_R_PROD;                                                                 \
        if (so == 1 && cnt > 1)                                                                    \
            mg_reduce_cols_fold_##S(x, L, cnt, acc, mul);                                          \
        else                                                                                       \
            for (int64_t b = 0; b < cnt; b++)                                                      \
                acc[b] = mg_reduce_block_fold_##S(x + b * so, L, (ACC)(mul ? 1 : 0), mul);         \
        for (int64_t b = 0; b < cnt; b++) {                                                        \
            if (IS_F32)                                                                            \
                ((float*)y)[b] = (float)acc[b];                                                    \
            else if (FLOATS)                                                                       \
                ((double*)y)[b] = (double)acc[b];                                                  \
            else                                                                                   \
                ((int64_t*)y)[b] = (int64_t)acc[b];                                                \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void mg_reduce_chunk_extreme_##S(int want_max, int want_index, const T* x,              \
                                            int64_t so, int64_t cnt,                               \
                                            const mg_reduce_layout* L, char* y) {                  \
        T best[MG_REDUCE_CHUNK];                                                                   \
        int64_t idx[MG_REDUCE_CHUNK];                                                              \
        if (so == 1 && cnt > 1 && want_index)                                                      \
            mg_reduce_cols_arg_##S(x, L, cnt, want_max, best, idx);                                \
        else if (so == 1 && cnt > 1)                                                               \
            mg_reduce_cols_extreme_##S(x, L, cnt, want_max, best);                                 \
        else                                                                                       \
            for (int64_t b = 0; b < cnt; b++) {                                                    \
                /* want_max a constant in each: row loops without its test */                      \
                best[b] = want_max ? mg_reduce_block_extreme_##S(x + b * so, L, 1)                 \
                                   : mg_reduce_block_extreme_##S(x + b * so, L, 0);                \
                if (want_index) idx[b] = mg_reduce_block_find_##S(x + b * so, L, best[b]);         \
            }                                                                                      \
        for (int64_t b = 0; b < cnt; b++) {                                                        \
            if (want_index)                                                                        \
                ((int64_t*)y)[b] = idx[b];                                                         \
            else                                                                                   \
                ((T*)y)[b] = best[b];                                                              \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void mg_reduce_chunk_##S(int op, const T* x, int64_t so, int64_t cnt,                   \
                                    const mg_reduce_layout* L, char* y) {                          \
        if (op >= MG_R_MAX)                                                                        \
            mg_reduce_chunk_extreme_##S(op == MG_R_MAX || op == MG_R_ARGMAX, op >= MG_R_ARGMAX,    \
                                        x, so, cnt, L, y);                                         \
        else if (op == MG_R_PROD || (op == MG_R_SUM && !FLOATS))                                   \
            mg_reduce_chunk_fold_##S(op, x, so, cnt, L, y);                                        \
        else                                                                                       \
            mg_reduce_chunk_moments_##S(op, x, so, cnt, L, y);                                     \
    }                                                                                              \
                                                                                                   \
    /* units [lo, hi) of r: their outputs in chunks of up to MG_REDUCE_CHUNK, cut where one        \
     * thread cuts them (unit boundaries are on that grid) */                                      \
    static inline void mg_reduce_part_##S(const mg_reduce_run* r, int64_t lo, int64_t hi) {        \
        int64_t first = mg_reduce_first_output(r, lo), end = mg_reduce_first_output(r, hi);        \
        int64_t row = first / r->last, start = first - row * r->last;                              \
        char* y = r->y + first * r->item;                                                          \
        mg_rows o;                                                                                 \
        mg_rows_init(&o, r->ndo, r->oshape, r->ostride);                                           \
        mg_rows_seek(&o, row);                                                                     \
        while (first < end) {                                                                      \
            int64_t cnt = r->last - start < MG_REDUCE_CHUNK ? r->last - start : MG_REDUCE_CHUNK;   \
            cnt = cnt < end - first ? cnt : end - first;                                           \
            mg_reduce_chunk_##S(r->op, (const T*)r->x + o.offset + start * r->so, r->so, cnt,      \
                                &r->L, y);                                                         \
            y += cnt * r->item;                                                                    \
            first += cnt;                                                                          \
            start += cnt;                                                                          \
            if (start == r->last) {                                                                \
                start = 0;                                                                         \
                mg_rows_next(&o);                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

MG_REDUCE_DEFINE(f32, float, double, 1, MG_REDUCE_FLOAT_IS_NAN, 1)
MG_REDUCE_DEFINE(f64, double, double, 1, MG_REDUCE_FLOAT_IS_NAN, 0)
MG_REDUCE_DEFINE(i32, int32_t, uint64_t, 0, MG_REDUCE_INT_IS_NAN, 0)
MG_REDUCE_DEFINE(i64, int64_t, uint64_t, 0, MG_REDUCE_INT_IS_NAN, 0)
MG_REDUCE_DEFINE(u8, uint8_t, uint64_t, 0, MG_REDUCE_INT_IS_NAN, 0) /* bool and uint8 */
#undef MG_REDUCE_DEFINE

/* the units [lo, hi) of r, by its dtype (a caller of one dtype calls its mg_reduce_part_S,
 * which keeps the others out of its binary) */
static inline void mg_reduce_part(const mg_reduce_run* r, int64_t lo, int64_t hi) {
    switch (r->dtype) {
    case MG_REDUCE_F32: mg_reduce_part_f32(r, lo, hi); break;
    case MG_REDUCE_F64: mg_reduce_part_f64(r, lo, hi); break;
    case MG_REDUCE_I32: mg_reduce_part_i32(r, lo, hi); break;
    case MG_REDUCE_I64: mg_reduce_part_i64(r, lo, hi); break;
    default: mg_reduce_part_u8(r, lo, hi);
    }
}

#endif
