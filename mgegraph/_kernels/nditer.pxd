# Strided iteration shared by kernels: an odometer over all dimensions but the innermost.
#
# Design: lowerings collapse contiguous dimensions first, so most loops see one or two dims and
# the innermost row is long; the odometer only runs once per row.

cdef enum:
    MAX_DIMS = 8
    MAX_OPERANDS = 4

ctypedef struct Odometer:
    int ndim                                   # number of outer dimensions iterated
    int nops
    Py_ssize_t index[MAX_DIMS]
    Py_ssize_t shape[MAX_DIMS]
    Py_ssize_t strides[MAX_OPERANDS][MAX_DIMS]  # element strides per operand
    Py_ssize_t offset[MAX_OPERANDS]            # current element offset per operand


cdef inline bint dims_ok(Py_ssize_t ndim, Py_ssize_t least) noexcept nogil:
    # A kernel's first check, before it reads a shape: ndim within what an Odometer holds
    # (whatever its parameter block says, no iteration writes past these arrays).
    return least <= ndim <= MAX_DIMS


cdef inline void odometer_init(Odometer* o, int ndim, const Py_ssize_t* shape,
                               const Py_ssize_t* strides, int nops) noexcept nogil:
    # shape: ndim sizes; strides: nops blocks of ndim element strides. Iterates dims [0, ndim-1).
    cdef int d, k
    o.ndim = ndim - 1 if ndim > 0 else 0
    o.nops = nops
    for k in range(nops):
        o.offset[k] = 0
        for d in range(o.ndim):
            o.strides[k][d] = strides[k * ndim + d]
    for d in range(o.ndim):
        o.index[d] = 0
        o.shape[d] = shape[d]


cdef inline void odometer_next(Odometer* o) noexcept nogil:
    cdef int d = o.ndim - 1, k
    while d >= 0:
        o.index[d] += 1
        for k in range(o.nops):
            o.offset[k] += o.strides[k][d]
        if o.index[d] < o.shape[d]:
            return
        for k in range(o.nops):
            o.offset[k] -= o.strides[k][d] * o.shape[d]
        o.index[d] = 0
        d -= 1


cdef inline void odometer_seek(Odometer* o, Py_ssize_t row) noexcept nogil:
    # A freshly initialised odometer moved to its row ``row`` (rows count in C order), as that
    # many odometer_next calls would: where a thread's part of a kernel starts.
    cdef int d, k
    for d in range(o.ndim - 1, -1, -1):
        if o.shape[d] > 0:
            o.index[d] = row % o.shape[d]
            row //= o.shape[d]
        for k in range(o.nops):
            o.offset[k] += o.index[d] * o.strides[k][d]


cdef inline Py_ssize_t count_rows(int ndim, const Py_ssize_t* shape) noexcept nogil:
    cdef Py_ssize_t rows = 1
    cdef int d
    for d in range(ndim - 1):
        rows *= shape[d]
    return rows
