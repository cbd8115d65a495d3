# The pointwise path of conv.pyx ("pointwise"): float32 conv2d with a 1x1 kernel at stride 1
# without padding, on conv_pointwise.h's register tiles straight over NCHW, the bias and
# activation fused into the store. No workspace.
#
# Threads: each (image, group) unit's cells are cut into ranges of whole cache lines (the last
# range takes the rest), and the (unit, range) pairs go to the threads in static blocks; a range
# is at least PW_MIN_RANGE cells, so a thread's tiles keep their column strips long enough to pay
# for the fork. The bits do not depend on the ranges (conv_pointwise.h), so a plan gives the
# same bits on any number of threads.
#
# Design: ranges end on a line of y (16 floats; the arena's planes start on one where their
# cells are a multiple of 16), not on a vector of 8 (AVX2): two threads then never write one
# line, which at 28x28 (784 cells: thread 0's cells ended at 392, half a line) they did in
# each of the 192 planes of MobileNet-v2's expand. Measured on the shared 2-core AMD EPYC
# (Zen 3, AVX2), the block's kernels in a C harness at 2 threads, vector against line ends
# alternately (600 calls each; CPU time of the slower thread, as the machine's other tenants
# made wall times meaningless): expand 32 -> 192 at 28x28 0.94-0.95, at 20x20 0.95, project
# 192 -> 32 0.99-1.02, at 56x56 (ends already on lines) 1.00; the bits unchanged. Splitting
# the expand by output channels instead (each thread's planes whole, as the depthwise path
# takes them next) measured 0.81-0.88 at 28x28 but 1.07-1.09 at 56x56, and was not taken.

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
    PW_LINE = 16        # cells in a 64-byte cache line: where the ranges end (see Design)


cdef inline Py_ssize_t pointwise_ranges(const Conv* s, int nt) noexcept nogil:
    # ranges per unit: one unless the units alone leave threads idle
    cdef Py_ssize_t units = s.batch * s.groups, cells = s.oh * s.ow
    if nt == 1 or units >= 2 * nt:
        return 1
    return max(min(cells // PW_MIN_RANGE, 4 * nt), 1)


cdef inline Py_ssize_t range_start(const Conv* s, Py_ssize_t r,
                                    Py_ssize_t nranges) noexcept nogil:
    # where range r of a unit's cells begins (range r ends where r + 1 begins, the last at the
    # plane's end): on a line of cells, which is whole vectors of every instruction set's
    cdef Py_ssize_t step = max(pw_vector(s.isa), <Py_ssize_t>PW_LINE)
    return s.oh * s.ow if r == nranges else r * (s.oh * s.ow) // nranges // step * step


cdef inline void pointwise_range(const float* x, const float* w, const float* bias, float* y,
                                 Py_ssize_t i, Py_ssize_t nranges, const Conv* s) noexcept nogil:
    # pair i: unit i // nranges (image, group), its range i % nranges of cells
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, cells = s.oh * s.ow
    cdef Py_ssize_t u = i // nranges, r = i % nranges, g = u % s.groups, n = u // s.groups
    cdef Py_ssize_t c0 = range_start(s, r, nranges), c1 = range_start(s, r + 1, nranges)
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


def pointwise_range_starts(ints, int threads):
    """Where the ranges of cells that the pointwise path cuts each (image, group) plane into
    on ``threads`` threads begin, and the plane's end: a tuple of cells, for Conv parameters
    ``ints`` (the lowering's layout).

    >>> pointwise_range_starts(ints, 2)  # 28x28, one image: 4 ranges   # doctest: +SKIP
    (0, 192, 384, 576, 784)
    """
    cdef Conv s = conv_params(ints)
    cdef Py_ssize_t i, nranges = pointwise_ranges(&s, threads)
    return tuple(range_start(&s, i, nranges) for i in range(nranges + 1))
