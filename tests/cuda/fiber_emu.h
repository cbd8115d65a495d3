// Host emulation of CUDA blocks that cooperate: every thread of a block is a fiber (ucontext),
// and __syncthreads() and the warp shuffles switch to a scheduler that resumes the waiting
// threads once all of the block (of the warp) arrived. Included after csrc_cuda/host_emu.h
// (tests/cuda/host_emu.py builds the kernel with it) by tests/cuda/kernel_checks.py, which
// replaces host_emu.h's launcher with mg_fiber_launch, so kernels with shared memory, barriers
// and shuffles run on the host with their real launch geometry, one block at a time.
#pragma once
#include <ucontext.h>

#include "mg_abi.cuh"

#include <cstdlib>
#include <cstring>
#include <vector>

// set when a block deadlocked (kernel_checks.emulate reads it and fails the test)
extern "C" int mg_fiber_failed;
int mg_fiber_failed = 0;

namespace mg_fiber {
enum State { RUN, WAIT_BLOCK, WAIT_WARP, DONE };
struct Fiber {
    ucontext_t ctx;
    dim3 tid;
    State state;
    unsigned long long slot;  // a value offered to the warp's shuffle
};
static ucontext_t scheduler;
static std::vector<Fiber> fibers;
static std::vector<char> stacks;
static int current;
static void (*kernel)(const MgArgs);
static const MgArgs* args;
const size_t STACK = 256 * 1024;

static void wait(State s) {
    fibers[current].state = s;
    swapcontext(&fibers[current].ctx, &scheduler);
}

static void entry() {
    kernel(*args);
    fibers[current].state = DONE;  // uc_link returns to the scheduler
}

// Release the waiters whose barrier is complete; false when none could be (a deadlock).
static bool release(int threads) {
    bool any = false;
    for (int w = 0; w * 32 < threads; ++w) {  // a warp whose live lanes all wait at a shuffle
        bool all = true, some = false;
        for (int t = w * 32; t < threads && t < w * 32 + 32; ++t) {
            if (fibers[t].state == DONE) continue;
            some = true;
            all = all && fibers[t].state == WAIT_WARP;
        }
        if (all && some) {
            for (int t = w * 32; t < threads && t < w * 32 + 32; ++t)
                if (fibers[t].state == WAIT_WARP) fibers[t].state = RUN;
            any = true;
        }
    }
    if (any) return true;
    bool all = true;
    for (int t = 0; t < threads; ++t)
        all = all && (fibers[t].state == DONE || fibers[t].state == WAIT_BLOCK);
    if (!all) return false;
    for (int t = 0; t < threads; ++t)
        if (fibers[t].state == WAIT_BLOCK) fibers[t].state = RUN, any = true;
    return any;
}

static void run_block(dim3 block) {
    const int threads = (int)(block.x * block.y * block.z);
    fibers.assign(threads, Fiber());
    stacks.resize(STACK * threads);
    for (int t = 0; t < threads; ++t) {
        Fiber& f = fibers[t];
        f.tid = dim3{t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        f.state = RUN;
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = &stacks[STACK * t];
        f.ctx.uc_stack.ss_size = STACK;
        f.ctx.uc_link = &scheduler;
        makecontext(&f.ctx, entry, 0);
    }
    for (;;) {
        bool live = false;
        for (int t = 0; t < threads; ++t) {
            if (fibers[t].state != RUN) continue;
            current = t;
            threadIdx = fibers[t].tid;
            swapcontext(&scheduler, &fibers[t].ctx);
        }
        for (int t = 0; t < threads; ++t) live = live || fibers[t].state != DONE;
        if (!live) return;
        if (!release(threads)) {  // threads wait at barriers that never complete
            mg_fiber_failed = 1;
            return;
        }
    }
}
}  // namespace mg_fiber

#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
// the vector types of a kernel's 16-byte loads that host_emu.h leaves out
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) longlong2 { long long x, y; };
inline void __syncthreads() { mg_fiber::wait(mg_fiber::WAIT_BLOCK); }

template <class T> T __shfl_xor_sync(unsigned, T v, int lane_mask) {
    using namespace mg_fiber;
    static_assert(sizeof(T) <= 8, "one slot per lane");
    const int me = current;
    std::memcpy(&fibers[me].slot, &v, sizeof(T));
    wait(WAIT_WARP);  // every lane has offered its value
    T r;
    std::memcpy(&r, &fibers[me ^ lane_mask].slot, sizeof(T));
    wait(WAIT_WARP);  // every lane has read before any offers again
    return r;
}

using std::exp; using std::isnan; using std::log; using std::sqrt;

#undef MG_EMU_DEFINE_LAUNCH
#define MG_EMU_DEFINE_LAUNCH                                                                 \
    extern "C" void mg_emu_launch(void (*k)(const MgArgs), const MgArgs* a,                 \
                                  const unsigned int* grid, const unsigned int* block) {    \
        mg_fiber::kernel = k;                                                                \
        mg_fiber::args = a;                                                                  \
        gridDim = dim3{grid[0], grid[1], grid[2]};                                          \
        blockDim = dim3{block[0], block[1], block[2]};                                      \
        for (unsigned bz = 0; bz < grid[2]; ++bz)                                           \
        for (unsigned by = 0; by < grid[1]; ++by)                                           \
        for (unsigned bx = 0; bx < grid[0]; ++bx) {                                         \
            blockIdx = dim3{bx, by, bz};                                                    \
            mg_fiber::run_block(blockDim);                                                  \
        }                                                                                   \
    }
