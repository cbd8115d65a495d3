// The calling convention of every mgegraph CUDA kernel, hand-written or rendered.
//
// Design: a kernel takes one MgArgs by value, the device twin of the CPU's `Call`
// (mgegraph/_kernels/abi.pxd): buffer pointers (inputs, then outputs, then the workspace, in
// the instruction's order), the integer and float parameter blocks a lowering packed (the
// same `Launch.ints` / `Launch.floats` the CPU kernel of the op reads, wherever the layouts
// agree), and their counts. By value, so a launch needs no device copy of its parameters and
// a CUDA graph captures them; 728 bytes, far under the 4 KiB kernel parameter limit.
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
};
