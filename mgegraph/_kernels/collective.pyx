# The collectives of a plan (mgegraph/ops/collective.py): all_reduce, all_reduce_start and
# all_reduce_wait, over MPI, from the executor's C loop without the GIL.
#
# Parameter layout: the ints are the Collective struct below (COLLECTIVE_FIELDS, packed by name
# by mgegraph/_kernels/lowering/collective.py); floats[0] is the scale. Buffers:
#   all_reduce:        x, y                         (y = scale * sum over the ranks of x)
#   all_reduce_start:  g1..gk, request              (g1 is the bucket's first byte)
#   all_reduce_wait:   request, g1..gk, g1..gk      (the outputs are the inputs' own bytes)
#
# Design: this module links no MPI. The plan's lowering finds, in the MPI library mpi4py has
# loaded, the addresses of MPI_Iallreduce and MPI_Test and the handles of the group's
# communicator, the datatype and MPI_SUM (mgegraph.communicator.mpi_abi), and writes them into
# the parameter block as integers; the kernels call through them. That needs the MPI's binary
# interface to be known here: MPICH's (the mpich wheel, and Intel MPI, MVAPICH: libmpi.so.12),
# whose handles are C ints, MPI_IN_PLACE is (void*)-1 and MPI_STATUS_IGNORE (MPI_Status*)1;
# another MPI is refused when the plan is lowered, naming it. The start reduces the bucket in
# place (MPI_IN_PLACE: no copy) and leaves the request in its output; the wait polls MPI_Test
# back to back for spin_ns (communicator.WAIT_SPIN: MPICH moves a message in steps, each only
# inside an MPI call, so a sleep between tests delays every step), calling sched_yield between
# (another process that wants the core gets it), then sleeping up to a millisecond between
# tests (a rank that late must not hold the core), until the communicator's timeout, then
# returns KERNEL_TIMED_OUT, which the run raises as a CollectiveTimeout. MPICH moves a
# request's messages only inside MPI calls, so the executor calls all_reduce_progress on each
# start's Call at the check points between the start and its wait (CpuExecutable's progress
# list): one MPI_Test of the request, which advances it (and every other pending request) and
# leaves MPI_REQUEST_NULL in the token once it completed, which the wait's first test then
# returns at once. The sum is MPI's, in the order its algorithm picks for the group's size
# (the same on every rank); the scale (1/N for a mean) is one multiplication per element
# afterwards.
#
# Design: the deterministic all_reduce (its op's ``deterministic``) sums in rank order, whatever
# MPI's algorithm: MPI_Iallgather of every rank's values into a scratch buffer of ranks * count
# elements (allocated per call: a status 7 if it cannot be), then y = ((x0 + x1) + x2) + ... on
# every rank, element by element, then the scale. It moves N times the bytes of MPI's sum and
# is blocking (no bucket, no overlap): the price of the fixed order.

from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, nanosleep, timespec

from .abi cimport (Call, KERNEL_COLLECTIVE_FAILED, KERNEL_OK, KERNEL_OUT_OF_MEMORY,
                   KERNEL_TIMED_OUT, kernel_address)
from .params cimport fields_of

cdef extern from "<sched.h>" nogil:
    int sched_yield()

ctypedef int (*iallreduce_fn)(const void* send, void* recv, int count, int datatype, int op,
                              int comm, int* request) noexcept nogil
ctypedef int (*iallgather_fn)(const void* send, int send_count, int send_type, void* recv,
                              int recv_count, int recv_type, int comm,
                              int* request) noexcept nogil
ctypedef int (*test_fn)(int* request, int* flag, void* status) noexcept nogil

ctypedef struct Collective:
    Py_ssize_t iallreduce, test   # addresses of MPI_Iallreduce and MPI_Test
    Py_ssize_t comm, datatype, op  # MPICH handles (C ints)
    Py_ssize_t count              # elements reduced (a bucket's padding included)
    Py_ssize_t timeout_ns         # how long a wait waits for the other ranks
    Py_ssize_t itemsize           # bytes per element: 4 or 8
    Py_ssize_t is_float           # floating-point elements (the scale applies; integers: 1)
    Py_ssize_t members            # the values of a bucket (its start's and wait's inputs)
    Py_ssize_t iallgather         # address of MPI_Iallgather (the deterministic all_reduce)
    Py_ssize_t ranks              # the group's size
    Py_ssize_t deterministic      # sum in rank order (all_reduce only)
    Py_ssize_t spin_ns            # how long a wait tests back to back before it sleeps

cdef Collective _c
COLLECTIVE_FIELDS = fields_of(_c, sizeof(Collective))

cdef void* MPI_IN_PLACE = <void*><Py_ssize_t>-1
cdef void* MPI_STATUS_IGNORE = <void*><Py_ssize_t>1


cdef inline int64_t _now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef int _wait(const Collective* s, int* request) noexcept nogil:
    cdef int flag = 0
    cdef int64_t now = _now_ns(), delay = 0
    cdef int64_t deadline = now + s.timeout_ns, spin_until = now + s.spin_ns
    cdef timespec pause
    while True:
        if (<test_fn>s.test)(request, &flag, MPI_STATUS_IGNORE) != 0:
            return KERNEL_COLLECTIVE_FAILED
        if flag:
            return KERNEL_OK
        now = _now_ns()
        if now > deadline:
            return KERNEL_TIMED_OUT
        if now < spin_until:
            sched_yield()
            continue
        pause.tv_sec, pause.tv_nsec = 0, delay
        nanosleep(&pause, NULL)
        delay = min(2 * delay + 10000, 1000000)


cdef void _scale(const Call* c, char* data) noexcept nogil:
    cdef const Collective* s = <const Collective*>c.ints
    cdef double k = c.floats[0]
    cdef Py_ssize_t i
    if not s.is_float or k == 1.0:
        return
    if s.itemsize == 8:
        for i in range(s.count):
            (<double*>data)[i] *= k
    else:
        for i in range(s.count):
            (<float*>data)[i] = <float>((<float*>data)[i] * <float>k)


cdef int _start(const Collective* s, const void* send, void* recv, int* request) noexcept nogil:
    if (<iallreduce_fn>s.iallreduce)(send, recv, <int>s.count, <int>s.datatype, <int>s.op,
                                     <int>s.comm, request) != 0:
        return KERNEL_COLLECTIVE_FAILED
    return KERNEL_OK


cdef void _sum_in_rank_order(const Collective* s, const char* gathered,
                             char* out) noexcept nogil:
    # out = ((x0 + x1) + x2) + ...: for each element the ranks in order (the loop over
    # elements inside, so vectorising it never reorders a sum)
    cdef Py_ssize_t r, i, n = s.count
    memcpy(out, gathered, n * s.itemsize)
    for r in range(1, s.ranks):
        if s.is_float and s.itemsize == 8:
            for i in range(n):
                (<double*>out)[i] += (<const double*>gathered)[r * n + i]
        elif s.is_float:
            for i in range(n):
                (<float*>out)[i] = (<float*>out)[i] + (<const float*>gathered)[r * n + i]
        elif s.itemsize == 8:
            for i in range(n):
                (<int64_t*>out)[i] += (<const int64_t*>gathered)[r * n + i]
        else:
            for i in range(n):
                (<int32_t*>out)[i] += (<const int32_t*>gathered)[r * n + i]


cdef int _all_reduce_in_rank_order(const Collective* s, const void* x, void* y) noexcept nogil:
    cdef int request = 0
    cdef int status = KERNEL_OK
    cdef char* gathered = <char*>malloc(s.ranks * s.count * s.itemsize)
    if gathered == NULL:
        return KERNEL_OUT_OF_MEMORY
    if (<iallgather_fn>s.iallgather)(x, <int>s.count, <int>s.datatype, gathered, <int>s.count,
                                     <int>s.datatype, <int>s.comm, &request) != 0:
        status = KERNEL_COLLECTIVE_FAILED
    else:
        status = _wait(s, &request)
        if status != KERNEL_OK:  # MPI may still write into it: left allocated, the job ends
            return status
        _sum_in_rank_order(s, gathered, <char*>y)
    free(gathered)
    return status


cdef int all_reduce(const Call* c) noexcept nogil:
    cdef const Collective* s = <const Collective*>c.ints
    cdef int request = 0
    cdef int status
    if s.iallreduce == 0:  # a group of one process: the sum is the value
        memcpy(c.bufs[1], c.bufs[0], s.count * s.itemsize)
        _scale(c, c.bufs[1])
        return KERNEL_OK
    if s.deterministic:
        status = _all_reduce_in_rank_order(s, c.bufs[0], c.bufs[1])
        if status == KERNEL_OK:
            _scale(c, c.bufs[1])
        return status
    status = _start(s, c.bufs[0], c.bufs[1], &request)
    if status == KERNEL_OK:
        status = _wait(s, &request)
    if status == KERNEL_OK:
        _scale(c, c.bufs[1])
    return status


cdef int all_reduce_start(const Call* c) noexcept nogil:
    cdef const Collective* s = <const Collective*>c.ints
    cdef int64_t* token = <int64_t*>c.bufs[s.members]
    cdef int request = 0
    cdef int status = KERNEL_OK
    if s.iallreduce != 0:  # (a group of one process has nothing to send)
        status = _start(s, MPI_IN_PLACE, c.bufs[0], &request)
    token[0] = request
    return status


cdef int all_reduce_wait(const Call* c) noexcept nogil:
    cdef const Collective* s = <const Collective*>c.ints
    cdef int64_t* token = <int64_t*>c.bufs[0]
    cdef int request = <int>token[0]
    cdef int status = KERNEL_OK
    if s.iallreduce != 0:
        status = _wait(s, &request)
        token[0] = request
    if status == KERNEL_OK:
        _scale(c, c.bufs[1])
    return status


cdef int all_reduce_progress(const Call* c) noexcept nogil:
    # called on a start's Call, between the start and its wait (the token is live)
    cdef const Collective* s = <const Collective*>c.ints
    cdef int64_t* token = <int64_t*>c.bufs[s.members]
    cdef int request = <int>token[0]
    cdef int flag = 0
    if s.iallreduce == 0:
        return KERNEL_OK
    if (<test_fn>s.test)(&request, &flag, MPI_STATUS_IGNORE) != 0:
        return KERNEL_COLLECTIVE_FAILED
    token[0] = request
    return KERNEL_OK


# the executor's progress call on a start's Call (not an op: no entry in the kernel table)
PROGRESS = kernel_address(all_reduce_progress)

# one body per op whatever the dtype (the parameter block says it): a name per dtype, as the
# backend's table names kernels
KERNELS = {f"{op}_{suffix}": address
           for op, address in (("all_reduce", kernel_address(all_reduce)),
                               ("all_reduce_start", kernel_address(all_reduce_start)),
                               ("all_reduce_wait", kernel_address(all_reduce_wait)))
           for suffix in ("f32", "f64", "i32", "i64")}
