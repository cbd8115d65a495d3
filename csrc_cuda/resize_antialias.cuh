// Resize with ONNX's antialias filter, the twin of mgegraph/_kernels/resize_antialias.pxi
// (what it means: mgegraph/ops/resize.py), included by csrc_cuda/resize.cu after its helpers.
//
// The CPU fills a table of each axis's taps; here a thread finds an axis's taps as it needs
// them (a tap count varies with the scale, so no fixed array holds them): first the weights'
// total, then each weight divided by it, the CPU's operations in its order, so results are the
// CPU's bitwise. No shared memory.
#pragma once

__device__ double aa_filter(i64 mode, double d, double a) {
    d = fabs(d);
    if (mode == LINEAR) return d < 1 ? 1 - d : 0.0;
    return d < 2 ? keys(d, a) : 0.0;
}

// One axis of one output index: where its n taps start and how to weigh them
struct WideAxis {
    i64 n, n_in, first;
    double x, stretch, total;
};

__device__ double wide_raw(const Resize& s, const WideAxis& t, i64 k, double a) {
    const i64 p = t.first + k;
    if (s.exclude_outside && !(p >= 0 && p < t.n_in)) return 0;
    return aa_filter(s.mode, (p - t.x) * t.stretch, a);
}

__device__ WideAxis wide_axis(const Resize& s, const double* f, int axis, i64 o) {
    WideAxis t;
    t.n = s.aa_taps[axis], t.n_in = s.in[axis], t.total = 0;
    if (t.n_in == 1) return t;
    t.x = source_coord(s.coord, o, t.n_in, s.out[axis], f[axis], f[3 + axis]);
    t.stretch = f[3 + axis] / f[axis];
    t.stretch = t.stretch > 1 ? 1.0 : t.stretch;
    t.first = (i64)ceil(t.x) - t.n / 2;
    for (i64 k = 0; k < t.n; ++k) t.total += wide_raw(s, t, k, f[6]);
    return t;
}

__device__ __forceinline__ i64 wide_index(const WideAxis& t, i64 k) {
    return t.n_in == 1 ? 0 : clamp_index(t.first + k, t.n_in);
}

__device__ __forceinline__ double wide_weight(const Resize& s, const WideAxis& t, i64 k,
                                              double a) {
    if (t.n_in == 1) return 1.0;
    const double w = wide_raw(s, t, k, a);
    return t.total != 0 ? w / t.total : w;  // no tap inside: all weigh 0 (ONNX's reference)
}

// antialiased resize: a thread per output
template <class T> __device__ void antialias_forward(const MgArgs& a, const Resize& s) {
    const T* x = (const T*)a.bufs[0];
    T* y = (T*)a.bufs[1];
    const double cubic_a = a.floats[6];
    const i64 plane = s.in[0] * s.in[1] * s.in[2];
    const i64 total = s.planes * s.out[0] * s.out[1] * s.out[2];
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (i64)gridDim.x * blockDim.x) {
        const i64 o2 = mg_mod(i, s.out[2]), row = mg_div(i, s.out[2]);
        const i64 o1 = mg_mod(row, s.out[1]), o0 = mg_mod(mg_div(row, s.out[1]), s.out[0]);
        const i64 p = mg_div(row, s.out[1] * s.out[0]);
        const WideAxis t0 = wide_axis(s, a.floats, 0, o0), t1 = wide_axis(s, a.floats, 1, o1),
                       t2 = wide_axis(s, a.floats, 2, o2);
        double acc = 0;
        for (i64 u = 0; u < t0.n; ++u)
            for (i64 v = 0; v < t1.n; ++v) {
                const double w01 = wide_weight(s, t0, u, cubic_a) * wide_weight(s, t1, v, cubic_a);
                const i64 base = p * plane + (wide_index(t0, u) * s.in[1] + wide_index(t1, v)) *
                                                 s.in[2];
                for (i64 c = 0; c < t2.n; ++c)
                    acc += w01 * wide_weight(s, t2, c, cubic_a) * x[base + wide_index(t2, c)];
            }
        y[i] = mg_pixel<T>(acc);
    }
}

// its gradient: a thread per plane scatters its outputs' gradients in the CPU's order
template <class T> __device__ void antialias_backward(const MgArgs& a, const Resize& s) {
    const T* dy = (const T*)a.bufs[0];
    T* dx = (T*)a.bufs[1];
    const double cubic_a = a.floats[6];
    const i64 plane = s.in[0] * s.in[1] * s.in[2], outs = s.out[0] * s.out[1] * s.out[2];
    for (i64 p = (i64)blockIdx.x * blockDim.x + threadIdx.x; p < s.planes;
         p += (i64)gridDim.x * blockDim.x) {
        T* dxp = dx + p * plane;
        for (i64 j = 0; j < plane; ++j) dxp[j] = 0;
        i64 out = p * outs;
        for (i64 o0 = 0; o0 < s.out[0]; ++o0) {
            const WideAxis t0 = wide_axis(s, a.floats, 0, o0);
            for (i64 o1 = 0; o1 < s.out[1]; ++o1) {
                const WideAxis t1 = wide_axis(s, a.floats, 1, o1);
                for (i64 o2 = 0; o2 < s.out[2]; ++o2, ++out) {
                    const WideAxis t2 = wide_axis(s, a.floats, 2, o2);
                    const double g = dy[out];
                    for (i64 u = 0; u < t0.n; ++u)
                        for (i64 v = 0; v < t1.n; ++v) {
                            const double w01 =
                                wide_weight(s, t0, u, cubic_a) * wide_weight(s, t1, v, cubic_a);
                            const i64 base =
                                (wide_index(t0, u) * s.in[1] + wide_index(t1, v)) * s.in[2];
                            for (i64 c = 0; c < t2.n; ++c)
                                dxp[base + wide_index(t2, c)] +=
                                    (T)(w01 * wide_weight(s, t2, c, cubic_a) * g);
                        }
                }
            }
        }
    }
}
