# The pointwise path of conv.pyx ("pointwise"): float32 conv2d with a 1x1 kernel at stride 1
# without padding, on conv_pointwise.h's register tiles straight over NCHW, the bias and
# activation fused into the store. No workspace.
#
# Threads: each (image, group) unit's cells are cut into ranges of whole vectors (the last range
# takes the rest), and the (unit, range) pairs go to the threads in static blocks; a range is
# at least PW_MIN_RANGE cells, so a thread's tiles keep their column strips long enough to pay
# for the fork. The bits do not depend on the ranges (conv_pointwise.h), so a plan gives the
# same bits on any number of threads.

cdef extern from "conv_pointwise.h":
    ctypedef void (*pw_fn)(const float* x, Py_ssize_t ldx, Py_ssize_t nc, const float* w,
                           Py_ssize_t no, const float* bias, int act, float* y, Py_ssize_t ldy,
                           Py_ssize_t c0, Py_ssize_t c1) noexcept nogil
    pw_fn pw_of(Py_ssize_t isa, Py_ssize_t nc) noexcept nogil
    Py_ssize_t pw_vector(Py_ssize_t isa) noexcept nogil
    enum: PW_NARROW_CHANNELS

# input channels at most for which AVX2 runs its tiles of 2 vectors, not 3 (the tests take both)
POINTWISE_NARROW_CHANNELS = PW_NARROW_CHANNELS

cdef enum:
    PW_MIN_RANGE = 192  # cells: four of the AVX-512 tile's strips


cdef inline Py_ssize_t pointwise_ranges(const Conv* s, int nt) noexcept nogil:
    # ranges per unit: one unless the units alone leave threads idle
    cdef Py_ssize_t units = s.batch * s.groups, cells = s.oh * s.ow
    if nt == 1 or units >= 2 * nt:
        return 1
    return max(min(cells // PW_MIN_RANGE, 4 * nt), 1)


cdef inline void pointwise_range(const float* x, const float* w, const float* bias, float* y,
                                 Py_ssize_t i, Py_ssize_t nranges, const Conv* s) noexcept nogil:
    # pair i: unit i // nranges (image, group), its range i % nranges of cells
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, cells = s.oh * s.ow
    cdef Py_ssize_t u = i // nranges, r = i % nranges, g = u % s.groups, n = u // s.groups
    cdef Py_ssize_t vw = pw_vector(s.isa), c0, c1
    c0 = r * cells // nranges // vw * vw
    c1 = cells if r == nranges - 1 else (r + 1) * cells // nranges // vw * vw
    pw_of(s.isa, cg)(x + (n * s.cin + g * cg) * cells, cells, cg, w + g * ocg * cg, ocg,
                 bias + g * ocg if bias != NULL else NULL, <int>s.activation,
                 y + (n * s.cout + g * ocg) * cells, cells, c0, c1)


cdef inline int conv2d_pointwise(const float* x, const float* w, const float* bias, float* y,
                                 const Conv* s) noexcept nogil:
    cdef int nt = run_threads(s)
    cdef Py_ssize_t nranges = pointwise_ranges(s, nt), pairs = s.batch * s.groups * nranges, i
    if s.kh != 1 or s.kw != 1 or s.sh != 1 or s.sw != 1 or s.ph or s.pw:
        return KERNEL_UNSUPPORTED  # the lowering takes it for 1x1 at stride 1 unpadded only
    if nt == 1:
        for i in range(pairs):
            pointwise_range(x, w, bias, y, i, nranges, s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        for i in prange(pairs, schedule="static"):
            pointwise_range(x, w, bias, y, i, nranges, s)
    return KERNEL_OK
