# The point sampler of _kernels/vision.pyx (grid_sample, remap and their gradients),
# included there: the parameter block and the design are described in its header.

# -- the sampler: one axis of one point --------------------------------------------------------
ctypedef struct Axis:
    Py_ssize_t at[4]   # the taps' input indices; -1: outside (the constant border's value)
    double w[4]        # their weights
    double dw[4]       # the weights' derivatives in the input coordinate
    int taps
    double dcoord      # d(input coordinate) / d(grid value)
    bint finite        # False: the point is NaN or infinite


cdef inline double reflect(double x, double low2, double high2, double* d) noexcept nogil:
    # PyTorch's reflect_coordinates, with the derivative's sign: x folded into [low, high]
    cdef double lo = low2 / 2, span = (high2 - low2) / 2, extra, flips, sign = 1
    if low2 == high2:
        d[0] = 0
        return 0
    x -= lo
    if x < 0:
        sign, x = -1, -x
    extra = fmod(x, span)
    flips = floor(x / span)
    if fmod(flips, 2) == 0:
        d[0] *= sign
        return extra + lo
    d[0] *= -sign
    return span - extra + lo


cdef inline double clip(double x, Py_ssize_t size, double* d) noexcept nogil:
    if x < 0:
        d[0] = 0
        return 0
    if x > size - 1:
        d[0] = 0
        return <double>(size - 1)
    return x


cdef inline double source(double g, Py_ssize_t size, const Sample* s, double* d) noexcept nogil:
    # The input coordinate of grid value g along an axis of ``size`` pixels; d: its derivative
    cdef double x
    if s.coord == C_ALIGNED:
        d[0] = (size - 1) / 2.0
        x = (g + 1) / 2 * (size - 1)
    elif s.coord == C_UNALIGNED:
        d[0] = size / 2.0
        x = ((g + 1) * size - 1) / 2
    else:
        d[0] = 1
        x = g
    if s.coord_pad == PAD_REFLECT:
        if s.coord == C_ALIGNED:
            x = reflect(x, 0, 2.0 * (size - 1), d)
        else:
            x = reflect(x, -1, 2.0 * size - 1, d)
    if s.coord_pad != PAD_NONE:
        x = clip(x, size, d)
    return x


cdef inline Py_ssize_t positive_mod(Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    i = i % n
    return i + n if i < 0 else i


cdef inline Py_ssize_t tap_index(Py_ssize_t i, Py_ssize_t n, Py_ssize_t border) noexcept nogil:
    # Where tap i of an axis of n pixels reads (OpenCV's border modes); -1: the constant
    if 0 <= i < n:
        return i
    if border == B_CONSTANT:
        return -1
    if border == B_REPLICATE or n == 1:
        return 0 if i < 0 else n - 1
    if border == B_WRAP:
        return positive_mod(i, n)
    if border == B_REFLECT:  # fedcba|abcdef|fedcba: period 2n
        i = positive_mod(i, 2 * n)
        return 2 * n - 1 - i if i >= n else i
    i = positive_mod(i, 2 * n - 2)  # reflect_101, gfedcb|abcdefg|fedcba: period 2n - 2
    return 2 * n - 2 - i if i >= n else i


cdef inline double cubic_near(double t) noexcept nogil:  # |t| <= 1, A = -0.75 (PyTorch's)
    return ((1.25 * t - 2.25) * t) * t + 1


cdef inline double cubic_far(double t) noexcept nogil:   # 1 < |t| < 2
    return ((-0.75 * t + 3.75) * t - 6.0) * t + 3.0


cdef inline double cubic_near_d(double t) noexcept nogil:
    return (3.75 * t - 4.5) * t


cdef inline double cubic_far_d(double t) noexcept nogil:
    return (-2.25 * t + 7.5) * t - 6.0


cdef inline void axis_taps(double g, Py_ssize_t size, const Sample* s, Axis* a) noexcept nogil:
    cdef double x = source(g, size, s, &a.dcoord), t
    cdef Py_ssize_t i, first
    a.finite = isfinite(x)
    if not a.finite:
        a.taps = 0
        return
    x = FAR if x > FAR else (-FAR if x < -FAR else x)
    if s.interp == I_NEAREST:
        a.taps, first = 1, <Py_ssize_t>nearbyint(x)
        a.w[0], a.dw[0] = 1, 0
    elif s.interp == I_LINEAR:
        a.taps, first = 2, <Py_ssize_t>floor(x)
        a.w[0], a.w[1] = (first + 1) - x, x - first
        a.dw[0], a.dw[1] = -1, 1
    else:
        a.taps, first = 4, <Py_ssize_t>floor(x) - 1
        t = x - floor(x)
        a.w[0], a.w[1] = cubic_far(t + 1), cubic_near(t)
        a.w[2], a.w[3] = cubic_near(1 - t), cubic_far(2 - t)
        a.dw[0], a.dw[1] = cubic_far_d(t + 1), cubic_near_d(t)
        a.dw[2], a.dw[3] = -cubic_near_d(1 - t), -cubic_far_d(2 - t)
    for i in range(a.taps):
        a.at[i] = tap_index(first + i, size, s.border)


cdef inline void point_taps(const floating* p, const Sample* s, Axis* ax,
                            Axis* ay) noexcept nogil:
    axis_taps(<double>p[0], s.w, s, ax)
    axis_taps(<double>p[1], s.h, s, ay)


cdef inline double tap(const pixel_t* plane, const Sample* s, Py_ssize_t r, Py_ssize_t q,
                       double value) noexcept nogil:
    return value if r < 0 or q < 0 else <double>plane[r * s.w + q]


cdef inline double sample_at(const pixel_t* plane, const Sample* s, const Axis* ax,
                             const Axis* ay, double value) noexcept nogil:
    # Rows first, then across them (PyTorch's order for bicubic); a point that is not finite
    # reads the constant border's value, or NaN under any other border
    cdef double acc = 0, row
    cdef int i, j
    if not (ax.finite and ay.finite):
        return value if s.border == B_CONSTANT else NAN
    for i in range(ay.taps):
        row = 0
        for j in range(ax.taps):
            row += ax.w[j] * tap(plane, s, ay.at[i], ax.at[j], value)
        acc += ay.w[i] * row
    return acc


cdef inline void spread(floating* plane, const Sample* s, const Axis* ax, const Axis* ay,
                        double g) noexcept nogil:
    # The adjoint of sample_at in the plane: each tap inside gets g times its weight
    cdef int i, j
    if not (ax.finite and ay.finite):
        return
    for i in range(ay.taps):
        if ay.at[i] < 0:
            continue
        for j in range(ax.taps):
            if ax.at[j] >= 0:
                plane[ay.at[i] * s.w + ax.at[j]] += <floating>(g * (ay.w[i] * ax.w[j]))


cdef inline void slopes(const floating* plane, const Sample* s, const Axis* ax, const Axis* ay,
                        double value, double* dx, double* dy) noexcept nogil:
    # The sampled value's derivatives in the point's input coordinates (x, y)
    cdef double v
    cdef int i, j
    dx[0] = dy[0] = 0
    if not (ax.finite and ay.finite):
        return
    for i in range(ay.taps):
        for j in range(ax.taps):
            v = tap(plane, s, ay.at[i], ax.at[j], value)
            dx[0] += v * ax.dw[j] * ay.w[i]
            dy[0] += v * ax.w[j] * ay.dw[i]


# -- the sampler's passes ----------------------------------------------------------------------
ctypedef struct SampleRun:
    Sample s
    double value
    const void* x
    const void* grid
    const void* dy
    void* out


cdef inline int sample_points(const SampleRun* r, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    # sample: points [lo, hi) of all images, every channel
    cdef const Sample* s = &r.s
    cdef Py_ssize_t p, b, c, cells = s.oh * s.ow, full = s.h * s.w
    cdef Axis ax, ay
    for p in range(lo, hi):
        b = p // cells
        point_taps(<const floating*>r.grid + 2 * p, s, &ax, &ay)
        for c in range(s.c):
            (<floating*>r.out)[(b * s.c + c) * cells + p % cells] = <floating>sample_at(
                <const floating*>r.x + (b * s.c + c) * full, s, &ax, &ay, r.value)
    return KERNEL_OK


cdef inline int spread_planes(const SampleRun* r, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    # sample_backward_data: planes [lo, hi) of dx, each from its image's points in order
    cdef const Sample* s = &r.s
    cdef Py_ssize_t plane, b, q, cells = s.oh * s.ow, full = s.h * s.w
    cdef floating* dx
    cdef Axis ax, ay
    for plane in range(lo, hi):
        b = plane // s.c
        dx = <floating*>r.out + plane * full
        memset(dx, 0, <size_t>full * sizeof(floating))
        for q in range(cells):
            point_taps(<const floating*>r.grid + 2 * (b * cells + q), s, &ax, &ay)
            spread(dx, s, &ax, &ay, <double>(<const floating*>r.dy)[plane * cells + q])
    return KERNEL_OK


cdef inline int point_grads(const SampleRun* r, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    # sample_backward_points: the gradient of points [lo, hi), summed over channels
    cdef const Sample* s = &r.s
    cdef Py_ssize_t p, b, c, cells = s.oh * s.ow, full = s.h * s.w
    cdef double gx, gy, sx, sy, g
    cdef Axis ax, ay
    for p in range(lo, hi):
        b = p // cells
        point_taps(<const floating*>r.grid + 2 * p, s, &ax, &ay)
        gx = gy = 0
        for c in range(s.c):
            g = <double>(<const floating*>r.dy)[(b * s.c + c) * cells + p % cells]
            slopes(<const floating*>r.x + (b * s.c + c) * full, s, &ax, &ay, r.value, &sx, &sy)
            gx += g * sx
            gy += g * sy
        (<floating*>r.out)[2 * p] = <floating>(gx * ax.dcoord)
        (<floating*>r.out)[2 * p + 1] = <floating>(gy * ay.dcoord)
    return KERNEL_OK


cdef enum SamplePass:
    S_FORWARD, S_DATA, S_POINTS


cdef inline int sample_part(const SampleRun* r, SamplePass which, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    if which == S_FORWARD:
        return sample_points(r, lo, hi, tag)
    if which == S_DATA:
        return spread_planes(r, lo, hi, tag)
    return point_grads(r, lo, hi, tag)


cdef int forward_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_FORWARD, lo, hi, <float*>NULL)
cdef int forward_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_FORWARD, lo, hi, <double*>NULL)
cdef int data_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_DATA, lo, hi, <float*>NULL)
cdef int data_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_DATA, lo, hi, <double*>NULL)
cdef int points_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_POINTS, lo, hi, <float*>NULL)
cdef int points_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_part(<const SampleRun*>ctx, S_POINTS, lo, hi, <double*>NULL)


cdef inline int run_sample(const Call* c, SamplePass which, const void* x, const void* grid,
                           const void* dy, void* out, bint f32) noexcept nogil:
    cdef SampleRun r
    r.s = (<const Sample*>c.ints)[0]
    r.value = c.floats[0]
    r.x, r.grid, r.dy, r.out = x, grid, dy, out
    if which == S_DATA:
        return parallel_for(r.s.threads, r.s.n * r.s.c, data_f32 if f32 else data_f64, &r)
    if which == S_FORWARD:
        return parallel_for(r.s.threads, r.s.n * r.s.oh * r.s.ow,
                            forward_f32 if f32 else forward_f64, &r)
    return parallel_for(r.s.threads, r.s.n * r.s.oh * r.s.ow,
                        points_f32 if f32 else points_f64, &r)
