# One kernel call outside a plan: how eager mode runs an op.
#
# Design: a Launcher is made once per (op, attributes, input types) and cached by eager
# dispatch; it holds the kernel's address and its parameter block in C arrays, as the plan
# executor does for each instruction, so a call only reads the arrays' data pointers (the buffer
# protocol: no NumPy C API needed) and calls the kernel. Eager dispatch's C path
# (eager/fastpath.pyx) has the pointers already and calls ``launch`` (launch.pxd). The GIL is
# released only for calls big enough that another Python thread gains by it.

from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdlib cimport malloc, free

from .abi cimport Call

cdef enum:
    MAX_BUFFERS = 72  # the fused kernel's 32 inputs and 32 outputs and a workspace fit

MAX_LAUNCH_BUFFERS = MAX_BUFFERS


cdef class Launcher:
    def __cinit__(self, Py_ssize_t address, ints, floats, Py_ssize_t n_inputs,
                  bint release_gil):
        """``address``: a kernel of a module's KERNELS table; ``ints``/``floats``: its
        parameter block; the first ``n_inputs`` buffers of a call are read, the rest written."""
        cdef Py_ssize_t i
        self.fn = <kernel_fn>address
        self.n_inputs = n_inputs
        self.release_gil = release_gil
        self.ints = <Py_ssize_t*>malloc(max(len(ints), 1) * sizeof(Py_ssize_t))
        self.floats = <double*>malloc(max(len(floats), 1) * sizeof(double))
        if not self.ints or not self.floats:
            raise MemoryError("cannot allocate a launcher's parameter block")
        for i in range(len(ints)):
            self.ints[i] = ints[i]
        for i in range(len(floats)):
            self.floats[i] = floats[i]

    def __dealloc__(self):
        free(self.ints)
        free(self.floats)

    def __call__(self, tuple buffers):
        """Run the kernel on ``buffers`` (C-contiguous arrays: inputs, outputs, then the
        workspace); returns its status (0: done)."""
        cdef Py_buffer views[MAX_BUFFERS]
        cdef char* pointers[MAX_BUFFERS]
        cdef Call call
        cdef Py_ssize_t i, n = len(buffers), got = 0
        cdef int status
        if n > MAX_BUFFERS:
            raise ValueError(f"a launch takes at most {MAX_BUFFERS} buffers, got {n}")
        try:
            for i in range(n):
                PyObject_GetBuffer(buffers[i], &views[i],
                                   PyBUF_SIMPLE if i < self.n_inputs else PyBUF_WRITABLE)
                got += 1
                pointers[i] = <char*>views[i].buf
            status = self.launch(pointers)
        finally:
            for i in range(got):
                PyBuffer_Release(&views[i])
        return status

    cdef int launch(self, char** pointers) noexcept:
        """Run the kernel on the buffers at ``pointers`` (inputs, outputs, then the
        workspace); its status."""
        cdef Call call
        cdef int status
        call.bufs = pointers
        call.ints = self.ints
        call.floats = self.floats
        if self.release_gil:
            with nogil:
                status = self.fn(&call)
        else:
            status = self.fn(&call)
        return status


# Bytes held by eager tensors' own arrays (and running eager kernels' workspaces): a C count,
# changed only with the GIL held, by a token each owning tensor holds. A token's __dealloc__
# runs no Python code, which keeps a tensor's death as cheap as its array's.
cdef Py_ssize_t _held_now = 0
cdef Py_ssize_t _held_peak = 0


cdef class Held:
    """``nbytes`` counted as held while this token lives."""

    def __cinit__(self, Py_ssize_t nbytes=0):
        self.hold(nbytes)

    cdef void hold(self, Py_ssize_t nbytes) noexcept:
        """Count ``nbytes`` more (how C code makes a token: ``Held.__new__(Held)``, then this,
        with no argument tuple to build)."""
        global _held_now, _held_peak
        self.nbytes += nbytes
        _held_now += nbytes
        if _held_now > _held_peak:
            _held_peak = _held_now

    def __dealloc__(self):
        global _held_now
        _held_now -= self.nbytes


def held_bytes(bint reset_peak=False):
    """(bytes held now, the peak since the last reset); ``reset_peak`` starts a new peak."""
    global _held_peak
    result = (_held_now, _held_peak)
    if reset_peak:
        _held_peak = _held_now
    return result
