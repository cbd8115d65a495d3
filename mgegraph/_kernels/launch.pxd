# One kernel call outside a plan (eager mode): what eager/fastpath.pyx calls without Python.

from .abi cimport kernel_fn


cdef class Launcher:
    cdef kernel_fn fn
    cdef Py_ssize_t* ints
    cdef double* floats
    cdef readonly Py_ssize_t n_inputs
    cdef bint release_gil

    cdef int launch(self, char** pointers) noexcept


cdef class Held:
    cdef readonly Py_ssize_t nbytes

    cdef void hold(self, Py_ssize_t nbytes) noexcept
