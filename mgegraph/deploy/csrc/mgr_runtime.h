/* mgegraph's C runtime: loads a plan exported by mgegraph.deploy.export_c (model.mgr) and runs
 * it. The blob format and what the loader checks are in docs/c_runtime.md; the kernel table is
 * generated per model (model_kernels.c). */
#ifndef MGR_RUNTIME_H
#define MGR_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum mgr_status {
    MGR_OK = 0,
    MGR_BAD_BLOB = 1,      /* the blob breaks the format or a kernel's parameter checks */
    MGR_NO_MEMORY = 2,
    MGR_BAD_ARGUMENT = 3,  /* an index, size or pointer passed to the API is wrong */
    MGR_KERNEL_FAILED = 4, /* a kernel returned a status: the message names the instruction */
    MGR_IO = 5             /* a file could not be read or written */
};

enum mgr_dtype {
    MGR_FLOAT32 = 0, MGR_FLOAT64 = 1, MGR_INT32 = 2, MGR_INT64 = 3, MGR_UINT8 = 4, MGR_INT8 = 5,
    MGR_BOOL = 6, MGR_INT16 = 7, MGR_N_DTYPES = 8
};

#define MGR_MAX_NDIM 8

typedef struct mgr_model mgr_model;

/* Loading: the blob is checked whole before anything runs; NULL on failure (mgr_last_error). */
mgr_model* mgr_load_file(const char* path);
mgr_model* mgr_load_memory(const void* blob, size_t nbytes); /* copies the blob */
void mgr_free(mgr_model* model);

/* The last failure's message on this thread ("" when none). */
const char* mgr_last_error(void);

size_t mgr_input_count(const mgr_model* model);
size_t mgr_output_count(const mgr_model* model);
/* Names, dtypes and shapes of input / output i (NULL, -1 or 0 for an index out of range). */
const char* mgr_input_name(const mgr_model* model, size_t i);
const char* mgr_output_name(const mgr_model* model, size_t i);
int mgr_input_dtype(const mgr_model* model, size_t i);
int mgr_output_dtype(const mgr_model* model, size_t i);
int mgr_input_ndim(const mgr_model* model, size_t i);
int mgr_output_ndim(const mgr_model* model, size_t i);
const int64_t* mgr_input_shape(const mgr_model* model, size_t i);
const int64_t* mgr_output_shape(const mgr_model* model, size_t i);
size_t mgr_input_nbytes(const mgr_model* model, size_t i);
size_t mgr_output_nbytes(const mgr_model* model, size_t i);
/* The index of the input / output named `name`, or -1. */
long mgr_input_index(const mgr_model* model, const char* name);
long mgr_output_index(const mgr_model* model, const char* name);

/* Input i by copy into the model's own buffer, or by pointer (read where it lies during runs
 * until set again; the caller keeps it alive). `nbytes` must be the input's. */
int mgr_set_input(mgr_model* model, size_t i, const void* data, size_t nbytes);
int mgr_set_input_ptr(mgr_model* model, size_t i, const void* data, size_t nbytes);

/* Threads the kernels may use (at least 1). This step runs every kernel on one thread; the
 * count is kept for the pool to come (the kernels' bits do not depend on it). */
int mgr_set_threads(mgr_model* model, int threads);
int mgr_threads(const mgr_model* model);

/* Run every instruction in order. */
int mgr_run(mgr_model* model);

#ifdef MGR_PROFILE
/* A build with -DMGR_PROFILE times each instruction of every run (two clock reads each): the
 * last run's nanoseconds of instruction i, -1 for an index out of range. For profiling only
 * (benchmarks/c_runtime.py --layers); the default build has neither the clock nor this. */
int64_t mgr_instruction_ns(const mgr_model* model, size_t i);
/* the most threads one parallel loop of instruction i ran on in the last run (0: it has none,
 * 1: it kept to the calling thread), -1 for an index out of range: the tests check the threads'
 * rule with it (grain.h) */
int mgr_instruction_parts(const mgr_model* model, size_t i);
#endif

/* Output i after a run: the model's buffer, valid until the next run or mgr_free. */
const void* mgr_output(const mgr_model* model, size_t i);

/* bytes of one element of a dtype code, 0 for an unknown one */
size_t mgr_dtype_size(int dtype);
/* the NumPy name of a dtype code ("float32"), NULL for an unknown one */
const char* mgr_dtype_name(int dtype);

#ifdef __cplusplus
}
#endif

#endif
