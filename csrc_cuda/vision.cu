// Detection and geometry kernels over NCHW: the point sampler (grid_sample, remap and their
// gradients), region pooling (roi_align, roi_pooling and their gradients) and non-maximum
// suppression, the twins of mgegraph/_kernels/vision.pyx.
//
// Parameters: the CPU's Sample, Roi and Nms structs (kernel_abi/vision.py packs them):
//   sample: x, grid, y;  sample_backward_data: grid, dy, dx;
//   sample_backward_points: x, grid, dy, dgrid       floats [the constant border's value]
//   roi: x, rois, y;  roi_backward: x, rois, dy, dx;  roi_backward_rois: x, rois, dy, drois
//       floats [scale, offset]
//   nms: boxes, scores, keep (int32), workspace (2 n indices)   floats [iou threshold]
//
// Semantics are the CPU kernels': the same operations in double in the same order, so results
// are the CPU's bitwise where the compiler contracts nothing (the host emulation checks it);
// NVRTC may fuse a multiply and an add on a device, within an ulp.
//
// Design: no shared memory, barriers or atomics. Forward passes take a thread per output point
// (sampler) or bin (regions). The scatters run as the CPU runs them: a thread per plane of dx
// (sampler) or per channel (regions) adding in the CPU's order, which is deterministic and
// exact but narrow: a gather form would spread them wider. nms is one thread: its greedy pass
// is sequential, and a detection head keeps few boxes. The sampler is in vision_sample.cuh,
// region pooling in vision_roi.cuh, the volume sampler (grid_sample3d) in vision_sample3d.cuh.
#include "mg_abi.cuh"
#include "movement_index.cuh"

enum { C_ALIGNED, C_UNALIGNED, C_PIXEL };
enum { PAD_NONE, PAD_CLIP, PAD_REFLECT };
enum { I_NEAREST, I_LINEAR, I_CUBIC };
enum { B_CONSTANT, B_REPLICATE, B_REFLECT, B_REFLECT_101, B_WRAP };
enum { R_ALIGN, R_ALIGN_ONNX, R_POOLING };
enum { M_AVERAGE, M_MAX };

struct Sample {
    i64 coord, coord_pad, interp, border, n, c, h, w, oh, ow, threads;
};
struct Roi {
    i64 kind, mode, n, c, h, w, k, oh, ow, sh, sw, threads;
};
struct Nms {
    i64 boxes, max_output;
};

#define MG_FOR_ELEMENTS(count)                                                                \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (count);                    \
         i += (i64)gridDim.x * blockDim.x)

__device__ __forceinline__ bool is_finite(double x) { return fabs(x) <= 1.7976931348623157e308; }
__device__ __forceinline__ double far_clamp(double v) {
    const double far = 4503599627370496.0;  // 2**52: past it every double is an integer
    return v > far ? far : (v < -far ? -far : v);
}
__device__ __forceinline__ i64 imin(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 imax(i64 a, i64 b) { return a > b ? a : b; }

#include "pixels_u8.cuh"
#include "vision_sample.cuh"
#include "vision_roi.cuh"
#include "vision_sample3d.cuh"

// -- nms ---------------------------------------------------------------------------------------
// IoU(a, b) > thresh as MegEngine tests it, without a division (the CPU's overlaps)
template <class T> __device__ bool overlaps(const T* a, const T* b, double thresh) {
    const double w = (a[2] < b[2] ? a[2] : b[2]) - (a[0] > b[0] ? a[0] : b[0]);
    const double h = (a[3] < b[3] ? a[3] : b[3]) - (a[1] > b[1] ? a[1] : b[1]);
    const double inter = (w > 0 ? w : 0) * (h > 0 ? h : 0);
    const double uni = ((double)a[2] - a[0]) * ((double)a[3] - a[1]) +
                       ((double)b[2] - b[0]) * ((double)b[3] - b[1]) - inter;
    return inter > uni * thresh;
}

// 0..n-1 by descending score, ties in index order (the CPU's bottom-up merge sort)
template <class T> __device__ const i64* sorted_order(const T* scores, i64* scratch, i64 n) {
    i64* src = scratch;
    i64* dst = scratch + n;
    for (i64 i = 0; i < n; ++i) src[i] = i;
    for (i64 width = 1; width < n; width *= 2) {
        for (i64 lo = 0; lo < n; lo += 2 * width) {
            const i64 mid = imin(lo + width, n), hi = imin(lo + 2 * width, n);
            i64 i = lo, j = mid;
            for (i64 k = lo; k < hi; ++k) {
                if (j >= hi || (i < mid && !(scores[src[j]] > scores[src[i]])))
                    dst[k] = src[i++];
                else
                    dst[k] = src[j++];
            }
        }
        i64* swap = src;
        src = dst;
        dst = swap;
    }
    return src;
}

template <class T> __device__ void nms(const MgArgs& a) {
    const Nms s = *(const Nms*)a.ints;
    const T* boxes = (const T*)a.bufs[0];
    const T* scores = (const T*)a.bufs[1];
    int* keep = (int*)a.bufs[2];
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (i64 i = 0; i < s.boxes; ++i) {
        bool bad = scores[i] != scores[i];
        for (int j = 0; j < 4; ++j) bad = bad || boxes[4 * i + j] != boxes[4 * i + j];
        if (bad) {
            mg_fail(a, MG_STATUS_BAD_VALUE);
            return;
        }
    }
    const i64* order = sorted_order(scores, (i64*)a.bufs[3], s.boxes);
    i64 kept = 0;
    for (i64 i = 0; i < s.boxes && kept < s.max_output; ++i) {
        bool alive = true;
        for (i64 j = 0; j < kept && alive; ++j)
            alive = !overlaps(boxes + 4 * order[i], boxes + 4 * (i64)keep[j], a.floats[0]);
        if (alive) keep[kept++] = (int)order[i];
    }
    for (i64 i = kept; i < s.max_output; ++i) keep[i] = -1;
}

#define MG_VISION_ENTRIES(T, DT)                                                              \
    extern "C" __global__ void mg_sample_##DT(const MgArgs a) { sample_forward<T>(a); }       \
    extern "C" __global__ void mg_sample_backward_data_##DT(const MgArgs a) {                \
        sample_backward_data<T>(a);                                                            \
    }                                                                                          \
    extern "C" __global__ void mg_sample_backward_points_##DT(const MgArgs a) {              \
        sample_backward_points<T>(a);                                                          \
    }                                                                                          \
    extern "C" __global__ void mg_roi_##DT(const MgArgs a) { roi_forward<T>(a); }             \
    extern "C" __global__ void mg_roi_backward_##DT(const MgArgs a) { roi_backward<T>(a); }   \
    extern "C" __global__ void mg_roi_backward_rois_##DT(const MgArgs a) {                   \
        roi_backward_rois<T>(a);                                                               \
    }                                                                                          \
    extern "C" __global__ void mg_nms_##DT(const MgArgs a) { nms<T>(a); }

MG_VISION_ENTRIES(float, f32)
MG_VISION_ENTRIES(double, f64)
// remap on uint8 images (the CPU's vision_sample_u8.pxi): float32 points, forward only
extern "C" __global__ void mg_sample_u8(const MgArgs a) { sample_forward<u8, float>(a); }

// the volume sampler (vision_sample3d.cuh)
#define MG_VOLUME_ENTRIES(T, DT)                                                              \
    extern "C" __global__ void mg_sample3d_##DT(const MgArgs a) { sample3d_forward<T>(a); }   \
    extern "C" __global__ void mg_sample3d_backward_data_##DT(const MgArgs a) {              \
        sample3d_backward_data<T>(a);                                                          \
    }                                                                                          \
    extern "C" __global__ void mg_sample3d_backward_points_##DT(const MgArgs a) {            \
        sample3d_backward_points<T>(a);                                                        \
    }

MG_VOLUME_ENTRIES(float, f32)
MG_VOLUME_ENTRIES(double, f64)
