# Resize with ONNX's antialias filter (opset 18; PIL's and PyTorch's antialias=True), included
# by _kernels/resize.pyx: what it means is mgegraph/ops/resize.py's docstring.
#
# An axis downscaled by a factor s < 1 reads its linear or cubic filter stretched by 1 / s:
# output index o at input coordinate x (the coordinate transformation) weighs input position p
# by filter((p - x) * min(s, 1)), over the aa_taps (2 ceil(R / min(s, 1)), R the filter's
# radius: 1 linear, 2 cubic) positions nearest x, normalised to sum 1. A position outside the
# input reads the edge, or weighs 0 (exclude_outside, which is PyTorch's clipped window).
# The taps' count varies with the scale, so they have a table of their own (WideTap, aa_taps of
# each axis per output index), filled once per call; the loops are the plain kernel's with
# these counts.

from libc.math cimport ceil, fabs


cdef inline double aa_filter(Py_ssize_t mode, double d, double a) noexcept nogil:
    d = fabs(d)
    if mode == LINEAR:
        return 1 - d if d < 1 else 0.0
    return keys(d, a) if d < 2 else 0.0


cdef inline void wide_axis_taps(const Resize* s, const double* f, int axis, Py_ssize_t o,
                                Py_ssize_t n, WideTap* t) noexcept nogil:
    # Output index o's n taps along one axis (n == 1: an axis of input length 1)
    cdef Py_ssize_t n_in = (&s.in0)[axis], first, k, p
    cdef double x, stretch, total = 0
    if n_in == 1:
        t[0].index, t[0].weight = 0, 1.0
        return
    x = source_coord(s.coord, o, n_in, (&s.out0)[axis], f[axis], f[3 + axis])
    stretch = f[3 + axis] / f[axis]
    stretch = 1.0 if stretch > 1 else stretch
    first = <Py_ssize_t>ceil(x) - n // 2
    for k in range(n):
        p = first + k
        t[k].weight = aa_filter(s.mode, (p - x) * stretch, f[6])
        if s.exclude_outside and not 0 <= p < n_in:
            t[k].weight = 0
        total += t[k].weight
        t[k].index = clamp_index(p, n_in)
    if total != 0:  # no tap inside: all weigh 0 (ONNX's reference)
        for k in range(n):
            t[k].weight /= total


cdef inline void fill_wide_taps(const Resize* s, const double* f, WideTap* table) noexcept nogil:
    # Every axis's taps, axis after axis: out0 * aa_taps0 entries, then axis 1's, then axis 2's
    cdef int axis
    cdef Py_ssize_t o, n
    for axis in range(3):
        n = (&s.aa_taps0)[axis]
        for o in range((&s.out0)[axis]):
            wide_axis_taps(s, f, axis, o, n, table)
            table += n


ctypedef struct WideRun:
    const Resize* s
    const WideTap* axes[3]  # each axis's table
    const char* x
    char* y


cdef inline int wide_rows_part(const WideRun* r, Py_ssize_t lo, Py_ssize_t hi,
                               pixel_t* _) noexcept nogil:
    # rows_part's loop over the wide taps: output rows [lo, hi)
    cdef const Resize* s = r.s
    cdef const pixel_t* x = <const pixel_t*>r.x
    cdef pixel_t* y = <pixel_t*>r.y
    cdef const WideTap* t0
    cdef const WideTap* t1
    cdef const WideTap* t2
    cdef Py_ssize_t row, p, o1, o2, plane = s.in0 * s.in1 * s.in2, base, a, b, c
    cdef double acc, w01
    for row in range(lo, hi):
        o1 = row % s.out1
        p = row // (s.out1 * s.out0)
        t0 = r.axes[0] + row // s.out1 % s.out0 * s.aa_taps0
        t1 = r.axes[1] + o1 * s.aa_taps1
        for o2 in range(s.out2):
            t2 = r.axes[2] + o2 * s.aa_taps2
            acc = 0
            for a in range(s.aa_taps0):
                for b in range(s.aa_taps1):
                    w01 = t0[a].weight * t1[b].weight
                    base = p * plane + (t0[a].index * s.in1 + t1[b].index) * s.in2
                    for c in range(s.aa_taps2):
                        acc += w01 * t2[c].weight * x[base + t2[c].index]
            store_pixel(y, row * s.out2 + o2, acc)
    return KERNEL_OK


cdef inline int wide_planes_part(const WideRun* r, Py_ssize_t lo, Py_ssize_t hi,
                                 floating* _) noexcept nogil:
    # planes_part's scatter over the wide taps: planes [lo, hi) of dx
    cdef const Resize* s = r.s
    cdef const floating* dy = <const floating*>r.x
    cdef floating* dx = <floating*>r.y
    cdef const WideTap* t0
    cdef const WideTap* t1
    cdef const WideTap* t2
    cdef Py_ssize_t p, o0, o1, o2, plane = s.in0 * s.in1 * s.in2, base, out, a, b, c
    cdef double g, w01
    memset(dx + lo * plane, 0, <size_t>((hi - lo) * plane) * sizeof(floating))
    for p in range(lo, hi):
        out = p * s.out0 * s.out1 * s.out2
        for o0 in range(s.out0):
            t0 = r.axes[0] + o0 * s.aa_taps0
            for o1 in range(s.out1):
                t1 = r.axes[1] + o1 * s.aa_taps1
                for o2 in range(s.out2):
                    t2 = r.axes[2] + o2 * s.aa_taps2
                    g = dy[out]
                    out += 1
                    for a in range(s.aa_taps0):
                        for b in range(s.aa_taps1):
                            w01 = t0[a].weight * t1[b].weight
                            base = p * plane + (t0[a].index * s.in1 + t1[b].index) * s.in2
                            for c in range(s.aa_taps2):
                                dx[base + t2[c].index] += <floating>(w01 * t2[c].weight * g)
    return KERNEL_OK


cdef int wide_rows_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return wide_rows_part(<const WideRun*>ctx, lo, hi, <float*>NULL)
cdef int wide_rows_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return wide_rows_part(<const WideRun*>ctx, lo, hi, <double*>NULL)
cdef int wide_rows_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return wide_rows_part(<const WideRun*>ctx, lo, hi, <uint8_t*>NULL)
cdef int wide_planes_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return wide_planes_part(<const WideRun*>ctx, lo, hi, <float*>NULL)
cdef int wide_planes_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return wide_planes_part(<const WideRun*>ctx, lo, hi, <double*>NULL)


cdef inline void wide_run(WideRun* r, const Resize* s, const double* f,
                          WideTap* taps) noexcept nogil:
    fill_wide_taps(s, f, taps)
    r.s = s
    r.axes[0] = taps
    r.axes[1] = taps + s.out0 * s.aa_taps0
    r.axes[2] = r.axes[1] + s.out1 * s.aa_taps1


cdef inline int antialias_impl(const pixel_t* x,  # IN  (planes, in0, in1, in2)
                               pixel_t* y,        # OUT (planes, out0, out1, out2)
                               WideTap* taps,      # OUT workspace: the taps of every axis
                               const Resize* s, const double* f) noexcept nogil:
    cdef WideRun r
    wide_run(&r, s, f, taps)
    r.x, r.y = <const char*>x, <char*>y
    return parallel_for(s.threads, s.planes * s.out0 * s.out1,
                        wide_rows_f32 if pixel_t is float else
                        (wide_rows_f64 if pixel_t is double else wide_rows_u8), &r)


cdef inline int antialias_backward_impl(const floating* dy,  # IN  (planes, out0, out1, out2)
                                        floating* dx,        # OUT (planes, in0, in1, in2)
                                        WideTap* taps,       # OUT workspace
                                        const Resize* s, const double* f) noexcept nogil:
    cdef WideRun r
    wide_run(&r, s, f, taps)
    r.x, r.y = <const char*>dy, <char*>dx
    return parallel_for(s.threads, s.planes,
                        wide_planes_f32 if floating is float else wide_planes_f64, &r)
