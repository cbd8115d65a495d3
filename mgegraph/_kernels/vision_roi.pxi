# Region pooling of _kernels/vision.pyx (roi_align, roi_pooling and their gradients),
# included there: the parameter block and the design are described in its header.

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
    if not (b > -1 and b < s.n):  # truncated to an image's index, as MegEngine reads it
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
