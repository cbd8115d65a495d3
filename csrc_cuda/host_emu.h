// Host emulation: a CUDA kernel WITHOUT shared memory, barriers or warp intrinsics, compiled as
// C++ by g++ and run on the CPU, so that its semantics are checked in CI without a GPU.
//
// Included before the kernel's source (g++ -include host_emu.h). `__global__` and
// `__device__` become ordinary (inline) functions; threadIdx, blockIdx, blockDim and gridDim are
// thread-local globals that mg_emu_launch sets while it calls the kernel once per (block,
// thread), blocks and threads in order. The bit casts and math builtins a kernel uses are given
// their host meaning. What a kernel may not use is left undefined on purpose (__syncthreads,
// __shared__, __shfl_*_sync, atomics): such a kernel fails to compile here, so it waits for a
// GPU test instead of running wrongly.
#pragma once
#ifdef __CUDACC__
#error "host_emu.h is for host (g++) builds only"
#endif

#define MG_HOST_EMU 1  // mg_abi.cuh's mg_fail without device atomics

#include <cmath>
#include <cstdint>
#include <cstring>

struct dim3 {
    unsigned int x, y, z;
};

static thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__ inline
#define __host__
#define __forceinline__
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __grid_constant__

static inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
static inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
static inline long long __double_as_longlong(double x) {
    long long r; std::memcpy(&r, &x, 8); return r;
}
static inline double __longlong_as_double(long long x) {
    double r; std::memcpy(&r, &x, 8); return r;
}

struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };

using std::sqrt; using std::floor; using std::ceil; using std::fmod; using std::copysign;
using std::sin; using std::cos; using std::pow; using std::erf; using std::fabs;

// After the kernel's source, MG_EMU_DEFINE_LAUNCH defines mg_emu_launch, which calls `kernel`
// once per (block, thread) of the grid: blocks in order, threads in order.
#define MG_EMU_DEFINE_LAUNCH                                                                 \
    extern "C" void mg_emu_launch(void (*kernel)(const MgArgs), const MgArgs* args,         \
                                  const unsigned int* grid, const unsigned int* block) {    \
        gridDim = dim3{grid[0], grid[1], grid[2]};                                          \
        blockDim = dim3{block[0], block[1], block[2]};                                      \
        for (unsigned bz = 0; bz < grid[2]; ++bz)                                           \
        for (unsigned by = 0; by < grid[1]; ++by)                                           \
        for (unsigned bx = 0; bx < grid[0]; ++bx)                                           \
        for (unsigned tz = 0; tz < block[2]; ++tz)                                          \
        for (unsigned ty = 0; ty < block[1]; ++ty)                                          \
        for (unsigned tx = 0; tx < block[0]; ++tx) {                                        \
            blockIdx = dim3{bx, by, bz};                                                    \
            threadIdx = dim3{tx, ty, tz};                                                   \
            kernel(*args);                                                                  \
        }                                                                                   \
    }
