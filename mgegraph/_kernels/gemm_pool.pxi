# The seam through which gemm_tile.h (and conv_data_gemm.h over it) runs its parts: at most
# `most` of the executor's threads, by parallel_for. Included by linalg.pyx and conv.pyx (through
# conv_gemm.pxi), each after its extern block declares mg_gemm_part_fn.

ctypedef struct PoolCall:  # a gemm_tile.h part run by parallel_for
    mg_gemm_part_fn part
    void* ctx


cdef int pool_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const PoolCall* p = <const PoolCall*>ctx
    p.part(p.ctx, lo, hi)
    return KERNEL_OK


cdef void pool_run(int64_t n, int64_t most, mg_gemm_part_fn part, void* ctx) noexcept nogil:
    cdef PoolCall p
    p.part, p.ctx = part, ctx
    parallel_for(most, n, pool_part, &p)
