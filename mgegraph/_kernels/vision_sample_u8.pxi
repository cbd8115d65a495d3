# remap on uint8 images, included by _kernels/vision.pyx after the sampler (vision_sample.pxi):
# a camera's frame read at float32 points, each output the sampler's sum in double (sample_at,
# as for float images), stored by pixels.pxd's round_u8. Forward only: an integer image has no
# gradient.
#   sample_u8:  bufs: x (n, c, h, w) uint8, grid (n, oh, ow, 2) float32, y (n, c, oh, ow) uint8
#               floats: [the constant border's value]

cdef inline int sample_points_u8(const SampleRun* r, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    # points [lo, hi) of all images, every channel (sample_points' loop)
    cdef const Sample* s = &r.s
    cdef Py_ssize_t p, b, c, cells = s.oh * s.ow, full = s.h * s.w
    cdef Axis ax, ay
    for p in range(lo, hi):
        b = p // cells
        point_taps(<const float*>r.grid + 2 * p, s, &ax, &ay)
        for c in range(s.c):
            (<uint8_t*>r.out)[(b * s.c + c) * cells + p % cells] = round_u8(sample_at(
                <const uint8_t*>r.x + (b * s.c + c) * full, s, &ax, &ay, r.value))
    return KERNEL_OK


cdef int forward_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return sample_points_u8(<const SampleRun*>ctx, lo, hi)


cdef int sample_u8(const Call* c) noexcept nogil:
    cdef SampleRun r
    r.s = (<const Sample*>c.ints)[0]
    r.value = c.floats[0]
    r.x, r.grid, r.dy, r.out = c.bufs[0], c.bufs[1], NULL, c.bufs[2]
    return parallel_for(r.s.threads, r.s.n * r.s.oh * r.s.ow, forward_u8, &r)
