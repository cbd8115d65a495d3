# Index arithmetic of sliding windows, shared by the convolution and pooling kernels.


cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t d) noexcept nogil:
    # d > 0; C division truncates, which is a floor only for a >= 0
    return (a + d - 1) // d if a > 0 else -((-a) // d)


cdef inline Py_ssize_t clamp(Py_ssize_t v, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return lo if v < lo else (hi if v > hi else v)
