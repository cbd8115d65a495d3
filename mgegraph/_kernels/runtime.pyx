# The executor: one C loop over a plan's instructions.
#
# Design: everything a run needs (function pointers, buffer pointers, parameters) is copied into
# C arrays when the executor is built, once per plan. run() then releases the GIL and calls the
# kernels in order; a kernel's non-zero status stops the loop and is reported with its index.
# The loop takes the GIL back only at the check points the executable chose (after roughly a
# millisecond of estimated work) to let Python run its signal handlers: Ctrl-C raises
# KeyboardInterrupt between two instructions, and the run costs nothing more when there are none.
#
# Design: run_timed() is run() with two reads of CLOCK_MONOTONIC (the clock of Python's
# time.monotonic_ns) around each kernel call, stored in a table allocated with the others. It is
# a second loop rather than a flag tested in run()'s, so an unprofiled run pays nothing for the
# profiler (mgegraph.tools.profiler).
#
# Design: progress calls are extra kernel calls the executor makes at some check points, on the
# Call of an instruction that ran before (a collective's start: its kernel tests the request it
# left, so MPI moves the message while the kernels between the start and its wait run; MPICH
# advances a request only inside MPI calls). They run where the loop leaves its inner run
# anyway, so a plan without them pays one comparison per check point and nothing per kernel.

from libc.math cimport NAN
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBuffer_Release, PyObject_GetBuffer
from cpython.exc cimport PyErr_CheckSignals
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from .abi cimport (Call, kernel_fn, KERNEL_OK, KERNEL_INDEX_OUT_OF_RANGE, KERNEL_BAD_VALUE,
                   KERNEL_UNSUPPORTED, KERNEL_NEGATIVE_POWER, KERNEL_NOT_A_NUMBER,
                   KERNEL_OUT_OF_MEMORY, KERNEL_TIMED_OUT, KERNEL_COLLECTIVE_FAILED)

# What each status of abi.pxd means, for the error a failed run raises.
KERNEL_STATUS = {KERNEL_INDEX_OUT_OF_RANGE: "an index is out of range",
                 KERNEL_BAD_VALUE: "a value is invalid",
                 KERNEL_UNSUPPORTED: "the kernel does not support these parameters",
                 KERNEL_NEGATIVE_POWER: "integers to negative integer powers are not allowed "
                                        "(as in NumPy)",
                 KERNEL_NOT_A_NUMBER: "a NaN has no integer to stand for it",
                 KERNEL_OUT_OF_MEMORY: "the kernel could not allocate its scratch memory",
                 KERNEL_TIMED_OUT: "timed out waiting for the other ranks (one died, hangs, "
                                   "or did not run the same collective)",
                 KERNEL_COLLECTIVE_FAILED: "MPI returned an error"}

def kernel_error(ins, int status):
    """The KernelError of instruction ``ins`` (a plan's Instruction) that returned ``status``,
    in the words every backend uses: op, kernel, the user's line and what went wrong."""
    from ..ir.errors import KernelError
    return KernelError(f"{ins.op} (kernel {ins.kernel}, node made at {ins.location}): "
                       f"{KERNEL_STATUS.get(status, f'status {status}')}")


# How a dead buffer is poisoned in memory="debug" plans (Executor's poison kinds).
cdef enum:
    _POISON_BYTES = 0
    _POISON_FLOAT32 = 1
    _POISON_FLOAT64 = 2
POISON_BYTES, POISON_FLOAT32, POISON_FLOAT64 = _POISON_BYTES, _POISON_FLOAT32, _POISON_FLOAT64


ctypedef struct Poison:
    Py_ssize_t step
    char* data
    Py_ssize_t nbytes
    int kind


ctypedef struct Progress:
    Py_ssize_t step  # after this instruction (a check point) ...
    kernel_fn fn     # ... call this ...
    Py_ssize_t call  # ... on instruction call's Call


cdef void _fill_poison(const Poison* p) noexcept nogil:
    cdef Py_ssize_t i
    if p.kind == _POISON_FLOAT32:
        for i in range(p.nbytes // 4):
            (<float*>p.data)[i] = NAN
    elif p.kind == _POISON_FLOAT64:
        for i in range(p.nbytes // 8):
            (<double*>p.data)[i] = NAN
    else:  # NaN too wherever a kernel reads these bytes as floats (a workspace)
        memset(p.data, 0xFF, p.nbytes)


cdef inline int64_t _now_ns() noexcept nogil:
    cdef timespec t
    clock_gettime(CLOCK_MONOTONIC, &t)
    return <int64_t>t.tv_sec * 1000000000 + t.tv_nsec


cdef class Executor:
    cdef Call* calls
    cdef kernel_fn* fns
    cdef char** buf_table
    cdef Py_ssize_t* int_table
    cdef double* float_table
    cdef Py_ssize_t n
    cdef Poison* poison
    cdef Py_ssize_t n_poison
    cdef Py_ssize_t* poison_at  # poison[poison_at[i]:poison_at[i + 1]]: the entries of step i
    cdef Py_ssize_t* checks
    cdef Py_ssize_t n_checks
    cdef Progress* progress  # sorted by step; every step in it is a check point
    cdef Py_ssize_t n_progress
    cdef int64_t* times  # times[2i], times[2i + 1]: start and duration of instruction i (ns)
    cdef readonly Py_ssize_t ran  # instructions the last run completed
    # Rebindable slots (set_bindings): group g's pointers are buf_table[bind_pos[k]] for k in
    # bind_at[g]:bind_at[g + 1], each its group's base address plus bind_off[k] bytes.
    cdef Py_ssize_t* bind_pos
    cdef Py_ssize_t* bind_off
    cdef Py_ssize_t* bind_at
    cdef Py_ssize_t n_groups
    cdef readonly object buffers  # keeps the memory the pointers point into alive

    def __cinit__(self, list kernels, list buffer_pointers, list ints, list floats, buffers,
                  list poison=[], list checks=[], list progress=[]):
        """kernels[i]: function address; buffer_pointers[i]: list of data addresses;
        ints[i] / floats[i]: parameter lists of instruction i; poison: (step, address, bytes,
        kind) sorted by step, buffers to fill with garbage once that step ran (kind 1:
        float32 NaN, 2: float64 NaN, else 0xFF bytes); checks: sorted steps after which run()
        takes the GIL back and lets Python handle pending signals; progress: (step, kernel
        address, instruction) sorted by step, each step a check point, after which the kernel
        is called on that instruction's Call."""
        cdef Py_ssize_t i, j, nb = 0, ni = 0, nf = 0, pb = 0, pi = 0, pf = 0
        self.n = len(kernels)
        self.buffers = buffers
        self.n_poison = len(poison)
        self.poison = <Poison*>malloc(max(self.n_poison, 1) * sizeof(Poison))
        if not self.poison:
            raise MemoryError("cannot allocate the executor's tables")
        self.n_checks = len(checks)
        self.checks = <Py_ssize_t*>malloc(max(self.n_checks, 1) * sizeof(Py_ssize_t))
        if not self.checks:
            raise MemoryError("cannot allocate the executor's tables")
        for i in range(self.n_checks):
            self.checks[i] = checks[i]
        self.n_progress = len(progress)
        self.progress = <Progress*>malloc(max(self.n_progress, 1) * sizeof(Progress))
        if not self.progress:
            raise MemoryError("cannot allocate the executor's tables")
        check_steps = set(checks)
        for i in range(self.n_progress):
            step, address, self.progress[i].call = progress[i]
            if step not in check_steps or not 0 <= self.progress[i].call <= step:
                raise ValueError(f"progress entry {progress[i]}: its step must be a check "
                                 "point, at or after its instruction")
            self.progress[i].step, self.progress[i].fn = step, <kernel_fn><Py_ssize_t>address
        for i in range(self.n_poison):
            self.poison[i].step, address, self.poison[i].nbytes, self.poison[i].kind = poison[i]
            self.poison[i].data = <char*><Py_ssize_t>address
        for i in range(self.n):
            nb += len(buffer_pointers[i])
            ni += len(ints[i])
            nf += len(floats[i]) + 2  # two spare slots so kernels may read floats[0..1]
        self.calls = <Call*>malloc(max(self.n, 1) * sizeof(Call))
        self.fns = <kernel_fn*>malloc(max(self.n, 1) * sizeof(kernel_fn))
        self.buf_table = <char**>malloc(max(nb, 1) * sizeof(char*))
        self.int_table = <Py_ssize_t*>malloc(max(ni, 1) * sizeof(Py_ssize_t))
        self.float_table = <double*>malloc(max(nf, 1) * sizeof(double))
        if not (self.calls and self.fns and self.buf_table and self.int_table and self.float_table):
            raise MemoryError("cannot allocate the executor's tables")
        memset(self.float_table, 0, max(nf, 1) * sizeof(double))
        for i in range(self.n):
            self.fns[i] = <kernel_fn><Py_ssize_t>kernels[i]
            self.calls[i].bufs = self.buf_table + pb
            self.calls[i].ints = self.int_table + pi
            self.calls[i].floats = self.float_table + pf
            for j in range(len(buffer_pointers[i])):
                self.buf_table[pb] = <char*><Py_ssize_t>buffer_pointers[i][j]
                pb += 1
            for j in range(len(ints[i])):
                self.int_table[pi] = ints[i][j]
                pi += 1
            for j in range(len(floats[i])):
                self.float_table[pf + j] = floats[i][j]
            pf += len(floats[i]) + 2
        self.poison_at = <Py_ssize_t*>malloc((self.n + 1) * sizeof(Py_ssize_t))
        self.times = <int64_t*>malloc(max(2 * self.n, 1) * sizeof(int64_t))
        if not (self.poison_at and self.times):
            raise MemoryError("cannot allocate the executor's tables")
        j = 0
        for i in range(self.n + 1):
            while j < self.n_poison and self.poison[j].step < i:
                j += 1
            self.poison_at[i] = j
        memset(self.times, 0, max(2 * self.n, 1) * sizeof(int64_t))

    def set_bindings(self, list groups):
        """Make buffers rebindable between runs: ``groups[g]`` lists (instruction, buffer
        index, byte offset) of every pointer into one slot's bytes (the slot and its views);
        ``bind(g, address)`` then points all of them at ``address`` plus their offsets."""
        cdef Py_ssize_t g, k = 0, n = sum(len(group) for group in groups)
        free(self.bind_pos)
        free(self.bind_off)
        free(self.bind_at)
        self.bind_pos = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        self.bind_off = <Py_ssize_t*>malloc(max(n, 1) * sizeof(Py_ssize_t))
        self.bind_at = <Py_ssize_t*>malloc((len(groups) + 1) * sizeof(Py_ssize_t))
        if not (self.bind_pos and self.bind_off and self.bind_at):
            raise MemoryError("cannot allocate the executor's tables")
        self.n_groups = len(groups)
        for g in range(self.n_groups):
            self.bind_at[g] = k
            for instruction, buffer, offset in groups[g]:
                if not (0 <= instruction < self.n):
                    raise IndexError(f"instruction {instruction} out of range")
                self.bind_pos[k] = (self.calls[instruction].bufs - self.buf_table) + buffer
                self.bind_off[k] = offset
                k += 1
        self.bind_at[self.n_groups] = k

    def bind(self, Py_ssize_t group, object target):
        """Point binding group ``group``'s pointers at ``target`` (see set_bindings): an
        address, or an object exporting a contiguous buffer (an ndarray: its data pointer
        taken through the buffer protocol, a tenth of the cost of ``.ctypes.data``); the caller
        keeps the memory alive while runs use it."""
        cdef Py_ssize_t k, address
        cdef Py_buffer view
        if not 0 <= group < self.n_groups:
            raise IndexError(f"binding group {group} out of range 0..{self.n_groups - 1}")
        if isinstance(target, int):
            address = target
        else:
            PyObject_GetBuffer(target, &view, PyBUF_ANY_CONTIGUOUS)
            address = <Py_ssize_t>view.buf
            PyBuffer_Release(&view)
        for k in range(self.bind_at[group], self.bind_at[group + 1]):
            self.buf_table[self.bind_pos[k]] = <char*>(address + self.bind_off[k])

    def __dealloc__(self):
        free(self.bind_pos)
        free(self.bind_off)
        free(self.bind_at)
        free(self.poison)
        free(self.poison_at)
        free(self.checks)
        free(self.progress)
        free(self.times)
        free(self.calls)
        free(self.fns)
        free(self.buf_table)
        free(self.int_table)
        free(self.float_table)

    def __len__(self):
        return self.n

    cdef Py_ssize_t _progress(self, Py_ssize_t step, Py_ssize_t q) noexcept nogil:
        """Make the progress calls of ``step`` (entries from ``q`` on); the next entry."""
        while q < self.n_progress and self.progress[q].step <= step:
            if self.progress[q].step == step:  # (its status: the wait reports MPI's errors)
                self.progress[q].fn(&self.calls[self.progress[q].call])
            q += 1
        return q

    def run(self):
        """Run every instruction; returns None, or (index, status) of the first that failed.
        A signal handler's exception (KeyboardInterrupt) is raised at the next check point;
        the executor stays usable."""
        cdef Py_ssize_t i = 0, p = 0, c = 0, q = 0, end
        cdef int status = 0
        self.ran = 0
        while True:
            end = self.checks[c] + 1 if c < self.n_checks else self.n
            with nogil:
                while i < end:
                    status = self.fns[i](&self.calls[i])
                    if status != 0:
                        break
                    while p < self.n_poison and self.poison[p].step == i:
                        _fill_poison(&self.poison[p])
                        p += 1
                    i += 1
                if status == 0 and q < self.n_progress:
                    q = self._progress(i - 1, q)
            self.ran = i
            if status != 0:
                return (i, status)
            if i >= self.n:
                return None
            c += 1
            PyErr_CheckSignals()

    def run_timed(self):
        """run(), also timing each instruction it calls (the failing one too) into the table
        ``copy_times`` reads."""
        cdef Py_ssize_t i = 0, p = 0, c = 0, q = 0, end
        cdef int status = 0
        cdef int64_t start
        self.ran = 0
        while True:
            end = self.checks[c] + 1 if c < self.n_checks else self.n
            with nogil:
                while i < end:
                    start = _now_ns()
                    status = self.fns[i](&self.calls[i])
                    self.times[2 * i + 1] = _now_ns() - start
                    self.times[2 * i] = start
                    if status != 0:
                        break
                    while p < self.n_poison and self.poison[p].step == i:
                        _fill_poison(&self.poison[p])
                        p += 1
                    i += 1
                if status == 0 and q < self.n_progress:
                    q = self._progress(i - 1, q)
            self.ran = i
            if status != 0:
                return (i, status)
            if i >= self.n:
                return None
            c += 1
            PyErr_CheckSignals()

    def run_one(self, Py_ssize_t i):
        """Run instruction i alone (for the numerics check and debugging) as run_timed() runs
        it, dead values poisoned after it; returns its status. Running 0, 1, ... in turn is a
        run: ``ran`` counts the instructions completed."""
        cdef int status
        cdef Py_ssize_t p
        cdef int64_t start
        if not 0 <= i < self.n:
            raise IndexError(f"instruction {i} out of range 0..{self.n - 1}")
        with nogil:
            start = _now_ns()
            status = self.fns[i](&self.calls[i])
            self.times[2 * i + 1] = _now_ns() - start
            self.times[2 * i] = start
            if status == 0:
                for p in range(self.poison_at[i], self.poison_at[i + 1]):
                    _fill_poison(&self.poison[p])
        self.ran = i + (status == 0)
        return status

    def copy_times(self, int64_t[:, ::1] out):
        """Copy the start and duration (CLOCK_MONOTONIC nanoseconds) of instructions
        0 .. len(out) - 1, as run_timed() or run_one() last timed them, into ``out``."""
        cdef Py_ssize_t i
        if out.shape[1] != 2 or out.shape[0] > self.n:
            raise ValueError(f"out must have shape (k <= {self.n}, 2), got "
                             f"({out.shape[0]}, {out.shape[1]})")
        for i in range(out.shape[0]):
            out[i, 0] = self.times[2 * i]
            out[i, 1] = self.times[2 * i + 1]
