/* The rows and lines of sort, topk and the scans (cumsum, cumprod, cumprod_backward): the one
 * source of sorting.pyx's kernels and of the C runtime's (mgegraph/deploy/csrc/kernels/
 * sorting.c), so the two give the same bits; the parameter blocks, the threads and the checks
 * are each caller's.
 *
 * Design: a sort is a stable bottom-up merge sort of a row's indices (insertion-sorted runs of
 * MG_SORT_RUN first), comparing through `before`, which puts NaN after every number ascending
 * and before every number descending and keeps equal values in index order; topk sorts the
 * whole row and keeps the first k (one order rule for both ops, the results always sorted). A
 * scan runs each line (outer, inner) along the axis in order, accumulating in the dtype as NumPy
 * does (the integers wrap: their sums and products run through scalar.h's unsigned helpers).
 * cumprod_backward is two passes per line: the reverse recurrence r_p = dy_p + x_(p+1) r_(p+1)
 * into dx, then dx_p *= the product of x before p, so a zero input needs no division. Built
 * without FP contraction in the C runtime and for the baseline x86-64 (no FMA) in the package:
 * every product and sum rounded alone. The scans are safe in place (each element is read before
 * it is written). */
#ifndef MG_SORTING_H
#define MG_SORTING_H

#include <stddef.h>
#include <stdint.h>

#include "scalar.h"

#define MG_SORT_RUN 16 /* rows are insertion-sorted in runs of this many before merging */

#define MG_FLOAT_IS_NAN(a) ((a) != (a))
#define MG_INT_IS_NAN(a) 0
#define MG_PLAIN_ADD(a, b) ((a) + (b))
#define MG_PLAIN_MUL(a, b) ((a) * (b))

#define MG_SORTING(S, T, IS_NAN, ADD, MUL)                                                     \
    /* a goes strictly before b; NaN counts as the largest value */                            \
    static inline int mg_before_##S(T a, T b, int descending) {                                \
        if (descending) return a > b || (IS_NAN(a) && !IS_NAN(b));                            \
        return a < b || (IS_NAN(b) && !IS_NAN(a));                                             \
    }                                                                                          \
    static inline void mg_insertion_runs_##S(const T* v, int32_t* idx, ptrdiff_t n,            \
                                             int descending) {                                 \
        for (ptrdiff_t lo = 0; lo < n; lo += MG_SORT_RUN) {                                    \
            ptrdiff_t hi = lo + MG_SORT_RUN < n ? lo + MG_SORT_RUN : n;                        \
            for (ptrdiff_t i = lo + 1; i < hi; i++) {                                          \
                int32_t cur = idx[i];                                                          \
                ptrdiff_t j = i;                                                               \
                for (; j > lo && mg_before_##S(v[cur], v[idx[j - 1]], descending); j--)        \
                    idx[j] = idx[j - 1];                                                       \
                idx[j] = cur;                                                                  \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* the right run's value goes first only when strictly before the left's: stable */        \
    static inline void mg_merge_##S(const T* v, const int32_t* src, int32_t* dst, ptrdiff_t lo, \
                                    ptrdiff_t mid, ptrdiff_t hi, int descending) {             \
        ptrdiff_t i = lo, j = mid;                                                             \
        for (ptrdiff_t out = lo; out < hi; out++) {                                            \
            if (i < mid && (j >= hi || !mg_before_##S(v[src[j]], v[src[i]], descending)))      \
                dst[out] = src[i++];                                                           \
            else                                                                               \
                dst[out] = src[j++];                                                           \
        }                                                                                      \
    }                                                                                          \
    /* the indices of v's n values in order, in a or b (returned) */                           \
    static inline int32_t* mg_sort_row_##S(const T* v, ptrdiff_t n, int32_t* a, int32_t* b,    \
                                           int descending) {                                   \
        for (ptrdiff_t i = 0; i < n; i++) a[i] = (int32_t)i;                                   \
        mg_insertion_runs_##S(v, a, n, descending);                                            \
        for (ptrdiff_t width = MG_SORT_RUN; width < n; width *= 2) {                           \
            for (ptrdiff_t lo = 0; lo < n; lo += 2 * width)                                    \
                mg_merge_##S(v, a, b, lo, lo + width < n ? lo + width : n,                     \
                             lo + 2 * width < n ? lo + 2 * width : n, descending);             \
            int32_t* t = a;                                                                    \
            a = b;                                                                             \
            b = t;                                                                             \
        }                                                                                      \
        return a;                                                                              \
    }                                                                                          \
    /* rows [lo, hi) of x (rows of n): the first k of each sorted, values and indices; slot:   \
     * two int32 arrays of n */                                                                \
    static inline void mg_order_rows_##S(const T* x, T* values, int32_t* indices,              \
                                         int32_t* slot, ptrdiff_t lo, ptrdiff_t hi,            \
                                         ptrdiff_t n, ptrdiff_t k, int descending) {           \
        for (ptrdiff_t row = lo; row < hi; row++) {                                            \
            const int32_t* order = mg_sort_row_##S(x + row * n, n, slot, slot + n, descending); \
            for (ptrdiff_t j = 0; j < k; j++) {                                                \
                values[row * k + j] = x[row * n + order[j]];                                   \
                indices[row * k + j] = order[j];                                               \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* lines [lo, hi) of x (outer, L, inner = M) scanned along L into y */                     \
    static inline void mg_scan_lines_##S(const T* x, T* y, ptrdiff_t lo, ptrdiff_t hi,         \
                                         ptrdiff_t L, ptrdiff_t M, int exclusive, int reverse, \
                                         int product) {                                        \
        for (ptrdiff_t line = lo; line < hi; line++) {                                         \
            ptrdiff_t at = (line / M) * L * M + line % M, step = M;                            \
            if (reverse) {                                                                     \
                at += (L - 1) * M;                                                             \
                step = -M;                                                                     \
            }                                                                                  \
            T acc = product ? 1 : 0;                                                           \
            for (ptrdiff_t p = 0; p < L; p++, at += step) {                                    \
                T cur = x[at];                                                                 \
                if (exclusive) y[at] = acc;                                                    \
                acc = product ? MUL(acc, cur) : ADD(acc, cur);                                 \
                if (!exclusive) y[at] = acc;                                                   \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
    /* dx_p = (product of x before p) * r_p, with r_p = dy_p + x_(p+1) r_(p+1) (inclusive) or  \
     * r_p = dy_(p+1) + x_(p+1) r_(p+1) (exclusive), p in scan order */                        \
    static inline void mg_cumprod_backward_lines_##S(const T* x, const T* g, T* dx,            \
                                                     ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t L,  \
                                                     ptrdiff_t M, int exclusive,               \
                                                     int reverse) {                            \
        for (ptrdiff_t line = lo; line < hi; line++) {                                         \
            ptrdiff_t first = (line / M) * L * M + line % M, step = M;                         \
            if (reverse) {                                                                     \
                first += (L - 1) * M;                                                          \
                step = -M;                                                                     \
            }                                                                                  \
            T r = 0, before_p = 1;                                                             \
            for (ptrdiff_t p = L - 1; p >= 0; p--) {                                           \
                ptrdiff_t at = first + p * step;                                               \
                if (exclusive) {                                                               \
                    dx[at] = r;                                                                \
                    r = p == L - 1 ? g[at] : ADD(g[at], MUL(x[at], r));                        \
                } else {                                                                       \
                    r = p == L - 1 ? g[at] : ADD(g[at], MUL(x[at + step], r));                 \
                    dx[at] = r;                                                                \
                }                                                                              \
            }                                                                                  \
            for (ptrdiff_t p = 0; p < L; p++) {                                                \
                ptrdiff_t at = first + p * step;                                               \
                dx[at] = MUL(before_p, dx[at]);                                                \
                before_p = MUL(before_p, x[at]);                                               \
            }                                                                                  \
        }                                                                                      \
    }

MG_SORTING(f32, float, MG_FLOAT_IS_NAN, MG_PLAIN_ADD, MG_PLAIN_MUL)
MG_SORTING(f64, double, MG_FLOAT_IS_NAN, MG_PLAIN_ADD, MG_PLAIN_MUL)
MG_SORTING(i32, int32_t, MG_INT_IS_NAN, m_add_int_i32, m_mul_int_i32)
MG_SORTING(i64, int64_t, MG_INT_IS_NAN, m_add_int_i64, m_mul_int_i64)
#undef MG_SORTING

#endif
