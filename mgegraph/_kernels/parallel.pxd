# The one thread policy of the CPU kernels: how many threads an instruction runs on, and the
# loop that runs its independent parts on them (implemented in parallel.pyx; see its Design).
#
# Use from any kernel module (no -fopenmp needed there: the parallel region lives in
# parallel.pyx):
#
#     from .parallel cimport parallel_for, part_fn
#
#     cdef int rows(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
#         ...  # outputs [lo, hi) of the instruction whose state ctx points at; a status
#     ...
#     return parallel_for(params.threads, n_outputs, rows, &state)
#
# and in the lowering ``parallel.threads_for(work)`` for the parameter block's threads field.

# A part of an instruction: the units [lo, hi) of its work, returning a kernel status; `part`
# (0 .. threads - 1, the thread that runs it) can index per-thread scratch in a workspace.
ctypedef int (*part_fn)(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil

cdef enum:
    MAX_TEAM = 64  # the most threads one instruction runs on (its statuses live on the stack)

cpdef int max_threads() noexcept nogil
cdef int team(Py_ssize_t planned, Py_ssize_t units) noexcept nogil
cdef int parallel_for(Py_ssize_t planned, Py_ssize_t units, part_fn fn, void* ctx) noexcept nogil


cdef inline Py_ssize_t cut(Py_ssize_t n, Py_ssize_t parts, Py_ssize_t i) noexcept nogil:
    # where part i of n units cut into `parts` contiguous parts begins (part i ends at cut(i + 1))
    return n * i // parts
