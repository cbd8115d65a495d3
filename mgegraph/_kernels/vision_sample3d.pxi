# The volume sampler of _kernels/vision.pyx (grid_sample3d and its gradients), included there
# after the 2-D sampler (vision_sample.pxi), whose per-axis rules it runs on three axes: each
# axis of a point gets its taps and weights from axis_taps as in 2-D, so coordinates, paddings
# and rounding are the 2-D op's. Parameters: the Sample3 struct; bufs as the 2-D sampler's,
# with (n, c, d, h, w) volumes and (n, od, oh, ow, 3) grids of (x, y, z) points.

cdef inline Sample axis_rules(const Sample3* s) noexcept nogil:
    # The fields axis_taps reads, as a 2-D block
    cdef Sample m
    memset(&m, 0, sizeof(Sample))
    m.coord, m.coord_pad, m.interp, m.border = s.coord, s.coord_pad, s.interp, s.border
    return m


ctypedef struct VolumeRun:
    Sample3 s
    Sample rules
    double value
    const void* x
    const void* grid
    const void* dy
    void* out


cdef inline void volume_taps(const floating* p, const VolumeRun* r, Axis* ax, Axis* ay,
                             Axis* az) noexcept nogil:
    axis_taps(<double>p[0], r.s.w, &r.rules, ax)
    axis_taps(<double>p[1], r.s.h, &r.rules, ay)
    axis_taps(<double>p[2], r.s.d, &r.rules, az)


cdef inline double voxel(const floating* volume, const Sample3* s, Py_ssize_t z, Py_ssize_t y,
                         Py_ssize_t x, double value) noexcept nogil:
    return value if z < 0 or y < 0 or x < 0 else <double>volume[(z * s.h + y) * s.w + x]


cdef inline double sample_volume_at(const floating* volume, const VolumeRun* r, const Axis* ax,
                                    const Axis* ay, const Axis* az) noexcept nogil:
    # Rows, then planes, then across them; a point that is not finite reads the constant
    cdef double acc = 0, plane, row
    cdef int i, j, k
    if not (ax.finite and ay.finite and az.finite):
        return r.value if r.s.border == B_CONSTANT else NAN
    for i in range(az.taps):
        plane = 0
        for j in range(ay.taps):
            row = 0
            for k in range(ax.taps):
                row += ax.w[k] * voxel(volume, &r.s, az.at[i], ay.at[j], ax.at[k], r.value)
            plane += ay.w[j] * row
        acc += az.w[i] * plane
    return acc


cdef inline void spread_volume(floating* volume, const Sample3* s, const Axis* ax,
                               const Axis* ay, const Axis* az, double g) noexcept nogil:
    # The adjoint of sample_volume_at: each voxel tap inside gets g times its weight
    cdef int i, j, k
    if not (ax.finite and ay.finite and az.finite):
        return
    for i in range(az.taps):
        if az.at[i] < 0:
            continue
        for j in range(ay.taps):
            if ay.at[j] < 0:
                continue
            for k in range(ax.taps):
                if ax.at[k] >= 0:
                    volume[(az.at[i] * s.h + ay.at[j]) * s.w + ax.at[k]] += <floating>(
                        g * (az.w[i] * (ay.w[j] * ax.w[k])))


cdef inline void volume_slopes(const floating* volume, const VolumeRun* r, const Axis* ax,
                               const Axis* ay, const Axis* az, double* d) noexcept nogil:
    # The sampled value's derivatives in the point's input coordinates (x, y, z)
    cdef double v
    cdef int i, j, k
    d[0] = d[1] = d[2] = 0
    if not (ax.finite and ay.finite and az.finite):
        return
    for i in range(az.taps):
        for j in range(ay.taps):
            for k in range(ax.taps):
                v = voxel(volume, &r.s, az.at[i], ay.at[j], ax.at[k], r.value)
                d[0] += v * ax.dw[k] * ay.w[j] * az.w[i]
                d[1] += v * ax.w[k] * ay.dw[j] * az.w[i]
                d[2] += v * ax.w[k] * ay.w[j] * az.dw[i]


# -- the volume sampler's passes ---------------------------------------------------------------
cdef inline int volume_points(const VolumeRun* r, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    # sample3d: points [lo, hi) of all volumes, every channel
    cdef const Sample3* s = &r.s
    cdef Py_ssize_t p, b, c, cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w
    cdef Axis ax, ay, az
    for p in range(lo, hi):
        b = p // cells
        volume_taps(<const floating*>r.grid + 3 * p, r, &ax, &ay, &az)
        for c in range(s.c):
            (<floating*>r.out)[(b * s.c + c) * cells + p % cells] = <floating>sample_volume_at(
                <const floating*>r.x + (b * s.c + c) * full, r, &ax, &ay, &az)
    return KERNEL_OK


cdef inline int spread_volumes(const VolumeRun* r, Py_ssize_t lo, Py_ssize_t hi,
                               floating* tag) noexcept nogil:
    # sample3d_backward_data: volumes [lo, hi) of dx, each from its batch's points in order
    cdef const Sample3* s = &r.s
    cdef Py_ssize_t vol, b, q, cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w
    cdef floating* dx
    cdef Axis ax, ay, az
    for vol in range(lo, hi):
        b = vol // s.c
        dx = <floating*>r.out + vol * full
        memset(dx, 0, <size_t>full * sizeof(floating))
        for q in range(cells):
            volume_taps(<const floating*>r.grid + 3 * (b * cells + q), r, &ax, &ay, &az)
            spread_volume(dx, s, &ax, &ay, &az, <double>(<const floating*>r.dy)[vol * cells + q])
    return KERNEL_OK


cdef inline int volume_point_grads(const VolumeRun* r, Py_ssize_t lo, Py_ssize_t hi,
                                   floating* tag) noexcept nogil:
    # sample3d_backward_points: the gradient of points [lo, hi), summed over channels
    cdef const Sample3* s = &r.s
    cdef Py_ssize_t p, b, c, cells = s.od * s.oh * s.ow, full = s.d * s.h * s.w
    cdef double gx, gy, gz, g
    cdef double d[3]
    cdef Axis ax, ay, az
    for p in range(lo, hi):
        b = p // cells
        volume_taps(<const floating*>r.grid + 3 * p, r, &ax, &ay, &az)
        gx = gy = gz = 0
        for c in range(s.c):
            g = <double>(<const floating*>r.dy)[(b * s.c + c) * cells + p % cells]
            volume_slopes(<const floating*>r.x + (b * s.c + c) * full, r, &ax, &ay, &az, d)
            gx += g * d[0]
            gy += g * d[1]
            gz += g * d[2]
        (<floating*>r.out)[3 * p] = <floating>(gx * ax.dcoord)
        (<floating*>r.out)[3 * p + 1] = <floating>(gy * ay.dcoord)
        (<floating*>r.out)[3 * p + 2] = <floating>(gz * az.dcoord)
    return KERNEL_OK


cdef inline int volume_part(const VolumeRun* r, SamplePass which, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    if which == S_FORWARD:
        return volume_points(r, lo, hi, tag)
    if which == S_DATA:
        return spread_volumes(r, lo, hi, tag)
    return volume_point_grads(r, lo, hi, tag)


cdef int volume_forward_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_FORWARD, lo, hi, <float*>NULL)
cdef int volume_forward_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_FORWARD, lo, hi, <double*>NULL)
cdef int volume_data_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_DATA, lo, hi, <float*>NULL)
cdef int volume_data_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_DATA, lo, hi, <double*>NULL)
cdef int volume_grads_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_POINTS, lo, hi, <float*>NULL)
cdef int volume_grads_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return volume_part(<const VolumeRun*>ctx, S_POINTS, lo, hi, <double*>NULL)


cdef inline int run_sample3d(const Call* c, SamplePass which, const void* x, const void* grid,
                             const void* dy, void* out, bint f32) noexcept nogil:
    cdef VolumeRun r
    cdef Py_ssize_t points
    r.s = (<const Sample3*>c.ints)[0]
    r.rules = axis_rules(&r.s)
    r.value = c.floats[0]
    r.x, r.grid, r.dy, r.out = x, grid, dy, out
    points = r.s.n * r.s.od * r.s.oh * r.s.ow
    if which == S_DATA:
        return parallel_for(r.s.threads, r.s.n * r.s.c,
                            volume_data_f32 if f32 else volume_data_f64, &r)
    if which == S_FORWARD:
        return parallel_for(r.s.threads, points,
                            volume_forward_f32 if f32 else volume_forward_f64, &r)
    return parallel_for(r.s.threads, points, volume_grads_f32 if f32 else volume_grads_f64, &r)
