/* The calling convention between the C runtime and its kernels: the Call of
 * mgegraph/_kernels/abi.pxd (buffer pointers, then the ints and floats of the parameter block
 * the Python lowering packed), and each kernel's check of that block against the sizes of the
 * buffers it is given, which the loader runs once per instruction. */
#ifndef MGR_KERNEL_H
#define MGR_KERNEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char** bufs;          /* inputs, then outputs, then the workspace (when the op has one) */
    const int64_t* ints;  /* the parameter block, as the lowering laid it out */
    const double* floats;
} mgr_call;

/* what a check sees of one instruction: its buffers' sizes and dtypes, its block, and the
 * bytes of those buffers that are the model's weights (NULL for the others: their bytes are
 * made at run time), for a check of what a kernel trusts in them (packed int8 weights' flags) */
typedef struct {
    size_t n_bufs;
    const int64_t* buf_bytes;
    const int64_t* buf_dtypes;
    size_t n_ints;
    const int64_t* ints;
    size_t n_floats;
    const double* floats;
    const char* const* buf_weights;
} mgr_check_args;

/* a kernel: 0, or a status as kernel_abi/status.py's */
typedef int (*mgr_kernel_fn)(const mgr_call* call);
/* a check: NULL when the instruction is safe to run, else what is wrong (static text) */
typedef const char* (*mgr_check_fn)(const mgr_check_args* args);

typedef struct {
    const char* name;   /* the plan's kernel name ("matmul_f32") or a generated one */
    mgr_kernel_fn run;
    mgr_check_fn check;
} mgr_kernel;

/* the model's table (model_kernels.c, generated): only the kernels its plan calls */
extern const mgr_kernel mgr_kernels[];
extern const size_t mgr_n_kernels;

enum { MGR_KERNEL_OK = 0, MGR_KERNEL_INDEX_OUT_OF_RANGE = 1, MGR_KERNEL_BAD_VALUE = 2,
       MGR_KERNEL_UNSUPPORTED = 3, MGR_KERNEL_OUT_OF_MEMORY = 6 /* its scratch memory */ };

/* part(ctx, lo, hi) over [0, n) in contiguous runs, one per thread of the running model
 * (mgr_set_threads; mgr_threads.c): a kernel whose parts write disjoint outputs, each computed
 * as one thread would, gives the same bits on any thread count */
typedef void (*mgr_part_fn)(void* ctx, int64_t lo, int64_t hi);
void mgr_parallel_for(int64_t n, mgr_part_fn part, void* ctx);
/* the same on at most `most` threads: a kernel whose work pays for fewer threads than the model
 * has (grain.h's rule, the Python executor's) wakes no more */
void mgr_parallel_for_upto(int64_t n, int64_t most, mgr_part_fn part, void* ctx);
/* the same threads, each unit of [0, n) a part of its own, taken in order by whichever thread is
 * free: for a few units of even cost (a GEMV's parts of k), where a worker woken late should
 * take fewer than its share (the caller waits for no part that has not started) */
void mgr_parallel_for_each(int64_t n, int64_t most, mgr_part_fn part, void* ctx);
#ifdef MGR_PROFILE
/* the most parts one mgr_parallel_for of this thread split into since the last call (0: none
 * ran), then forgotten: mgr_run reads it after each instruction */
int mgr_take_parts(void);
#endif
/* the threads this thread's mgr_parallel_for calls split over (mgr_run sets its model's) */
void mgr_set_run_threads(int threads);
/* that count: a kernel may shape its work items by it (the bits must not depend on it) */
int mgr_run_threads(void);

/* a + b * c without overflow into *out (all non-negative); 0 when it would overflow */
static inline int mgr_muladd(int64_t a, int64_t b, int64_t c, int64_t* out) {
    if (a < 0 || b < 0 || c < 0) return 0;
    if (b != 0 && c > (INT64_MAX - a) / b) return 0;
    *out = a + b * c;
    return 1;
}

/* Loop counts a kernel may run: each non-negative, their product without overflow; when the
 * product is zero (an empty tensor) each at most MGR_EMPTY_DIM, so no loop over the others of an
 * empty tensor spins for long (a hostile blob's 2^62 rows of nothing). */
#define MGR_EMPTY_DIM ((int64_t)1 << 20)
static inline int mgr_counts_ok(const int64_t* dims, int n) {
    int64_t product = 1;
    for (int d = 0; d < n; d++)
        if (!mgr_muladd(0, product, dims[d], &product)) return 0;
    for (int d = 0; product == 0 && d < n; d++)
        if (dims[d] > MGR_EMPTY_DIM) return 0;
    return 1;
}

/* A layer's buffers x, w, [bias,] y[, workspace]: the ``want`` before the workspace float32
 * (conv2d and linear share this layout). NULL where they are so, else what is wrong. */
static inline const char* mgr_layer_buffers(const mgr_check_args* x, size_t want) {
    if (x->n_bufs != want && x->n_bufs != want + 1)
        return "wants buffers x, w, [bias,] y[, workspace]";
    for (size_t b = 0; b < want; b++)
        if (x->buf_dtypes[b] != 0) return "reads and writes float32 only";
    return NULL;
}

#endif
