/* linear_f32: y[m, n] = x[m, k] w[n, k]^T (+ bias[n]), then the activation (activation.h, as
 * linalg.pyx's epilogue: bitwise the add and the elementwise op it replaces). The parameter block
 * of kernel_abi/matmul.py's LINEAR_FIELDS (m, n, k, has_bias, activation, threads, tiles); bufs
 * x, w, [bias,] y[, workspace] (unused here).
 *
 * linear_packed_f32: the same on a weight the exporter packed (gemm_tile.h's panels of op(B) =
 * w^T): the block of linear_f32 then `panel`, the panels' width; bufs x, panels, [bias,] y[,
 * workspace]. */
#include "../mgr_kernel.h"
#include "activation.h"
#include "gemm_c.h"

enum { M, N, K, HAS_BIAS, ACT, THREADS, TILES, FIELDS, PANEL = FIELDS };

int mgr_linear_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    const float* bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    float* y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    return mgr_gemm_epilogue(0, 1, s[M], s[N], s[K], (const float*)call->bufs[0],
                             (const float*)call->bufs[1], y, bias, (int)s[ACT], NULL);
}

int mgr_linear_packed_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    mg_gemm_job g = {0, s[M], s[N], s[K], s[PANEL], (const float*)call->bufs[0],
                      (const float*)call->bufs[1], (float*)call->bufs[s[HAS_BIAS] ? 3 : 2],
                      s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL, (int)s[ACT]};
    return mgr_gemm_packed_run(&g, 0, NULL);
}

/* the checks of both: `w_floats` what w's buffer must hold (n * k, or the panels) */
static const char* linear_check(const mgr_check_args* x, int64_t w_floats) {
    const int64_t* s = x->ints;
    int64_t mk, mn;
    size_t want = 3 + (size_t)s[HAS_BIAS]; /* y is buffer want - 1 */
    const char* buffers = mgr_layer_buffers(x, want);
    if (buffers) return buffers;
    if (!mgr_muladd(0, s[M], s[K], &mk) || !mgr_muladd(0, s[M], s[N], &mn))
        return "m, n or k is negative or too large";
    if (mk > x->buf_bytes[0] / 4 || w_floats > x->buf_bytes[1] / 4 ||
        mn > x->buf_bytes[want - 1] / 4 || (s[HAS_BIAS] && s[N] > x->buf_bytes[2] / 4))
        return "m, n or k reach past its buffers' bytes";
    return NULL;
}

static const char* linear_flags(const mgr_check_args* x, size_t n_ints) {
    const int64_t* s = x->ints;
    if (x->n_ints != n_ints || x->n_floats != 0)
        return n_ints == FIELDS ? "wants 7 ints and no floats" : "wants 8 ints and no floats";
    if (s[HAS_BIAS] < 0 || s[HAS_BIAS] > 1 || s[ACT] < ACT_NONE || s[ACT] > ACT_RELU6 ||
        s[THREADS] < 1 || s[TILES] < 0 || s[TILES] > 1)
        return "a flag is out of its range";
    if (!mgr_counts_ok(s, 3)) return "m, n and k make no loop this runtime bounds";
    return NULL;
}

const char* mgr_linear_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t nk;
    const char* flags = linear_flags(x, FIELDS);
    if (flags) return flags;
    if (!mgr_muladd(0, s[N], s[K], &nk)) return "m, n or k is negative or too large";
    return linear_check(x, nk);
}

const char* mgr_linear_packed_f32_check(const mgr_check_args* x) {
    int64_t floats;
    const char* flags = linear_flags(x, FIELDS + 1);
    if (flags) return flags;
    const char* panels = mgr_gemm_panels_check(x->ints[N], x->ints[K], x->ints[PANEL], &floats);
    return panels ? panels : linear_check(x, floats);
}
