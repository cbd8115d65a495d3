// The calling convention of every mgegraph CUDA kernel, hand-written or rendered.
//
// Design: a kernel takes one MgArgs by value, the device twin of the CPU's `Call`
// (mgegraph/_kernels/abi.pxd): buffer pointers (inputs, then outputs, then the workspace, in
// the instruction's order), the integer and float parameter blocks a lowering packed (the
// same `Launch.ints` / `Launch.floats` the CPU kernel of the op reads, wherever the layouts
// agree), and their counts. By value, so a launch needs no device copy of its parameters and
// a CUDA graph captures them; 744 bytes, far under the 4 KiB kernel parameter limit.
//
// Errors: a kernel cannot return a status as the CPU's do, so it records one in the plan's
// status word (`status`, 8 bytes the runtime zeroes before every run and reads back after it)
// through mg_fail, with the CPU's codes (mgegraph/_kernels/abi.pxd); the run then raises the
// CPU's KernelError naming instruction `index`. The first failure of a run wins.
//
// Entry points are `extern "C" __global__ void mg_<kernel>(const MgArgs a)`, where <kernel>
// is the backend's kernel name (mgegraph.backend.kernel_name: "unary_f32", ...) or a named
// step of it ("reduce_sum_f32_pass1"), so the host finds them by name in the module.
#pragma once

#define MG_MAX_BUFS 16
#define MG_MAX_INTS 64
#define MG_MAX_FLOATS 8

struct MgArgs {
    char* bufs[MG_MAX_BUFS];
    long long ints[MG_MAX_INTS];
    double floats[MG_MAX_FLOATS];
    long long n_bufs;
    long long n_ints;
    long long n_floats;
    unsigned long long* status;  // the plan's status word (null: nowhere to report)
    long long index;             // the instruction's index in the plan
};

// The CPU kernels' status codes (mgegraph/_kernels/abi.pxd; a test keeps them equal)
#define MG_STATUS_INDEX_OUT_OF_RANGE 1
#define MG_STATUS_BAD_VALUE 2
#define MG_STATUS_UNSUPPORTED 3
#define MG_STATUS_NEGATIVE_POWER 4
#define MG_STATUS_NOT_A_NUMBER 5
#define MG_STATUS_OUT_OF_MEMORY 6
#define MG_STATUS_TIMED_OUT 7
#define MG_STATUS_COLLECTIVE_FAILED 8

// The word of a failure: (instruction index + 1) << 8 | code, so 0 means none
#if defined(__CUDACC__)
__device__ __forceinline__ void mg_fail(const MgArgs& a, int code) {
    if (a.status != nullptr)
        atomicCAS(a.status, 0ull, ((unsigned long long)(a.index + 1) << 8) | (unsigned)code);
}
#elif defined(MG_HOST_EMU)
// host emulation: threads (and fibers) run one at a time, so a plain compare-and-set
inline void mg_fail(const MgArgs& a, int code) {
    if (a.status != nullptr && *a.status == 0)
        *a.status = ((unsigned long long)(a.index + 1) << 8) | (unsigned)code;
}
#endif
