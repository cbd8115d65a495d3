# Deformable sampling (deform_im2col, the columns of a modulated deformable convolution) and
# FlowNet's correlation, with their gradients: what the ops mean is mgegraph/ops/deform.py's
# docstring.
#
# Parameter layout (mgegraph/kernel_abi/deform.py packs it): ints, the Im2col or Correlation
# struct below, whose field names this module exports as IM2COL_FIELDS and CORRELATION_FIELDS;
# no floats, no workspace.
#   deform_im2col:           bufs x, offset, mask, cols (N, C*KH*KW, OH, OW)
#   deform_im2col_backward:  bufs x, offset, mask, dcols, dx, doffset, dmask
#   correlation:             bufs data1, data2, out
#   correlation_backward:    bufs data1, data2, dy, d1, d2
# The family's other files: kernel_abi/deform.py, lowering/deform.py, csrc_cuda/deform.cu (the
# same formulas, in the same order), cuda/kernels/deform.py.
#
# Design: sums in double. A sampled point is torchvision's bilinear read: zero (value and
# derivatives) unless -1 < y < H and -1 < x < W, each of its four corners read only inside the
# image. Threads split work no two threads write: the forwards their outputs (planes of
# columns, rows of correlation), deform_im2col_backward its (image, deformable group) pairs
# (which own their channels of dx and their slices of doffset and dmask), correlation_backward
# its (image, channel) planes (a channel's gradient reads only that channel). Each part adds
# in the serial loop's order, so results are bitwise equal at any thread count.

from libc.math cimport floor
from libc.string cimport memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Im2col:
    Py_ssize_t batch, channels, height, width, kernel_h, kernel_w, stride_h, stride_w
    Py_ssize_t pad_h, pad_w, dilation_h, dilation_w, out_h, out_w, groups, threads

ctypedef struct Correlation:
    Py_ssize_t batch, channels, height, width, out_c, out_h, out_w, kernel_radius
    Py_ssize_t max_displacement, grid_radius, stride1, stride2, pad_size, is_multiply, threads

cdef Im2col _im2col
cdef Correlation _correlation
IM2COL_FIELDS = fields_of(_im2col, sizeof(Im2col))
CORRELATION_FIELDS = fields_of(_correlation, sizeof(Correlation))


# -- one sampled point ----------------------------------------------------------------------------
ctypedef struct Point:
    Py_ssize_t index[4]  # the corners (y0, x0), (y0, x0+1), (y0+1, x0), (y0+1, x0+1); -1: outside
    double ly, lx        # the point's fractions past (y0, x0)
    bint inside          # -1 < y < H and -1 < x < W: otherwise value and derivatives are 0


cdef inline void locate(double y, double x, Py_ssize_t h, Py_ssize_t w, Point* p) noexcept nogil:
    cdef double fy, fx
    cdef Py_ssize_t y0, x0, k, cy, cx
    p.inside = y > -1 and y < h and x > -1 and x < w
    p.ly = p.lx = 0
    if not p.inside:
        for k in range(4):
            p.index[k] = -1
        return
    fy, fx = floor(y), floor(x)
    y0, x0 = <Py_ssize_t>fy, <Py_ssize_t>fx
    p.ly, p.lx = y - fy, x - fx
    for k in range(4):
        cy, cx = y0 + k // 2, x0 + k % 2
        p.index[k] = cy * w + cx if 0 <= cy < h and 0 <= cx < w else -1


cdef inline double corner(const floating* plane, const Point* p, int k) noexcept nogil:
    return plane[p.index[k]] if p.index[k] >= 0 else 0.0


cdef inline void weights(const Point* p, double* w) noexcept nogil:
    w[0] = (1 - p.ly) * (1 - p.lx)
    w[1] = (1 - p.ly) * p.lx
    w[2] = p.ly * (1 - p.lx)
    w[3] = p.ly * p.lx


cdef inline double bilinear(const floating* plane, const Point* p) noexcept nogil:
    cdef double w[4]
    if not p.inside:
        return 0.0
    weights(p, w)
    return (w[0] * corner(plane, p, 0) + w[1] * corner(plane, p, 1)
            + w[2] * corner(plane, p, 2) + w[3] * corner(plane, p, 3))


cdef inline void point_of(const Im2col* s, const floating* offset, Py_ssize_t n, Py_ssize_t g,
                          Py_ssize_t k, Py_ssize_t cell, Point* p) noexcept nogil:
    # tap k of output cell `cell`, moved by deformable group g's offset pair
    cdef Py_ssize_t cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w
    cdef const floating* pair = offset + ((n * s.groups + g) * taps + k) * 2 * cells + cell
    cdef double y = (cell // s.out_w * s.stride_h - s.pad_h + k // s.kernel_w * s.dilation_h
                     + pair[0])
    cdef double x = (cell % s.out_w * s.stride_w - s.pad_w + k % s.kernel_w * s.dilation_w
                     + pair[cells])
    locate(y, x, s.height, s.width, p)


# -- deform_im2col: planes (n, c) of columns split among threads -----------------------------------
ctypedef struct Run:
    const void* s
    const char* a    # x, or data1
    const char* b    # offset, or data2
    const char* m    # mask, or dy
    const char* g    # dcols
    char* o0         # cols, dx, out or d1
    char* o1         # doffset, or d2
    char* o2         # dmask


cdef inline int im2col_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi, floating* _) noexcept nogil:
    cdef const Im2col* s = <const Im2col*>r.s
    cdef const floating* x = <const floating*>r.a
    cdef const floating* offset = <const floating*>r.b
    cdef const floating* mask = <const floating*>r.m
    cdef floating* cols = <floating*>r.o0
    cdef Py_ssize_t cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w
    cdef Py_ssize_t unit, n, c, g, k, cell
    cdef const floating* plane
    cdef const floating* m
    cdef floating* out
    cdef Point p
    for unit in range(lo, hi):
        n, c = unit // s.channels, unit % s.channels
        g = c // (s.channels // s.groups)
        plane = x + unit * s.height * s.width
        for k in range(taps):
            m = mask + ((n * s.groups + g) * taps + k) * cells
            out = cols + (unit * taps + k) * cells
            for cell in range(cells):
                point_of(s, offset, n, g, k, cell, &p)
                out[cell] = <floating>(m[cell] * bilinear(plane, &p))
    return KERNEL_OK


cdef int im2col_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return im2col_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int im2col_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return im2col_part(<const Run*>ctx, lo, hi, <double*>NULL)


# -- deform_im2col_backward: (image, deformable group) pairs split among threads -------------------
cdef inline void point_grad(const floating* plane, const Point* p, double gv, floating* dplane,
                            double* dy, double* dx) noexcept nogil:
    # gv = d loss / d value: scattered onto the corners inside the image, and the value's
    # derivatives along y and x (the bilinear form's) added to dy, dx
    cdef double w[4]
    cdef double v[4]
    cdef int k
    if not p.inside:
        return
    weights(p, w)
    for k in range(4):
        v[k] = corner(plane, p, k)
        if p.index[k] >= 0:
            dplane[p.index[k]] += <floating>(gv * w[k])
    dy[0] += gv * ((1 - p.lx) * (v[2] - v[0]) + p.lx * (v[3] - v[1]))
    dx[0] += gv * ((1 - p.ly) * (v[1] - v[0]) + p.ly * (v[3] - v[2]))


cdef inline int im2col_backward_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi,
                                     floating* _) noexcept nogil:
    cdef const Im2col* s = <const Im2col*>r.s
    cdef const floating* x = <const floating*>r.a
    cdef const floating* offset = <const floating*>r.b
    cdef const floating* mask = <const floating*>r.m
    cdef const floating* dcols = <const floating*>r.g
    cdef floating* dx = <floating*>r.o0
    cdef floating* doffset = <floating*>r.o1
    cdef floating* dmask = <floating*>r.o2
    cdef Py_ssize_t cells = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w
    cdef Py_ssize_t per_group = s.channels // s.groups, plane = s.height * s.width
    cdef Py_ssize_t unit, n, g, k, cell, c, slot
    cdef double gm, gy, gx, gv, m
    cdef Point p
    memset(dx + lo * per_group * plane, 0, <size_t>((hi - lo) * per_group * plane)
           * sizeof(floating))
    for unit in range(lo, hi):
        n, g = unit // s.groups, unit % s.groups
        for k in range(taps):
            slot = (unit * taps + k) * cells
            for cell in range(cells):
                point_of(s, offset, n, g, k, cell, &p)
                m = mask[slot + cell]
                gm = gy = gx = 0
                for c in range(g * per_group, (g + 1) * per_group):
                    gv = dcols[((n * s.channels + c) * taps + k) * cells + cell]
                    gm += gv * bilinear(x + (n * s.channels + c) * plane, &p)
                    point_grad(x + (n * s.channels + c) * plane, &p, gv * m,
                               dx + (n * s.channels + c) * plane, &gy, &gx)
                dmask[slot + cell] = <floating>gm
                doffset[2 * slot + cell] = <floating>gy
                doffset[2 * slot + cells + cell] = <floating>gx
    return KERNEL_OK


cdef int im2col_backward_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return im2col_backward_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int im2col_backward_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return im2col_backward_part(<const Run*>ctx, lo, hi, <double*>NULL)


# -- correlation: output rows (n, o, oy) split among threads ---------------------------------------
cdef inline double read(const floating* plane, const Correlation* s, Py_ssize_t y,
                        Py_ssize_t x) noexcept nogil:
    return plane[y * s.width + x] if 0 <= y < s.height and 0 <= x < s.width else 0.0


cdef inline int correlation_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi,
                                 floating* _) noexcept nogil:
    cdef const Correlation* s = <const Correlation*>r.s
    cdef const floating* a = <const floating*>r.a
    cdef const floating* b = <const floating*>r.b
    cdef floating* out = <floating*>r.o0
    cdef Py_ssize_t width = 2 * s.grid_radius + 1, k = s.kernel_radius, plane = s.height * s.width
    cdef Py_ssize_t row, n, o, oy, ox, y1, x1, dy, dx, i, j, c
    cdef double acc, t1, t2, count = (2 * k + 1) * (2 * k + 1) * s.channels
    for row in range(lo, hi):
        oy, o, n = row % s.out_h, row // s.out_h % s.out_c, row // (s.out_h * s.out_c)
        dy = (o // width - s.grid_radius) * s.stride2
        dx = (o % width - s.grid_radius) * s.stride2
        y1 = oy * s.stride1 + k + s.max_displacement - s.pad_size
        for ox in range(s.out_w):
            x1 = ox * s.stride1 + k + s.max_displacement - s.pad_size
            acc = 0
            for i in range(-k, k + 1):
                for j in range(-k, k + 1):
                    for c in range(s.channels):
                        t1 = read(a + (n * s.channels + c) * plane, s, y1 + i, x1 + j)
                        t2 = read(b + (n * s.channels + c) * plane, s, y1 + dy + i, x1 + dx + j)
                        acc += t1 * t2 if s.is_multiply else (t1 - t2 if t1 > t2 else t2 - t1)
            out[row * s.out_w + ox] = <floating>(acc / count)
    return KERNEL_OK


cdef int correlation_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return correlation_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int correlation_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return correlation_part(<const Run*>ctx, lo, hi, <double*>NULL)


# -- correlation_backward: planes (n, c) of both gradients split among threads ---------------------
cdef inline bint within(const Correlation* s, Py_ssize_t y, Py_ssize_t x) noexcept nogil:
    return 0 <= y < s.height and 0 <= x < s.width


cdef inline void correlation_pair_grad(const Correlation* s, const floating* a,
                                       const floating* b, floating* d1, floating* d2,
                                       Py_ssize_t y1, Py_ssize_t x1, Py_ssize_t y2, Py_ssize_t x2,
                                       double g) noexcept nogil:
    # one term f(a[y1, x1], b[y2, x2]) of an output whose gradient (over the count) is g
    cdef double t1 = read(a, s, y1, x1), t2 = read(b, s, y2, x2)
    if within(s, y1, x1):
        d1[y1 * s.width + x1] += <floating>(g * (t2 if s.is_multiply else
                                                 (1.0 if t1 > t2 else -1.0)))
    if within(s, y2, x2):
        d2[y2 * s.width + x2] += <floating>(g * (t1 if s.is_multiply else
                                                 (-1.0 if t1 >= t2 else 1.0)))


cdef inline int correlation_backward_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi,
                                          floating* _) noexcept nogil:
    cdef const Correlation* s = <const Correlation*>r.s
    cdef const floating* dout = <const floating*>r.m
    cdef floating* d1
    cdef floating* d2
    cdef const floating* a
    cdef const floating* b
    cdef Py_ssize_t width = 2 * s.grid_radius + 1, k = s.kernel_radius, plane = s.height * s.width
    cdef Py_ssize_t unit, n, o, oy, ox, y1, x1, dy, dx, i, j
    cdef double g, count = (2 * k + 1) * (2 * k + 1) * s.channels
    memset(<floating*>r.o0 + lo * plane, 0, <size_t>((hi - lo) * plane) * sizeof(floating))
    memset(<floating*>r.o1 + lo * plane, 0, <size_t>((hi - lo) * plane) * sizeof(floating))
    for unit in range(lo, hi):
        n = unit // s.channels
        a, b = <const floating*>r.a + unit * plane, <const floating*>r.b + unit * plane
        d1, d2 = <floating*>r.o0 + unit * plane, <floating*>r.o1 + unit * plane
        for o in range(s.out_c):
            dy = (o // width - s.grid_radius) * s.stride2
            dx = (o % width - s.grid_radius) * s.stride2
            for oy in range(s.out_h):
                for ox in range(s.out_w):
                    g = dout[((n * s.out_c + o) * s.out_h + oy) * s.out_w + ox] / count
                    y1 = oy * s.stride1 + k + s.max_displacement - s.pad_size
                    x1 = ox * s.stride1 + k + s.max_displacement - s.pad_size
                    for i in range(-k, k + 1):
                        for j in range(-k, k + 1):
                            correlation_pair_grad(s, a, b, d1, d2, y1 + i, x1 + j,
                                                  y1 + dy + i, x1 + dx + j, g)
    return KERNEL_OK


cdef int correlation_backward_f32(void* ctx, int part, Py_ssize_t lo,
                                  Py_ssize_t hi) noexcept nogil:
    return correlation_backward_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int correlation_backward_f64(void* ctx, int part, Py_ssize_t lo,
                                  Py_ssize_t hi) noexcept nogil:
    return correlation_backward_part(<const Run*>ctx, lo, hi, <double*>NULL)


# -- entry points: one per (kernel family, dtype) --------------------------------------------------
cdef inline int im2col_impl(const Call* c, floating* _) noexcept nogil:
    cdef const Im2col* s = <const Im2col*>c.ints
    cdef Run r
    r.s, r.a, r.b, r.m, r.o0 = s, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3]
    return parallel_for(s.threads, s.batch * s.channels,
                        im2col_f32 if floating is float else im2col_f64, &r)


cdef inline int im2col_backward_impl(const Call* c, floating* _) noexcept nogil:
    cdef const Im2col* s = <const Im2col*>c.ints
    cdef Run r
    r.s, r.a, r.b, r.m, r.g = s, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3]
    r.o0, r.o1, r.o2 = c.bufs[4], c.bufs[5], c.bufs[6]
    return parallel_for(s.threads, s.batch * s.groups,
                        im2col_backward_f32 if floating is float else im2col_backward_f64, &r)


cdef inline int correlation_impl(const Call* c, floating* _) noexcept nogil:
    cdef const Correlation* s = <const Correlation*>c.ints
    cdef Run r
    r.s, r.a, r.b, r.o0 = s, c.bufs[0], c.bufs[1], c.bufs[2]
    return parallel_for(s.threads, s.batch * s.out_c * s.out_h,
                        correlation_f32 if floating is float else correlation_f64, &r)


cdef inline int correlation_backward_impl(const Call* c, floating* _) noexcept nogil:
    cdef const Correlation* s = <const Correlation*>c.ints
    cdef Run r
    r.s, r.a, r.b, r.m = s, c.bufs[0], c.bufs[1], c.bufs[2]
    r.o0, r.o1 = c.bufs[3], c.bufs[4]
    return parallel_for(s.threads, s.batch * s.channels,
                        correlation_backward_f32 if floating is float
                        else correlation_backward_f64, &r)


cdef int deform_im2col_f32(const Call* c) noexcept nogil:
    return im2col_impl(c, <float*>NULL)
cdef int deform_im2col_f64(const Call* c) noexcept nogil:
    return im2col_impl(c, <double*>NULL)
cdef int deform_im2col_backward_f32(const Call* c) noexcept nogil:
    return im2col_backward_impl(c, <float*>NULL)
cdef int deform_im2col_backward_f64(const Call* c) noexcept nogil:
    return im2col_backward_impl(c, <double*>NULL)
cdef int correlation_kernel_f32(const Call* c) noexcept nogil:
    return correlation_impl(c, <float*>NULL)
cdef int correlation_kernel_f64(const Call* c) noexcept nogil:
    return correlation_impl(c, <double*>NULL)
cdef int correlation_backward_kernel_f32(const Call* c) noexcept nogil:
    return correlation_backward_impl(c, <float*>NULL)
cdef int correlation_backward_kernel_f64(const Call* c) noexcept nogil:
    return correlation_backward_impl(c, <double*>NULL)

KERNELS = {
    "deform_im2col_f32": kernel_address(deform_im2col_f32),
    "deform_im2col_f64": kernel_address(deform_im2col_f64),
    "deform_im2col_backward_f32": kernel_address(deform_im2col_backward_f32),
    "deform_im2col_backward_f64": kernel_address(deform_im2col_backward_f64),
    "correlation_f32": kernel_address(correlation_kernel_f32),
    "correlation_f64": kernel_address(correlation_kernel_f64),
    "correlation_backward_f32": kernel_address(correlation_backward_kernel_f32),
    "correlation_backward_f64": kernel_address(correlation_backward_kernel_f64),
}
