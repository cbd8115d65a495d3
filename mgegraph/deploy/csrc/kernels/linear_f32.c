/* linear_f32: y[m, n] = x[m, k] w[n, k]^T (+ bias[n]), then the activation (activation.h, as
 * linalg.pyx's epilogue: bitwise the add and the elementwise op it replaces). The parameter block
 * of kernel_abi/matmul.py's LINEAR_FIELDS (m, n, k, has_bias, activation, threads, tiles); bufs
 * x, w, [bias,] y[, workspace] (unused here). */
#include "../mgr_kernel.h"
#include "activation.h"
#include "gemm_fma.h"

enum { M, N, K, HAS_BIAS, ACT, THREADS, TILES, FIELDS };

int mgr_linear_f32(const mgr_call* call) {
    const int64_t* s = call->ints;
    int64_t m = s[M], n = s[N];
    const float* bias = s[HAS_BIAS] ? (const float*)call->bufs[2] : NULL;
    float* y = (float*)call->bufs[s[HAS_BIAS] ? 3 : 2];
    int act = (int)s[ACT];
    int status = mgr_gemm(0, 1, m, n, s[K], (const float*)call->bufs[0],
                          (const float*)call->bufs[1], y);
    if (status != MGR_KERNEL_OK) return status;
    for (int64_t i = 0; i < m; i++) {
        float* yi = y + i * n;
        if (bias)
            for (int64_t j = 0; j < n; j++) yi[j] = act_f32(yi[j] + bias[j], act);
        else if (act)
            for (int64_t j = 0; j < n; j++) yi[j] = act_f32(yi[j], act);
    }
    return MGR_KERNEL_OK;
}

const char* mgr_linear_f32_check(const mgr_check_args* x) {
    const int64_t* s = x->ints;
    int64_t mk, nk, mn;
    if (x->n_ints != FIELDS || x->n_floats != 0) return "wants 7 ints and no floats";
    if (s[HAS_BIAS] < 0 || s[HAS_BIAS] > 1 || s[ACT] < ACT_NONE || s[ACT] > ACT_RELU6 ||
        s[THREADS] < 1 || s[TILES] < 0 || s[TILES] > 1)
        return "a flag is out of its range";
    size_t want = 3 + (size_t)s[HAS_BIAS]; /* y is buffer want - 1 */
    const char* buffers = mgr_layer_buffers(x, want);
    if (buffers) return buffers;
    if (!mgr_counts_ok(s, 3)) return "m, n and k make no loop this runtime bounds";
    if (!mgr_muladd(0, s[M], s[K], &mk) ||
        !mgr_muladd(0, s[N], s[K], &nk) || !mgr_muladd(0, s[M], s[N], &mn))
        return "m, n or k is negative or too large";
    if (mk > x->buf_bytes[0] / 4 || nk > x->buf_bytes[1] / 4 || mn > x->buf_bytes[want - 1] / 4 ||
        (s[HAS_BIAS] && s[N] > x->buf_bytes[2] / 4))
        return "m, n or k reach past its buffers' bytes";
    return NULL;
}
