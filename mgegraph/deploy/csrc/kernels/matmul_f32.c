/* matmul_f32: the parameter block of kernel_abi/matmul.py's MATMUL_FIELDS (m, n, k, transpose_a,
 * transpose_b, threads, tiles, gemv_split, ndim), then the batch shape[ndim] and the element
 * strides of a[ndim] and b[ndim] over it; bufs a, b, c[, workspace]. With gemv_split, the
 * workspace holds a single row's parts' sums (gemv_row.h's gemv_parts(k) x n floats: the row
 * then runs on its threads by parts of k, as the Python executor's); else it is unused.
 *
 * matmul_packed_f32: the same with b a weight the exporter packed (gemm_tile.h's panels of op(B),
 * one matrix for every batch): the block of matmul_f32 (transpose_b 0, b's batch strides 0: the
 * panels are op(B) already), then `panel`, the panels' width; bufs a, panels, c[, workspace]. */
#include "../mgr_kernel.h"
#include "gemm_c.h"

enum { M, N, K, TA, TB, THREADS, TILES, GEMV_SPLIT, NDIM, HEAD };

int mgr_matmul_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    int64_t ndim = s[NDIM], m = s[M], n = s[N], k = s[K];
    const int64_t* shape = s + HEAD;
    const int64_t* sa = shape + ndim;
    const int64_t* sb = shape + 2 * ndim;
    int64_t index[8] = {0}, batches = 1;
    for (int64_t d = 0; d < ndim; d++) batches *= shape[d];
    const float* a = (const float*)call->bufs[0];
    const float* b = (const float*)call->bufs[1];
    float* c = (float*)call->bufs[2];
    float* partials = s[GEMV_SPLIT] ? (float*)call->bufs[3] : NULL;
    for (int64_t r = 0; r < batches; r++, c += m * n) {
        int64_t oa = 0, ob = 0;
        for (int64_t d = 0; d < ndim; d++) {
            oa += index[d] * sa[d];
            ob += index[d] * sb[d];
        }
        int status = mgr_gemm(s[TA] != 0, s[TB] != 0, m, n, k, a + oa, b + ob, c, partials);
        if (status != MGR_KERNEL_OK) return status;
        for (int64_t d = ndim - 1; d >= 0 && ++index[d] == shape[d]; d--) index[d] = 0;
    }
    return MGR_KERNEL_OK;
}

int mgr_matmul_packed_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    int64_t ndim = s[NDIM], batches = 1, index[8] = {0};
    const int64_t* shape = s + HEAD;
    const int64_t* sa = shape + ndim;
    mg_gemm_job g = {s[TA] != 0, s[M], s[N], s[K], s[HEAD + 3 * ndim], NULL,
                      (const float*)call->bufs[1], (float*)call->bufs[2], NULL, 0};
    for (int64_t d = 0; d < ndim; d++) batches *= shape[d];
    for (int64_t r = 0; r < batches; r++, g.c += g.m * g.n) {
        int64_t oa = 0;
        for (int64_t d = 0; d < ndim; d++) oa += index[d] * sa[d];
        g.a = (const float*)call->bufs[0] + oa;
        int status = mgr_gemm_packed_run(&g, 0, NULL);
        if (status != MGR_KERNEL_OK) return status;
        for (int64_t d = ndim - 1; d >= 0 && ++index[d] == shape[d]; d--) index[d] = 0;
    }
    return MGR_KERNEL_OK;
}

/* the furthest element an operand's batches reach, plus one matrix of `size` elements */
static int reach(const int64_t* shape, const int64_t* strides, int64_t ndim, int64_t size,
                 int64_t* out) {
    int64_t end = size;
    for (int64_t d = 0; d < ndim; d++)
        if (strides[d] < 0 || !mgr_muladd(end, shape[d] - 1, strides[d], &end)) return 0;
    *out = end;
    return 1;
}

/* the checks of both; `packed`: b holds panels (one more int, the panel width, at the end) */
static const char* matmul_check(const mgr_check_args* x, int packed) {
    const int64_t* s = x->ints;
    int64_t mk, kn, mn, ea, eb, batches = 1;
    if ((x->n_bufs != 3 && x->n_bufs != 4) || x->n_floats != 0 || x->n_ints < HEAD)
        return "wants buffers a, b, c[, workspace], no floats and at least 9 ints";
    if (s[NDIM] < 1 || s[NDIM] > 8 || (int64_t)x->n_ints != HEAD + 3 * s[NDIM] + packed)
        return "its ndim and the size of its parameter block disagree (1 <= ndim <= 8)";
    for (int b = 0; b < 3; b++)
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
    for (int f = TA; f <= GEMV_SPLIT; f++)
        if (s[f] < 0 || (f != THREADS && s[f] > 1) || (f == THREADS && s[f] < 1))
            return "a flag is out of its range";
    for (int64_t d = 0; d < s[NDIM]; d++)
        if (s[HEAD + d] < 1 || !mgr_muladd(0, batches, s[HEAD + d], &batches))
            return "a batch dimension is not positive";
    if (!mgr_muladd(0, s[M], s[K], &mk) || !mgr_muladd(0, s[K], s[N], &kn) ||
        !mgr_muladd(0, s[M], s[N], &mn))
        return "m, n or k is negative or too large";
    int64_t mnk[3] = {s[M], s[N], s[K]};
    if (!mgr_counts_ok(mnk, 3)) return "m, n and k make no loop this runtime bounds";
    if (!reach(s + HEAD, s + HEAD + s[NDIM], s[NDIM], mk, &ea) || ea > x->buf_bytes[0] / 4)
        return "its batches of a reach past a's bytes";
    if (packed) {
        const char* panels = mgr_gemm_panels_check(s[N], s[K], s[HEAD + 3 * s[NDIM]], &eb);
        if (panels) return panels;
        if (s[TB]) return "packed panels are op(B): transpose_b must be 0";
        for (int64_t d = 0; d < s[NDIM]; d++)
            if (s[HEAD + 2 * s[NDIM] + d] != 0) return "packed panels have no batches of b";
        if (eb > x->buf_bytes[1] / 4) return "its panels reach past b's bytes";
    } else if (!reach(s + HEAD, s + HEAD + 2 * s[NDIM], s[NDIM], kn, &eb) ||
               eb > x->buf_bytes[1] / 4)
        return "its batches of b reach past b's bytes";
    if (!mgr_muladd(0, batches, mn, &mn) || mn > x->buf_bytes[2] / 4)
        return "its batches of c reach past c's bytes";
    if (s[GEMV_SPLIT]) { /* the parts' sums of a single row (mgr_gemv) */
        int64_t floats;
        if (packed || x->n_bufs != 4 || !mgr_muladd(0, gemv_parts(s[K]), s[N], &floats) ||
            floats > x->buf_bytes[3] / 4)
            return "gemv_split wants a workspace of gemv_parts(k) x n floats";
    }
    return NULL;
}

const char* mgr_matmul_f32_check(const mgr_check_args* x) { return matmul_check(x, 0); }

const char* mgr_matmul_packed_f32_check(const mgr_check_args* x) { return matmul_check(x, 1); }
