# Detection and geometry kernels over NCHW images: a point sampler (grid_sample, remap and their
# gradients), region pooling (roi_align, roi_pooling and their gradients) and non-maximum
# suppression. The rest of the family: ops/vision.py (meaning), kernel_abi/vision.py (the
# blocks and how each op's attributes map onto the sampler), lowering/vision.py, and the CUDA
# twin csrc_cuda/vision.cu, which gives these kernels' results bitwise.
#
# Parameter layouts (ints): the Sample, Roi and Nms structs below, whose field names this module
# exports (SAMPLE_FIELDS, ROI_FIELDS, NMS_FIELDS) with the codes of their enums; floats:
#   sample:                  bufs: x (n, c, h, w), grid (n, oh, ow, 2), y (n, c, oh, ow)
#   sample_backward_data:    bufs: grid, dy, dx
#   sample_backward_points:  bufs: x, grid, dy, dgrid
#       floats: [the constant border's value]
#   roi:                     bufs: x, rois (k, 5), y (k, c, oh, ow)
#   roi_backward:            bufs: x, rois, dy, dx
#   roi_backward_rois:       bufs: x, rois, dy, drois (roi_align only)
#       floats: [scale, offset]
#   nms:                     bufs: boxes (n, 4), scores (n,), keep (max_output,) int32,
#                            workspace (2 * n indices)     floats: [iou threshold]
#
# Design: coordinates and weights are computed in double for both dtypes, so float32 results
# stay within an ulp or two of PyTorch's and MegEngine's float arithmetic, and the CUDA twin
# repeats the same operations. Scatters (the data gradients) run per plane (sampler) or per
# channel (regions), each thread owning whole planes of dx and adding in one fixed order, so
# results are bitwise the same at any thread count; forward passes split over output points.
# uint8 images would enter where a tap is read (sample_at, bilinear) and a result stored.

from libc.math cimport INFINITY, NAN, ceil, fabs, floor, fmod, isfinite, nearbyint, round
from libc.string cimport memset
from cython cimport floating

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_INDEX_OUT_OF_RANGE, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Sample:
    Py_ssize_t coord, coord_pad, interp, border, n, c, h, w, oh, ow, threads

ctypedef struct Roi:
    Py_ssize_t kind, mode, n, c, h, w, k, oh, ow, sh, sw, threads

ctypedef struct Nms:
    Py_ssize_t boxes, max_output

cdef enum Coord:
    C_ALIGNED, C_UNALIGNED, C_PIXEL
cdef enum CoordPad:
    PAD_NONE, PAD_CLIP, PAD_REFLECT
cdef enum Interp:
    I_NEAREST, I_LINEAR, I_CUBIC
cdef enum Border:
    B_CONSTANT, B_REPLICATE, B_REFLECT, B_REFLECT_101, B_WRAP
cdef enum RoiKind:
    R_ALIGN, R_ALIGN_ONNX, R_POOLING
cdef enum RoiMode:
    M_AVERAGE, M_MAX

COORDS = {"aligned": C_ALIGNED, "unaligned": C_UNALIGNED, "pixel": C_PIXEL}
COORD_PADS = {"none": PAD_NONE, "clip": PAD_CLIP, "reflect": PAD_REFLECT}
INTERPS = {"nearest": I_NEAREST, "linear": I_LINEAR, "cubic": I_CUBIC}
BORDERS = {"constant": B_CONSTANT, "replicate": B_REPLICATE, "reflect": B_REFLECT,
           "reflect_101": B_REFLECT_101, "wrap": B_WRAP}
ROI_KINDS = {"align": R_ALIGN, "align_onnx": R_ALIGN_ONNX, "pooling": R_POOLING}
ROI_MODES = {"average": M_AVERAGE, "max": M_MAX}

cdef Sample _sample
cdef Roi _roi
cdef Nms _nms
SAMPLE_FIELDS = fields_of(_sample, sizeof(Sample))
ROI_FIELDS = fields_of(_roi, sizeof(Roi))
NMS_FIELDS = fields_of(_nms, sizeof(Nms))

cdef double FAR = 4503599627370496.0  # 2**52: past it every double is an integer


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


cdef inline double tap(const floating* plane, const Sample* s, Py_ssize_t r, Py_ssize_t q,
                       double value) noexcept nogil:
    return value if r < 0 or q < 0 else <double>plane[r * s.w + q]


cdef inline double sample_at(const floating* plane, const Sample* s, const Axis* ax,
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


# -- region pooling ------------------------------------------------------------------------------
# roi_align comes in two conventions: MegEngine's (R_ALIGN: boxes at least empty, taps outside
# the image read 0) and ONNX's RoiAlign, which is torchvision's (R_ALIGN_ONNX: unaligned boxes
# at least a pixel, points clamped into the image and 0 only beyond a pixel outside, max taken
# over the weighted taps). sh = sw = 0 takes ceil(bin size) samples per bin and axis per box.
ctypedef struct Box:
    Py_ssize_t image
    double x0, y0, bin_h, bin_w       # roi_align: its corner and bin sizes, in input pixels
    Py_ssize_t sh, sw                 # roi_align: its samples per bin
    bint grow_h, grow_w               # roi_align: its bins grow with its far corner (unclamped)
    Py_ssize_t px0, py0               # roi_pooling: its rounded corner


cdef enum:
    MAX_SAMPLES = 65536  # per bin and axis: an adaptive count past it is a box no image holds


cdef inline double far_clamp(double v) noexcept nogil:
    return FAR if v > FAR else (-FAR if v < -FAR else v)


cdef inline bint unclamped(double lo, double hi, const Roi* s, double offset) noexcept nogil:
    # a box side is hi - lo: MegEngine's at least 0; ONNX's at least 1 unless half-pixel
    if s.kind == R_ALIGN:
        return hi > lo
    return offset != 0 or hi - lo > 1


cdef inline double extent(double lo, double hi, const Roi* s, double offset) noexcept nogil:
    if unclamped(lo, hi, s, offset):
        return hi - lo
    return 0 if s.kind == R_ALIGN else 1


cdef inline int samples(Py_ssize_t fixed, double bin, Py_ssize_t* count) noexcept nogil:
    count[0] = fixed if fixed > 0 else (<Py_ssize_t>ceil(bin) if bin > 0 else 0)
    return KERNEL_BAD_VALUE if count[0] > MAX_SAMPLES else KERNEL_OK


cdef inline int read_box(const floating* roi, const Roi* s, double scale, double offset,
                         Box* box) noexcept nogil:
    # roi_align's box scaled and shifted by -offset; roi_pooling's corners rounded (half away
    # from zero), at least one pixel wide
    cdef double b = <double>roi[0], x1, y1
    cdef Py_ssize_t i
    for i in range(1, 5):
        if not isfinite(<double>roi[i]):
            return KERNEL_BAD_VALUE
    if not (b >= 0 and b < s.n and b == floor(b)):
        return KERNEL_INDEX_OUT_OF_RANGE
    box.image = <Py_ssize_t>b
    if s.kind != R_POOLING:
        box.x0 = far_clamp(roi[1] * scale - offset)
        box.y0 = far_clamp(roi[2] * scale - offset)
        x1, y1 = far_clamp(roi[3] * scale - offset), far_clamp(roi[4] * scale - offset)
        box.bin_w = extent(box.x0, x1, s, offset) / s.ow
        box.bin_h = extent(box.y0, y1, s, offset) / s.oh
        box.grow_w, box.grow_h = unclamped(box.x0, x1, s, offset), unclamped(box.y0, y1, s, offset)
        if samples(s.sh, box.bin_h, &box.sh) != KERNEL_OK:
            return KERNEL_BAD_VALUE
        return samples(s.sw, box.bin_w, &box.sw)
    box.px0 = <Py_ssize_t>round(far_clamp(roi[1] * scale))
    box.py0 = <Py_ssize_t>round(far_clamp(roi[2] * scale))
    x1, y1 = round(far_clamp(roi[3] * scale)), round(far_clamp(roi[4] * scale))
    box.bin_w = (x1 - box.px0 + 1 if x1 - box.px0 + 1 > 1 else 1) / <double>s.ow
    box.bin_h = (y1 - box.py0 + 1 if y1 - box.py0 + 1 > 1 else 1) / <double>s.oh
    return KERNEL_OK


cdef inline double bilinear(const floating* plane, const Roi* s, double y, double x,
                            floating* dplane, double g, double* tapmax) noexcept nogil:
    # The value at (y, x) in the box's convention (above); tapmax: the largest weighted tap.
    # With dplane, adds g times each tap's weight there instead (the adjoint).
    cdef Py_ssize_t h0, w0, i, j, r, q
    cdef double v[4]
    cdef double wts[4]
    cdef double top, bottom, fy, fx
    cdef bint onnx = s.kind == R_ALIGN_ONNX
    tapmax[0] = 0
    if onnx:
        if y < -1 or y > s.h or x < -1 or x > s.w:
            return 0
        y = (y if y > 0 else 0) if y < s.h - 1 else <double>(s.h - 1)
        x = (x if x > 0 else 0) if x < s.w - 1 else <double>(s.w - 1)
    h0, w0 = <Py_ssize_t>floor(y), <Py_ssize_t>floor(x)
    fy, fx = y - h0, x - w0
    wts[0], wts[1] = (1 - fy) * (1 - fx), (1 - fy) * fx
    wts[2], wts[3] = fy * (1 - fx), fy * fx
    for i in range(2):
        for j in range(2):
            r, q = h0 + i, w0 + j
            v[2 * i + j] = 0
            if 0 <= r < s.h and 0 <= q < s.w:
                if dplane != NULL:
                    dplane[r * s.w + q] += <floating>(g * wts[2 * i + j])
                else:
                    v[2 * i + j] = <double>plane[r * s.w + q]
    if onnx:  # ONNX Runtime's order of operations
        tapmax[0] = max(max(max(wts[0] * v[0], wts[1] * v[1]), wts[2] * v[2]), wts[3] * v[3])
        return wts[0] * v[0] + wts[1] * v[1] + wts[2] * v[2] + wts[3] * v[3]
    top = v[0] + (v[1] - v[0]) * fx
    bottom = v[2] + (v[3] - v[2]) * fx
    return top + (bottom - top) * fy


cdef inline void align_point(const Box* box, Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t i,
                             double* y, double* x) noexcept nogil:
    # sample i (row-major over the box's sh x sw) of bin (ph, pw)
    y[0] = box.y0 + box.bin_h * (ph + (i // box.sw + 0.5) / box.sh)
    x[0] = box.x0 + box.bin_w * (pw + (i % box.sw + 0.5) / box.sw)


cdef inline bint better(double v, double m) noexcept nogil:
    # v replaces the maximum m so far: larger, or the first NaN
    return v > m or (v != v and m == m)


cdef inline double align_bin(const floating* plane, const Roi* s, const Box* box,
                             Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t* arg) noexcept nogil:
    # The bin's average, or its maximum with ``arg`` the sample it came from; 0 without samples
    cdef double acc = 0, m = -INFINITY, v, y, x, tapmax
    cdef Py_ssize_t i, count = box.sh * box.sw
    arg[0] = 0
    if count == 0:
        return 0
    for i in range(count):
        align_point(box, ph, pw, i, &y, &x)
        v = bilinear(plane, s, y, x, NULL, 0, &tapmax)
        acc += v
        v = tapmax if s.kind == R_ALIGN_ONNX else v
        if better(v, m):
            m, arg[0] = v, i
    return m if s.mode == M_MAX else acc / count


cdef inline void pool_window(const Roi* s, const Box* box, Py_ssize_t ph, Py_ssize_t pw,
                             Py_ssize_t* h0, Py_ssize_t* h1, Py_ssize_t* w0,
                             Py_ssize_t* w1) noexcept nogil:
    h0[0] = min(max(<Py_ssize_t>floor(ph * box.bin_h) + box.py0, 0), s.h)
    h1[0] = min(max(<Py_ssize_t>ceil((ph + 1) * box.bin_h) + box.py0, 0), s.h)
    w0[0] = min(max(<Py_ssize_t>floor(pw * box.bin_w) + box.px0, 0), s.w)
    w1[0] = min(max(<Py_ssize_t>ceil((pw + 1) * box.bin_w) + box.px0, 0), s.w)


cdef inline double pool_bin(const floating* plane, const Roi* s, const Box* box,
                            Py_ssize_t ph, Py_ssize_t pw, Py_ssize_t* arg) noexcept nogil:
    # The window's average or maximum (arg: its offset in the plane; -1 and 0 when empty)
    cdef Py_ssize_t h0, h1, w0, w1, r, q
    cdef double acc = 0, m = -INFINITY, v
    pool_window(s, box, ph, pw, &h0, &h1, &w0, &w1)
    arg[0] = -1
    if h1 <= h0 or w1 <= w0:
        return 0
    for r in range(h0, h1):
        for q in range(w0, w1):
            v = <double>plane[r * s.w + q]
            acc += v
            if better(v, m):
                m, arg[0] = v, r * s.w + q
    return m if s.mode == M_MAX else acc / ((h1 - h0) * (w1 - w0))


ctypedef struct RoiRun:
    Roi s
    double scale, offset
    const void* x
    const void* rois
    const void* dy
    void* out


cdef inline int roi_cells(const RoiRun* r, Py_ssize_t lo, Py_ssize_t hi,
                          floating* tag) noexcept nogil:
    # roi: the bins of planes [lo, hi) of the (k, c) output
    cdef const Roi* s = &r.s
    cdef Py_ssize_t plane, cell, arg, cells = s.oh * s.ow
    cdef const floating* img
    cdef floating* y
    cdef Box box
    cdef int status
    for plane in range(lo, hi):
        status = read_box(<const floating*>r.rois + 5 * (plane // s.c), s, r.scale, r.offset,
                          &box)
        if status != KERNEL_OK:
            return status
        img = <const floating*>r.x + (box.image * s.c + plane % s.c) * s.h * s.w
        y = <floating*>r.out + plane * cells
        for cell in range(cells):
            if s.kind != R_POOLING:
                y[cell] = <floating>align_bin(img, s, &box, cell // s.ow, cell % s.ow, &arg)
            else:
                y[cell] = <floating>pool_bin(img, s, &box, cell // s.ow, cell % s.ow, &arg)
    return KERNEL_OK


cdef inline void roi_spread(const floating* img, floating* dimg, const Roi* s, const Box* box,
                            Py_ssize_t ph, Py_ssize_t pw, double g) noexcept nogil:
    # One bin's gradient g back to the cells it read (ONNX's max has none: its rule refuses)
    cdef Py_ssize_t arg, i, h0, h1, w0, w1, r, q, count = box.sh * box.sw
    cdef double y, x, share, unused
    if s.kind != R_POOLING:
        if s.mode == M_MAX and count > 0:
            align_bin(img, s, box, ph, pw, &arg)
            align_point(box, ph, pw, arg, &y, &x)
            bilinear(img, s, y, x, dimg, g, &unused)
            return
        share = g / count if count > 0 else 0
        for i in range(count if s.mode != M_MAX else 0):
            align_point(box, ph, pw, i, &y, &x)
            bilinear(img, s, y, x, dimg, share, &unused)
    elif s.mode == M_MAX:
        pool_bin(img, s, box, ph, pw, &arg)
        if arg >= 0:
            dimg[arg] += <floating>g
    else:
        pool_window(s, box, ph, pw, &h0, &h1, &w0, &w1)
        if h1 <= h0 or w1 <= w0:
            return
        share = g / ((h1 - h0) * (w1 - w0))
        for r in range(h0, h1):
            for q in range(w0, w1):
                dimg[r * s.w + q] += <floating>share


cdef inline int roi_channels(const RoiRun* r, Py_ssize_t lo, Py_ssize_t hi,
                             floating* tag) noexcept nogil:
    # roi_backward: channels [lo, hi) of dx, from every box and bin in order
    cdef const Roi* s = &r.s
    cdef Py_ssize_t c, b, k, cell, full = s.h * s.w, cells = s.oh * s.ow, at
    cdef Box box
    cdef int status
    for c in range(lo, hi):
        for b in range(s.n):
            memset(<floating*>r.out + (b * s.c + c) * full, 0, <size_t>full * sizeof(floating))
        for k in range(s.k):
            status = read_box(<const floating*>r.rois + 5 * k, s, r.scale, r.offset, &box)
            if status != KERNEL_OK:
                return status
            at = (box.image * s.c + c) * full
            for cell in range(cells):
                roi_spread(<const floating*>r.x + at, <floating*>r.out + at, s, &box,
                           cell // s.ow, cell % s.ow,
                           <double>(<const floating*>r.dy)[(k * s.c + c) * cells + cell])
    return KERNEL_OK


# -- roi_align's gradient in its boxes ---------------------------------------------------------
# A sample at fraction t = (bin + (i + 0.5) / samples) / bins of a side moves with its corners:
# y = y0 (1 - t) + y1 t (or y0 + t * size when the side is clamped), so dy/dy0 = scale (1 - t)
# and dy/dy1 = scale t; the value's slope at the sample comes from its four taps.
cdef inline void slopes_at(const floating* plane, const Roi* s, double y, double x,
                           double* gy, double* gx) noexcept nogil:
    # d value / d (y, x) at a sample, in the box's convention (0 where a clamp holds it)
    cdef Py_ssize_t h0, w0, i, j, r, q
    cdef double v[4]
    cdef double fy, fx, ky = 1, kx = 1
    gy[0] = gx[0] = 0
    if s.kind == R_ALIGN_ONNX:
        if y < -1 or y > s.h or x < -1 or x > s.w:
            return
        if y <= 0 or y >= s.h - 1:
            ky, y = 0, (0 if y <= 0 else <double>(s.h - 1))
        if x <= 0 or x >= s.w - 1:
            kx, x = 0, (0 if x <= 0 else <double>(s.w - 1))
    h0, w0 = <Py_ssize_t>floor(y), <Py_ssize_t>floor(x)
    fy, fx = y - h0, x - w0
    for i in range(2):
        for j in range(2):
            r, q = h0 + i, w0 + j
            v[2 * i + j] = <double>plane[r * s.w + q] if 0 <= r < s.h and 0 <= q < s.w else 0
    gy[0] = ky * ((v[2] - v[0]) * (1 - fx) + (v[3] - v[1]) * fx)
    gx[0] = kx * ((v[1] - v[0]) * (1 - fy) + (v[3] - v[2]) * fy)


cdef inline void box_slopes(const floating* img, const Roi* s, const Box* box, Py_ssize_t ph,
                            Py_ssize_t pw, double g, double scale, double* d) noexcept nogil:
    # adds one bin's gradient g into d = d(x0, y0, x1, y1) of its box
    cdef Py_ssize_t i, first = 0, count = box.sh * box.sw, arg
    cdef double y, x, gy, gx, ty, tx, w = g / count if count > 0 else 0
    if count == 0:
        return
    if s.mode == M_MAX:
        align_bin(img, s, box, ph, pw, &arg)
        first, count, w = arg, arg + 1, g
    for i in range(first, count):
        align_point(box, ph, pw, i, &y, &x)
        slopes_at(img, s, y, x, &gy, &gx)
        ty = (ph + (i // box.sw + 0.5) / box.sh) / s.oh
        tx = (pw + (i % box.sw + 0.5) / box.sw) / s.ow
        d[0] += w * gx * scale * (1 - tx if box.grow_w else 1)
        d[1] += w * gy * scale * (1 - ty if box.grow_h else 1)
        d[2] += w * gx * scale * (tx if box.grow_w else 0)
        d[3] += w * gy * scale * (ty if box.grow_h else 0)


cdef inline int roi_boxes(const RoiRun* r, Py_ssize_t lo, Py_ssize_t hi,
                          floating* tag) noexcept nogil:
    # roi_backward_rois: the gradients of boxes [lo, hi), over their channels and bins in order
    cdef const Roi* s = &r.s
    cdef Py_ssize_t k, c, cell, cells = s.oh * s.ow, full = s.h * s.w
    cdef double d[4]
    cdef floating* out
    cdef Box box
    cdef int status
    for k in range(lo, hi):
        status = read_box(<const floating*>r.rois + 5 * k, s, r.scale, r.offset, &box)
        if status != KERNEL_OK:
            return status
        d[0] = d[1] = d[2] = d[3] = 0
        for c in range(s.c):
            for cell in range(cells):
                box_slopes(<const floating*>r.x + (box.image * s.c + c) * full, s, &box,
                           cell // s.ow, cell % s.ow,
                           <double>(<const floating*>r.dy)[(k * s.c + c) * cells + cell],
                           r.scale, d)
        out = <floating*>r.out + 5 * k
        out[0] = 0  # the batch index: no gradient
        for c in range(4):
            out[1 + c] = <floating>d[c]
    return KERNEL_OK


cdef int roi_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_cells(<const RoiRun*>ctx, lo, hi, <float*>NULL)
cdef int roi_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_cells(<const RoiRun*>ctx, lo, hi, <double*>NULL)
cdef int roi_back_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_channels(<const RoiRun*>ctx, lo, hi, <float*>NULL)
cdef int roi_back_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_channels(<const RoiRun*>ctx, lo, hi, <double*>NULL)
cdef int roi_rois_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_boxes(<const RoiRun*>ctx, lo, hi, <float*>NULL)
cdef int roi_rois_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return roi_boxes(<const RoiRun*>ctx, lo, hi, <double*>NULL)


cdef enum RoiPass:
    P_FORWARD, P_DATA, P_BOXES


cdef inline int run_roi(const Call* c, RoiPass which, bint f32) noexcept nogil:
    cdef RoiRun r
    cdef bint backward = which != P_FORWARD
    r.s = (<const Roi*>c.ints)[0]
    r.scale, r.offset = c.floats[0], c.floats[1]
    r.x, r.rois = c.bufs[0], c.bufs[1]
    r.dy = c.bufs[2] if backward else NULL
    r.out = c.bufs[3] if backward else c.bufs[2]
    if which == P_DATA:
        return parallel_for(r.s.threads, r.s.c, roi_back_f32 if f32 else roi_back_f64, &r)
    if which == P_BOXES:
        return parallel_for(r.s.threads, r.s.k, roi_rois_f32 if f32 else roi_rois_f64, &r)
    return parallel_for(r.s.threads, r.s.k * r.s.c, roi_f32 if f32 else roi_f64, &r)


# -- nms -------------------------------------------------------------------------------------
cdef inline const Py_ssize_t* sorted_order(const floating* scores, Py_ssize_t* scratch,
                                           Py_ssize_t n) noexcept nogil:
    # 0..n-1 by descending score, ties in index order: a bottom-up merge sort between the two
    # halves of scratch (2 n indices); returns the half the order ends in
    cdef Py_ssize_t* src = scratch
    cdef Py_ssize_t* dst = scratch + n
    cdef Py_ssize_t* swap
    cdef Py_ssize_t width = 1, lo, mid, hi, i, j, k
    for i in range(n):
        src[i] = i
    while width < n:
        lo = 0
        while lo < n:
            mid, hi = min(lo + width, n), min(lo + 2 * width, n)
            i, j = lo, mid
            for k in range(lo, hi):
                if j >= hi or (i < mid and not scores[src[j]] > scores[src[i]]):
                    dst[k] = src[i]
                    i += 1
                else:
                    dst[k] = src[j]
                    j += 1
            lo += 2 * width
        swap = src
        src = dst
        dst = swap
        width *= 2
    return src


cdef inline double iou(const floating* a, const floating* b) noexcept nogil:
    cdef double w = min(a[2], b[2]) - max(a[0], b[0]), h = min(a[3], b[3]) - max(a[1], b[1])
    cdef double inter = (w if w > 0 else 0) * (h if h > 0 else 0)
    cdef double union = ((<double>a[2] - a[0]) * (<double>a[3] - a[1])
                         + (<double>b[2] - b[0]) * (<double>b[3] - b[1]) - inter)
    return inter / union


cdef inline int nms_impl(const floating* boxes,  # IN  (n, 4) x0, y0, x1, y1
                         const floating* scores,  # IN  (n,)
                         int* keep,               # OUT (max_output,) kept indices, then -1
                         Py_ssize_t* scratch,     # 2 n indices
                         const Nms* s, double thresh) noexcept nogil:
    cdef Py_ssize_t i, j, kept = 0, n = s.boxes
    cdef const Py_ssize_t* order
    cdef bint alive
    for i in range(n):
        if scores[i] != scores[i]:
            return KERNEL_BAD_VALUE
        for j in range(4):
            if boxes[4 * i + j] != boxes[4 * i + j]:
                return KERNEL_BAD_VALUE
    order = sorted_order(scores, scratch, n)
    for i in range(n):
        if kept >= s.max_output:
            break
        alive = True
        for j in range(kept):
            if iou(boxes + 4 * order[i], boxes + 4 * keep[j]) > thresh:
                alive = False
                break
        if alive:
            keep[kept] = <int>order[i]
            kept += 1
    for i in range(kept, s.max_output):
        keep[i] = -1
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int sample_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], True)
cdef int sample_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_FORWARD, c.bufs[0], c.bufs[1], NULL, c.bufs[2], False)
cdef int sample_backward_data_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], True)
cdef int sample_backward_data_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_DATA, NULL, c.bufs[0], c.bufs[1], c.bufs[2], False)
cdef int sample_backward_points_f32(const Call* c) noexcept nogil:
    return run_sample(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], True)
cdef int sample_backward_points_f64(const Call* c) noexcept nogil:
    return run_sample(c, S_POINTS, c.bufs[0], c.bufs[1], c.bufs[2], c.bufs[3], False)
cdef int roi_kernel_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_FORWARD, True)
cdef int roi_kernel_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_FORWARD, False)
cdef int roi_backward_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_DATA, True)
cdef int roi_backward_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_DATA, False)
cdef int roi_backward_rois_f32(const Call* c) noexcept nogil:
    return run_roi(c, P_BOXES, True)
cdef int roi_backward_rois_f64(const Call* c) noexcept nogil:
    return run_roi(c, P_BOXES, False)
cdef int nms_f32(const Call* c) noexcept nogil:
    return nms_impl(<const float*>c.bufs[0], <const float*>c.bufs[1], <int*>c.bufs[2],
                    <Py_ssize_t*>c.bufs[3], <const Nms*>c.ints, c.floats[0])
cdef int nms_f64(const Call* c) noexcept nogil:
    return nms_impl(<const double*>c.bufs[0], <const double*>c.bufs[1], <int*>c.bufs[2],
                    <Py_ssize_t*>c.bufs[3], <const Nms*>c.ints, c.floats[0])

KERNELS = {
    "sample_f32": kernel_address(sample_f32), "sample_f64": kernel_address(sample_f64),
    "sample_backward_data_f32": kernel_address(sample_backward_data_f32),
    "sample_backward_data_f64": kernel_address(sample_backward_data_f64),
    "sample_backward_points_f32": kernel_address(sample_backward_points_f32),
    "sample_backward_points_f64": kernel_address(sample_backward_points_f64),
    "roi_f32": kernel_address(roi_kernel_f32), "roi_f64": kernel_address(roi_kernel_f64),
    "roi_backward_f32": kernel_address(roi_backward_f32),
    "roi_backward_f64": kernel_address(roi_backward_f64),
    "roi_backward_rois_f32": kernel_address(roi_backward_rois_f32),
    "roi_backward_rois_f64": kernel_address(roi_backward_rois_f64),
    "nms_f32": kernel_address(nms_f32), "nms_f64": kernel_address(nms_f64),
}
