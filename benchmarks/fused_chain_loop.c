/* fusion-chain as ONE loop over the elements: relu(x * a + b) * c - tanh(x) / (1 + exp(-x)),
 * with scalar.pxd's float32 vexpf and vtanhf written out in C (same operations in the same
 * order; built without FP contraction, like the kernels), so its results are the fused
 * kernel's bit for bit. benchmarks/test_fused_kernel.py compiles it with the system C compiler
 * and times it beside the kernel: what the blocked evaluator (one pass over a block per step)
 * costs against code generated for this one expression. A benchmark reference only; keep the
 * math in step with scalar.pxd (the benchmark checks the bits). */
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float f32_from_bits(int32_t b) { float o; memcpy(&o, &b, 4); return o; }
static inline int32_t f32_bits(float x) { int32_t o; memcpy(&o, &x, 4); return o; }

static inline float vexpf(float x) {
    float c = x < (float)88.72283935546875 ? x : (float)88.72283935546875;
    c = c > (float)-104.0 ? c : (float)-104.0;
    float t = c * (float)1.44269504088896341 + (float)12582912.0;
    float n = t - (float)12582912.0;
    int32_t ni = f32_bits(t) - f32_bits((float)12582912.0);
    int32_t n1 = ni >> 1;
    float r = c - n * (float)0.693359375 + n * (float)2.12194440e-4;
    float r2 = r * r;
    float p = (((float)5.0000001201e-1 + (float)1.6666665459e-1 * r)
               + ((float)4.1665795894e-2 + (float)8.3334519073e-3 * r) * r2)
        + ((float)1.3981999507e-3 + (float)1.9875691500e-4 * r) * (r2 * r2);
    float y = (p * r2 + r + (float)1.0) * f32_from_bits((n1 + 127) << 23);
    y = y * f32_from_bits((ni - n1 + 127) << 23);
    return x < (float)88.72283935546875 ? y : x + (float)INFINITY;
}

static inline float vtanhf(float x) {
    float a = fabsf(x);
    float z = x * x;
    float z2 = z * z;
    float p = (((float)4.89352455891786e-03 + (float)6.37261928875436e-04 * z)
               + ((float)1.48572235717979e-05 + (float)5.12229709037114e-08 * z) * z2)
        + ((-(float)8.60467152213735e-11 + (float)2.00018790482477e-13 * z)
           - (float)2.76076847742355e-16 * z2) * (z2 * z2);
    float q = ((float)4.89352518554385e-03 + (float)2.26843463243900e-03 * z)
        + ((float)1.18534705686654e-04 + (float)1.19825839466702e-06 * z) * z2;
    float y = p * x / q;
    y = a < (float)7.90531110763549805 ? y : copysignf((float)1.0, x);
    return a > (float)0.0004 ? y : x;
}

void fusion_chain(const float* x, const float* a, const float* b, const float* c, float* out,
                  long n, int threads) {
    long i;
    (void)threads;  /* without OpenMP: one thread */
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (i = 0; i < n; i++) {
        float s = x[i] * a[i] + b[i];
        float left = (s <= 0 ? 0 : s) * c[i];
        out[i] = left - vtanhf(x[i]) / ((float)1.0 + vexpf(-x[i]));
    }
}
