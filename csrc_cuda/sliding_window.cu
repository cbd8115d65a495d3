// sliding_window and sliding_window_transpose (mgegraph/ops/sliding_window.py): MegEngine's
// im2col of an (N, C, H, W) image to (N, C, OH, OW, WH, WW) windows, and its adjoint.
//
// Parameters: the CPU's Window struct (mgegraph/_kernels/sliding_window.pyx, packed by
// mgegraph/kernel_abi/sliding_window.py), the same for both ops; no floats, no workspace.
//   sliding_window: x, cols;  sliding_window_transpose: cols, x
//
// Semantics are the CPU kernel's: the transpose sums the taps that read an image cell in the
// windows' order (tap rows and columns descending), in the dtype, each addition rounded as
// written, so results are bitwise the CPU's.
//
// Design: a thread per output element (a window's tap, an image cell), no shared memory and no
// atomics: the transpose gathers instead of scattering.
#include "mg_abi.cuh"
#include "movement_index.cuh"
#include "rounded.cuh"

struct Window {
    i64 planes, height, width, out_h, out_w, kernel_h, kernel_w;
    i64 pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, threads;
};

#define MG_GRID_STRIDE(i, total)                                                              \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (total);                      \
         i += (i64)gridDim.x * blockDim.x)

template <class T> __device__ void window(const MgArgs& a) {
    const Window s = *(const Window*)a.ints;
    const T* x = (const T*)a.bufs[0];
    T* cols = (T*)a.bufs[1];
    MG_GRID_STRIDE(at, s.planes * s.out_h * s.out_w * s.kernel_h * s.kernel_w) {
        i64 rest = at;
        const i64 j = rest % s.kernel_w;
        rest /= s.kernel_w;
        const i64 i = rest % s.kernel_h;
        rest /= s.kernel_h;
        const i64 ow = rest % s.out_w;
        rest /= s.out_w;
        const i64 oh = rest % s.out_h, plane = rest / s.out_h;
        const i64 h = oh * s.stride_h - s.pad_h + i * s.dilation_h;
        const i64 w = ow * s.stride_w - s.pad_w + j * s.dilation_w;
        cols[at] = 0 <= h && h < s.height && 0 <= w && w < s.width
                       ? x[(plane * s.height + h) * s.width + w] : (T)0;
    }
}

// the window index whose tap lands at offset `at` from the padded origin, or -1
__device__ i64 cell_of(i64 at, i64 stride, i64 cells) {
    if (at < 0 || at % stride != 0 || at / stride >= cells) return -1;
    return at / stride;
}

template <class T> __device__ void window_transpose(const MgArgs& a) {
    const Window s = *(const Window*)a.ints;
    const T* cols = (const T*)a.bufs[0];
    T* x = (T*)a.bufs[1];
    const i64 taps = s.kernel_h * s.kernel_w;
    MG_GRID_STRIDE(at, s.planes * s.height * s.width) {
        const i64 w = at % s.width, h = at / s.width % s.height, plane = at / s.width / s.height;
        const T* windows = cols + plane * s.out_h * s.out_w * taps;
        T acc = 0;
        for (i64 i = s.kernel_h - 1; i >= 0; --i) {
            const i64 oh = cell_of(h + s.pad_h - i * s.dilation_h, s.stride_h, s.out_h);
            if (oh < 0) continue;
            for (i64 j = s.kernel_w - 1; j >= 0; --j) {
                const i64 ow = cell_of(w + s.pad_w - j * s.dilation_w, s.stride_w, s.out_w);
                if (ow >= 0) acc = mg_add(acc, windows[((oh * s.out_w + ow) * s.kernel_h + i)
                                                       * s.kernel_w + j]);
            }
        }
        x[at] = acc;
    }
}

#define WINDOW_ENTRIES(T, DT)                                                                 \
    extern "C" __global__ void mg_sliding_window_##DT(const MgArgs a) { window<T>(a); }       \
    extern "C" __global__ void mg_sliding_window_transpose_##DT(const MgArgs a) {             \
        window_transpose<T>(a);                                                               \
    }

WINDOW_ENTRIES(float, f32)
WINDOW_ENTRIES(double, f64)
