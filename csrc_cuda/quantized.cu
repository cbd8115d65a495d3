// quantized_add (mgegraph/ops/quantized.py): a + b of quantized values, broadcasting as add,
// requantised to the output's scale:
//   clamp(rint(float32(a - za) * ma + float32(b - zb) * mb) + zy, lo, hi)
// with ma = float32(sa) / float32(sy) and mb likewise (computed in float32 by the shared
// lowering, mgegraph/kernel_abi/quantized.py), the two products rounded to float32 and then added:
// no fused multiply-add (__fmul_rn, __fadd_rn), so the integers are the reference's.
//
// ints: the CPU's block (mgegraph/kernel_abi/quantized.py QADD_FIELDS): [a_zero, b_zero,
//        out_zero, low, high, out_code, threads, ndim, shape[ndim], a_strides[ndim],
//        b_strides[ndim], b_code] (the output's collapsed shape, each input's element strides, 0
//        where it broadcasts; low and high the storage range, narrowed to out_zero by relu;
//        threads is the CPU's); floats: [ma, mb]. a's dtype is the entry's (the op dispatches
//        by it). bufs: a, b, y. A grid-stride loop over the output. The conv and linear
//        kernels are rendered per instruction over quantized.cuh (their tables are the text).
#include "quantized.cuh"

__device__ __forceinline__ int mg_q_value(const char* p, mg_q64 i, long long code) {
    return code == MG_Q_UINT8 ? (int)((const unsigned char*)p)[i]
                              : (int)((const signed char*)p)[i];
}

__device__ void quantized_add(const MgArgs& a, long long a_code) {
    const int za = (int)a.ints[0], zb = (int)a.ints[1];
    const MgQOut out = mg_q_out(a.ints[5], a.ints[2], a.ints[3], a.ints[4]);
    const int nd = (int)a.ints[7];
    const long long* shape = a.ints + 8;
    const long long* a_strides = shape + nd;
    const long long* b_strides = a_strides + nd;
    const long long b_code = b_strides[nd];
    const float ma = (float)a.floats[0], mb = (float)a.floats[1];
    mg_q64 total = 1;
    for (int d = 0; d < nd; ++d) total *= shape[d];
    for (mg_q64 i = (mg_q64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (mg_q64)gridDim.x * blockDim.x) {
        mg_q64 rest = i, ia = 0, ib = 0;
        for (int d = nd - 1; d >= 0; --d) {
            const mg_q64 at = rest % shape[d];
            rest /= shape[d];
            ia += at * a_strides[d];
            ib += at * b_strides[d];
        }
        const float pa = mg_q_mul(mg_q_to_float(mg_q_value(a.bufs[0], ia, a_code) - za), ma);
        const float pb = mg_q_mul(mg_q_to_float(mg_q_value(a.bufs[1], ib, b_code) - zb), mb);
        mg_q_store(a.bufs[2], i, mg_q_round(mg_q_add(pa, pb), out), out.out_code);
    }
}

extern "C" __global__ void mg_quantized_add_i8(const MgArgs a) { quantized_add(a, MG_Q_INT8); }
extern "C" __global__ void mg_quantized_add_u8(const MgArgs a) { quantized_add(a, MG_Q_UINT8); }
