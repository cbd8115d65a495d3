# The depthwise path of conv.pyx ("depthwise"): conv2d with one input and one output channel per
# group (groups == in == out channels), any kernel, stride, padding and dilation, float32 and
# float64.
#
# Design: a depthwise convolution does kh * kw multiply-adds per output cell, so the im2col
# path's GEMM per (image, channel) is a (1 x taps) by (taps x cells) product whose BLAS call,
# packing and im2col copy (taps floats per cell) cost about what the arithmetic does. Here each
# output plane is summed alone, both planes staying in L1:
# - 3x3 kernels at column stride 1 or 2 without column dilation (MobileNet's; any padding, row
#   stride and row dilation): dw3.h's plane kernel over a zero-padded copy of the plane, a
#   vector of output cells at a time with the 9 weights in registers, the bias and activation
#   applied before the one store. Workspace: per thread, the padded plane (dw3_slot).
# - other kernels at stride 1, as the shifted path does (conv.pyx, Shifted), over a zero-padded
#   copy of the input plane (hp, wp): tap (i, j) adds the padded plane from flat offset
#   i dh wp + j dw to an output kept in rows of wp cells, one long loop per tap; the rows' ow
#   leading cells are then copied out. Workspace: per thread, the padded plane and the output
#   rows.
# - the tap loop itself is dw_tap.h's, built per instruction set (the module is built for the
#   baseline, four floats a vector, where the BLAS of the im2col path runs AVX2 or AVX-512).
# - at other strides, row by row over the columns whose input lies inside the image (no
#   workspace); the bounds cost two divisions per tap, not per row.
# Whole planes go to each thread and each is summed in the same order (taps in order from 0),
# so a plan gives the same bits on any number of threads.
#
# Design: the pointwise layers around this one split a plane's cells among threads, so in
# MobileNet-v2's block half of a thread's depthwise input was written by the other core. A band
# of each plane's rows per thread instead (a thread reading the rows its own expand wrote, but
# a halo row) was measured slower on the shared 2-core AMD EPYC (Zen 3; the block's kernels in
# a C harness at 2 threads, planes against bands alternately, 300-600 calls; CPU time of the
# slower thread, as the machine's other tenants made wall times meaningless): 1.4-1.5x at
# 56x56, 1.6-2.0x at 28x28, the depthwise alone too (1.5x, 2.1x), though one thread running
# band after band costs only 2-10% more than whole planes. The expand and project beside it
# gained nothing from the bands (0.92-1.03), so whole planes stay.


cdef extern from "dw3.h":
    ctypedef struct dw3_geom:
        Py_ssize_t h, w, oh, ow, sh, sw, ph, pw, dh
    Py_ssize_t dw3_slot(const dw3_geom* g) noexcept nogil
    ctypedef void (*dw3_f32_fn)(const float* x, float* pad, const float* k, const float* bias,
                                int act, float* y, const dw3_geom* g) noexcept nogil
    ctypedef void (*dw3_f64_fn)(const double* x, double* pad, const double* k,
                                const double* bias, int act, double* y,
                                const dw3_geom* g) noexcept nogil
    dw3_f32_fn dw3_f32_of(Py_ssize_t isa) noexcept nogil
    dw3_f64_fn dw3_f64_of(Py_ssize_t isa) noexcept nogil


cdef inline bint depthwise_3x3(const Conv* s) noexcept nogil:
    return s.kh == 3 and s.kw == 3 and (s.sw == 1 or s.sw == 2) and s.dw == 1


cdef inline dw3_geom dw3_of(const Conv* s) noexcept nogil:
    cdef dw3_geom g
    g.h, g.w, g.oh, g.ow, g.sh, g.sw = s.h, s.w, s.oh, s.ow, s.sh, s.sw
    g.ph, g.pw, g.dh = s.ph, s.pw, s.dh
    return g


cdef inline bint depthwise_padded(const Conv* s) noexcept nogil:
    return s.sh == 1 and s.sw == 1 and not depthwise_3x3(s)


cdef inline Py_ssize_t depthwise_slot(const Conv* s) noexcept nogil:
    # one thread's workspace: dw3.h's padded plane; at stride 1 on the shifted loops, the padded
    # plane and the output in rows of wp
    cdef Py_ssize_t wp = s.w + 2 * s.pw
    cdef dw3_geom g = dw3_of(s)
    if depthwise_3x3(s):
        return dw3_slot(&g)
    return (s.h + 2 * s.ph) * wp + s.oh * wp if depthwise_padded(s) else 0


cdef inline Py_ssize_t depthwise_elems(const Conv* s) noexcept nogil:
    return max(s.threads, 1) * depthwise_slot(s)


cdef extern from "dw_tap.h":
    ctypedef void (*dw_tap_f32_fn)(float*, const float*, float, Py_ssize_t,
                                   Py_ssize_t) noexcept nogil
    ctypedef void (*dw_tap_f64_fn)(double*, const double*, double, Py_ssize_t,
                                   Py_ssize_t) noexcept nogil
    dw_tap_f32_fn dw_tap_f32_of(Py_ssize_t isa) noexcept nogil
    dw_tap_f64_fn dw_tap_f64_of(Py_ssize_t isa) noexcept nogil


cdef inline void add_tap(floating* y, const floating* src, floating tap, Py_ssize_t n,
                         Py_ssize_t stride, const Conv* s) noexcept nogil:
    # y[c] += tap * src[c * stride] for c < n, in the block's instruction set (dw_tap.h)
    if floating is float:
        dw_tap_f32_of(s.isa)(y, src, tap, n, stride)
    else:
        dw_tap_f64_of(s.isa)(y, src, tap, n, stride)


cdef inline void depthwise_rows(const floating* x,   # IN  one input plane (h, w)
                                const floating* w,   # IN  its kernel (kh, kw)
                                floating* y,         # OUT its output plane (oh, ow)
                                const Conv* s) noexcept nogil:
    cdef Py_ssize_t r, i, j, r0, r1, lo, hi, top, off
    zero(y, s.oh * s.ow)
    for i in range(s.kh):
        top = i * s.dh - s.ph  # output row r reads input row r * sh + top
        r0 = clamp(ceil_div(-top, s.sh), 0, s.oh)
        r1 = clamp(ceil_div(s.h - top, s.sh), r0, s.oh)
        for j in range(s.kw):
            off = j * s.dw - s.pw
            inside(off, s, &lo, &hi)
            for r in range(r0, r1):
                add_tap(y + r * s.ow + lo, x + (r * s.sh + top) * s.w + lo * s.sw + off,
                        w[i * s.kw + j], hi - lo, s.sw, s)


cdef inline void depthwise_shifted(const floating* x, const floating* w, floating* y,
                                   floating* area, const Conv* s) noexcept nogil:
    # stride 1; area: this thread's slot, its padded plane's border already zero
    cdef Py_ssize_t wp = s.w + 2 * s.pw, hp = s.h + 2 * s.ph, r, i, j
    cdef Py_ssize_t n = (s.oh - 1) * wp + s.ow
    cdef floating* padded = area
    cdef floating* rows = area + hp * wp
    for r in range(s.h):
        memcpy(padded + (r + s.ph) * wp + s.pw, x + r * s.w, <size_t>s.w * sizeof(floating))
    zero(rows, n)
    for i in range(s.kh):
        for j in range(s.kw):
            add_tap(rows, padded + i * s.dh * wp + j * s.dw, w[i * s.kw + j], n, 1, s)
    for r in range(s.oh):
        memcpy(y + r * s.ow, rows + r * wp, <size_t>s.ow * sizeof(floating))


cdef inline void depthwise_3x3_plane(const floating* x, const floating* w,
                                     const floating* bias, floating* y, floating* area,
                                     const Conv* s) noexcept nogil:
    # area: this thread's slot, its padded plane's border already zero
    cdef dw3_geom g = dw3_of(s)
    if floating is float:
        dw3_f32_of(s.isa)(x, area, w, bias, <int>s.activation, y, &g)
    else:
        dw3_f64_of(s.isa)(x, area, w, bias, <int>s.activation, y, &g)


cdef inline void depthwise_plane(const floating* x, const floating* w, const floating* bias,
                                 floating* y, floating* area, Py_ssize_t p,
                                 const Conv* s) noexcept nogil:
    # plane p: image p // cin, channel p % cin; bias and activation while it is in cache
    cdef Py_ssize_t c = p % s.cin, npix = s.oh * s.ow
    if depthwise_3x3(s):
        depthwise_3x3_plane(x + p * s.h * s.w, w + c * 9, bias + c if bias != NULL else NULL,
                            y + p * npix, area, s)
        return
    if depthwise_padded(s):
        depthwise_shifted(x + p * s.h * s.w, w + c * s.kh * s.kw, y + p * npix, area, s)
    else:
        depthwise_rows(x + p * s.h * s.w, w + c * s.kh * s.kw, y + p * npix, s)
    if bias != NULL or s.activation:
        epilogue_rows(y + p * npix, bias + c if bias != NULL else NULL, s.activation, 1, npix)


cdef inline int conv2d_depthwise(const floating* x, const floating* w, const floating* bias,
                                 floating* y, floating* ws, const Conv* s) noexcept nogil:
    cdef Py_ssize_t planes = s.batch * s.cin, slot = depthwise_slot(s), p
    cdef int nt = run_threads(s)
    if s.cin != s.groups or s.cout != s.groups:
        return KERNEL_UNSUPPORTED  # the lowering takes it for depthwise convolutions only
    if slot:
        zero(ws, depthwise_elems(s))  # the padded planes' borders
    if nt == 1:
        for p in range(planes):
            depthwise_plane(x, w, bias, y, ws, p, s)
        return KERNEL_OK
    with parallel(num_threads=nt):
        for p in prange(planes, schedule="static"):
            depthwise_plane(x, w, bias, y, ws + threadid() * slot, p, s)
    return KERNEL_OK
