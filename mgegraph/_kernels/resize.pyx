# Resize by interpolation (nearest, linear, cubic) over the last one to three axes, and its
# gradient: what the op means is mgegraph/ops/resize.py's docstring.
#
# Parameter layout (mgegraph/kernel_abi/resize.py packs it): ints, the Resize struct below, whose
# field names this module exports as RESIZE_FIELDS; floats [num0, num1, num2, den0, den1, den2,
# cubic_a]: each axis's step, the input distance of one output index, as num / den (in / out
# where sizes were given, 1 / scale where a scale was; kernel_abi/resize.py's _geometry).
#   resize:           bufs: x (planes, in0, in1, in2), y (planes, out0, out1, out2), workspace
#   resize_backward:  bufs: dy (planes, out0, out1, out2), dx (planes, in0, in1, in2), workspace
# The workspace holds each axis's taps (TapTable): TAP_BYTES per output index of every axis; with
# the antialias filter (aa_taps0 > 0), WIDE_TAP_BYTES per tap of every axis's output indices
# (resize_antialias.pxi); a float32 linear resize's also each thread's two rows and the float
# taps of resize_bilinear.h (kernel_abi/resize.py's bilinear_workspace).
# The family's other files: kernel_abi/resize.py, lowering/resize.py, csrc_cuda/resize.cu (the
# same tap formulas, one CUDA thread per output), cuda/kernels/resize.py.
#
# Design: resizing is separable, so each axis's taps (input index and weight per output index)
# are computed once per call into the workspace, then every output is a sum of products over
# the three axes' taps, accumulated in double. An axis of input length 1 has one tap of weight 1
# (the resized axes of a 1-D or 2-D resize lead with such axes), so a bilinear resize reads 2x2
# cells, not 2x2x2. uint8 images (resize_u8, forward only) are summed in double as the floats
# are, then rounded by pixels.pxd's round_u8. Threads: the forward splits output rows (no two
# threads write one cell); the backward scatters each plane's gradient onto its taps and so
# splits planes, each thread adding in the one order the serial loop does, so results are
# bitwise equal at any thread count. A float32 bilinear resize over the last two axes takes
# resize_bilinear.h's separable float path instead (its Design: 2-3x faster on AVX2).

from libc.math cimport floor
from libc.string cimport memset
from cython cimport floating

from libc.stdint cimport int32_t, uint8_t

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for
from .pixels cimport pixel_t, store_pixel

ctypedef struct Resize:
    Py_ssize_t mode, coord, nearest_mode, exclude_outside, planes, in0, in1, in2, out0, out1, out2
    Py_ssize_t aa_taps0, aa_taps1, aa_taps2  # the antialias filter's taps per axis; 0: none
    Py_ssize_t threads

cdef enum ResizeMode:
    NEAREST, LINEAR, CUBIC

cdef enum Coord:
    HALF_PIXEL, HALF_PIXEL_SYMMETRIC, PYTORCH_HALF_PIXEL, ALIGN_CORNERS, ASYMMETRIC, TF_HALF_PIXEL

cdef enum NearestMode:
    ROUND_PREFER_FLOOR, ROUND_PREFER_CEIL, FLOOR, CEIL

cdef enum:
    MAX_TAPS = 4  # cubic's; nearest takes 1, linear 2

ctypedef struct Tap:
    Py_ssize_t index[MAX_TAPS]
    double weight[MAX_TAPS]

ctypedef struct WideTap:  # one tap of the antialias filter (resize_antialias.pxi)
    Py_ssize_t index
    double weight

RESIZE_MODES = {"nearest": NEAREST, "linear": LINEAR, "cubic": CUBIC}
RESIZE_COORDS = {"half_pixel": HALF_PIXEL, "half_pixel_symmetric": HALF_PIXEL_SYMMETRIC,
                 "pytorch_half_pixel": PYTORCH_HALF_PIXEL, "align_corners": ALIGN_CORNERS,
                 "asymmetric": ASYMMETRIC, "tf_half_pixel_for_nearest": TF_HALF_PIXEL}
RESIZE_NEAREST_MODES = {"round_prefer_floor": ROUND_PREFER_FLOOR,
                        "round_prefer_ceil": ROUND_PREFER_CEIL, "floor": FLOOR, "ceil": CEIL}
TAP_BYTES = sizeof(Tap)
WIDE_TAP_BYTES = sizeof(WideTap)

cdef Resize _resize
RESIZE_FIELDS = fields_of(_resize, sizeof(Resize))


# -- one axis's taps ------------------------------------------------------------------------------
cdef inline double source_coord(Py_ssize_t coord, Py_ssize_t o, Py_ssize_t n_in,
                                Py_ssize_t n_out, double num, double den) noexcept nogil:
    # The input coordinate output index o reads (ONNX Resize's coordinate_transformation_mode).
    # Products by the step's numerator, then one division: exact wherever the exact value is a
    # representable number (an input cell), which a floor or a round then keeps. The resized
    # length is ONNX's scale * input length (the output's where sizes were given).
    cdef double length = n_in * den / num
    if coord == ALIGN_CORNERS:
        return 0.0 if length == 1 else o * (n_in - 1) / (length - 1)
    if coord == ASYMMETRIC:
        return o * num / den
    if coord == TF_HALF_PIXEL:
        return (o + 0.5) * num / den
    if coord == PYTORCH_HALF_PIXEL and length == 1:
        return 0.0
    if coord == HALF_PIXEL_SYMMETRIC:
        return n_in / 2.0 * (1 - n_out / length) + (o + 0.5) * num / den - 0.5
    return (o + 0.5) * num / den - 0.5


cdef inline double keys(double s, double a) noexcept nogil:
    # Keys' cubic convolution kernel at distance s (0 <= s < 2) with coefficient a
    if s <= 1:
        return ((a + 2) * s - (a + 3)) * s * s + 1
    return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a


cdef inline Py_ssize_t nearest(Py_ssize_t mode, double x) noexcept nogil:
    cdef double i = floor(x), r = x - i
    if r == 0 or mode == FLOOR:
        return <Py_ssize_t>i
    if mode == CEIL:
        return <Py_ssize_t>i + 1
    if mode == ROUND_PREFER_CEIL:
        return <Py_ssize_t>i + (r >= 0.5)
    return <Py_ssize_t>i + (r > 0.5)


cdef inline Py_ssize_t clamp_index(Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    return 0 if i < 0 else (n - 1 if i >= n else i)


cdef inline int axis_taps(const Resize* s, const double* f, int axis, Py_ssize_t o,
                          Tap* t) noexcept nogil:
    # Output index o's taps along one axis (their count returned); an out-of-range tap reads
    # the edge, or is dropped with the others rescaled (exclude_outside)
    cdef Py_ssize_t n_in = (&s.in0)[axis], n_out = (&s.out0)[axis], i0
    cdef double x, r, total = 0
    cdef int k, n
    if n_in == 1:
        t.index[0], t.weight[0] = 0, 1.0
        return 1
    x = source_coord(s.coord, o, n_in, n_out, f[axis], f[3 + axis])
    if s.mode == NEAREST:
        t.index[0], t.weight[0] = clamp_index(nearest(s.nearest_mode, x), n_in), 1.0
        return 1
    i0 = <Py_ssize_t>floor(x)
    r = x - i0
    if s.mode == LINEAR:
        n = 2
        t.weight[0], t.weight[1] = 1 - r, r
    else:
        n = 4
        i0 -= 1
        for k in range(4):
            t.weight[k] = keys(r + 1 - k if k < 2 else k - 1 - r, f[6])
    for k in range(n):
        t.index[k] = i0 + k
        if s.exclude_outside and not 0 <= t.index[k] < n_in:
            t.weight[k] = 0
        total += t.weight[k]
        t.index[k] = clamp_index(t.index[k], n_in)
    if s.exclude_outside and total != 0:  # no tap inside: all weigh 0 (ONNX's reference)
        for k in range(n):
            t.weight[k] /= total
    return n


cdef inline void fill_taps(const Resize* s, const double* f, Tap* table,
                           int* counts) noexcept nogil:
    # Every axis's taps, axis after axis in the table: out0, then out1, then out2 entries
    cdef int axis
    cdef Py_ssize_t o
    for axis in range(3):
        for o in range((&s.out0)[axis]):
            counts[axis] = axis_taps(s, f, axis, o, table)
            table += 1


# -- forward: output rows split among threads ------------------------------------------------------
ctypedef struct ResizeRun:
    const Resize* s
    const Tap* taps
    int counts[3]
    const char* x
    char* y


cdef inline void bilinear_row(const ResizeRun* r, Py_ssize_t row, pixel_t* _) noexcept nogil:
    # rows_part's loop with two taps on each of the last two axes and one on the first (every
    # bilinear resize): the same products added in the same order, so the same bits, with the
    # loops unrolled and the two input rows found once per output row
    cdef const Resize* s = r.s
    cdef Py_ssize_t o1 = row % s.out1, p = row // (s.out1 * s.out0), o2, j0, j1
    cdef const Tap* t0 = r.taps + row // s.out1 % s.out0
    cdef const Tap* t1 = r.taps + s.out0 + o1
    cdef const Tap* t2
    cdef const pixel_t* x = <const pixel_t*>r.x + (p * s.in0 + t0.index[0]) * s.in1 * s.in2
    cdef const pixel_t* a = x + t1.index[0] * s.in2
    cdef const pixel_t* b = x + t1.index[1] * s.in2
    cdef pixel_t* y = <pixel_t*>r.y + row * s.out2
    cdef double wa = t0.weight[0] * t1.weight[0], wb = t0.weight[0] * t1.weight[1], acc
    for o2 in range(s.out2):
        t2 = r.taps + s.out0 + s.out1 + o2
        j0, j1 = t2.index[0], t2.index[1]
        acc = 0
        acc += wa * t2.weight[0] * a[j0]
        acc += wa * t2.weight[1] * a[j1]
        acc += wb * t2.weight[0] * b[j0]
        acc += wb * t2.weight[1] * b[j1]
        store_pixel(y, o2, acc)


cdef inline int rows_part(const ResizeRun* r, Py_ssize_t lo, Py_ssize_t hi,
                          pixel_t* _) noexcept nogil:
    cdef const Resize* s = r.s
    cdef const pixel_t* x = <const pixel_t*>r.x
    cdef pixel_t* y = <pixel_t*>r.y
    cdef const Tap* t0
    cdef const Tap* t1
    cdef const Tap* t2
    cdef Py_ssize_t row, p, o0, o1, o2, plane = s.in0 * s.in1 * s.in2, base
    cdef int a, b, c
    cdef double acc, w01
    if r.counts[0] == 1 and r.counts[1] == 2 and r.counts[2] == 2:
        for row in range(lo, hi):
            bilinear_row(r, row, _)
        return KERNEL_OK
    for row in range(lo, hi):
        o1 = row % s.out1
        o0 = row // s.out1 % s.out0
        p = row // (s.out1 * s.out0)
        t0, t1 = r.taps + o0, r.taps + s.out0 + o1
        for o2 in range(s.out2):
            t2 = r.taps + s.out0 + s.out1 + o2
            acc = 0
            for a in range(r.counts[0]):
                for b in range(r.counts[1]):
                    w01 = t0.weight[a] * t1.weight[b]
                    base = p * plane + (t0.index[a] * s.in1 + t1.index[b]) * s.in2
                    for c in range(r.counts[2]):
                        acc += w01 * t2.weight[c] * x[base + t2.index[c]]
            store_pixel(y, row * s.out2 + o2, acc)
    return KERNEL_OK


cdef int rows_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return rows_part(<const ResizeRun*>ctx, lo, hi, <float*>NULL)
cdef int rows_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return rows_part(<const ResizeRun*>ctx, lo, hi, <double*>NULL)
cdef int rows_u8(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return rows_part(<const ResizeRun*>ctx, lo, hi, <uint8_t*>NULL)


# -- float32 bilinear: separable, vectorised (resize_bilinear.h) --------------------------------------
cdef extern from "resize_bilinear.h":
    ctypedef struct BilinearAxis:
        const int32_t* j0
        const int32_t* j1
        const float* w0
        const float* w1
    ctypedef struct Bilinear:
        const float* x
        float* y
        BilinearAxis rows, cols
        Py_ssize_t in_h, in_w, out_h, out_w
    int bilinear_isa() noexcept nogil
    void bilinear_rows(const Bilinear* b, Py_ssize_t lo, Py_ssize_t hi, float* slots,
                       Py_ssize_t stride, int isa) noexcept nogil

cdef int BILINEAR_ISA = bilinear_isa()
cdef enum:  # floats per horizontal-row slot are rounded up to this (64 bytes): slots start on lines
    SLOT_FLOATS = 16
BILINEAR_SLOT_FLOATS = SLOT_FLOATS

ctypedef struct BilinearRun:
    Bilinear b
    float* slots
    Py_ssize_t stride


cdef inline Py_ssize_t slot_stride(Py_ssize_t out_w) noexcept nogil:
    return (out_w + SLOT_FLOATS - 1) // SLOT_FLOATS * SLOT_FLOATS


cdef inline char* float_taps(const Tap* taps, Py_ssize_t n, char* at,
                             BilinearAxis* axis) noexcept nogil:
    # An axis's two taps per output index as the header's int32 indices and float weights, at
    # `at` (16 n bytes); returns the end
    cdef int32_t* j0 = <int32_t*>at
    cdef int32_t* j1 = j0 + n
    cdef float* w0 = <float*>(j1 + n)
    cdef float* w1 = w0 + n
    cdef Py_ssize_t o
    for o in range(n):
        j0[o], j1[o] = <int32_t>taps[o].index[0], <int32_t>taps[o].index[1]
        w0[o], w1[o] = <float>taps[o].weight[0], <float>taps[o].weight[1]
    axis.j0, axis.j1, axis.w0, axis.w1 = j0, j1, w0, w1
    return <char*>(w1 + n)


cdef int bilinear_part(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const BilinearRun* r = <const BilinearRun*>ctx
    bilinear_rows(&r.b, lo, hi, r.slots + 2 * part * r.stride, r.stride, BILINEAR_ISA)
    return KERNEL_OK


cdef int bilinear_f32(const float* x, float* y, const Tap* taps, const Resize* s) noexcept nogil:
    # The workspace after the tap table: each thread's two row slots, then the rows' and the
    # columns' float taps (kernel_abi/resize.py's bilinear_workspace). The first axis has one
    # tap of weight 1 (its input length is 1), so a row's weights are the second axis's.
    cdef BilinearRun r
    cdef char* at
    r.stride = slot_stride(max(s.in2, s.out2))
    r.slots = <float*>(taps + s.out0 + s.out1 + s.out2)
    at = <char*>(r.slots + 2 * s.threads * r.stride)
    at = float_taps(taps + s.out0, s.out1, at, &r.b.rows)
    float_taps(taps + s.out0 + s.out1, s.out2, at, &r.b.cols)
    r.b.x, r.b.y = x, y
    r.b.in_h, r.b.in_w, r.b.out_h, r.b.out_w = s.in1, s.in2, s.out1, s.out2
    return parallel_for(s.threads, s.planes * s.out1, bilinear_part, &r)


include "resize_antialias.pxi"


cdef inline int resize_impl(const pixel_t* x,  # IN  (planes, in0, in1, in2)
                            pixel_t* y,        # OUT (planes, out0, out1, out2)
                            Tap* taps,          # OUT workspace: the taps of every axis
                            const Resize* s, const double* f) noexcept nogil:
    cdef ResizeRun r
    if s.aa_taps0:
        return antialias_impl(x, y, <WideTap*>taps, s, f)
    fill_taps(s, f, taps, r.counts)
    if pixel_t is float:
        if s.out0 == 1 and r.counts[0] == 1 and r.counts[1] == 2 and r.counts[2] == 2:
            return bilinear_f32(x, y, taps, s)
    r.s, r.taps, r.x, r.y = s, taps, <const char*>x, <char*>y
    return parallel_for(s.threads, s.planes * s.out0 * s.out1,
                        rows_f32 if pixel_t is float else
                        (rows_f64 if pixel_t is double else rows_u8), &r)


# -- backward: each plane's gradient scattered onto its taps ---------------------------------------
cdef inline int planes_part(const ResizeRun* r, Py_ssize_t lo, Py_ssize_t hi,
                            floating* _) noexcept nogil:
    cdef const Resize* s = r.s
    cdef const floating* dy = <const floating*>r.x
    cdef floating* dx = <floating*>r.y
    cdef const Tap* t0
    cdef const Tap* t1
    cdef const Tap* t2
    cdef Py_ssize_t p, o0, o1, o2, plane = s.in0 * s.in1 * s.in2, base, out
    cdef int a, b, c
    cdef double g, w01
    memset(dx + lo * plane, 0, <size_t>((hi - lo) * plane) * sizeof(floating))
    for p in range(lo, hi):
        out = p * s.out0 * s.out1 * s.out2
        for o0 in range(s.out0):
            t0 = r.taps + o0
            for o1 in range(s.out1):
                t1 = r.taps + s.out0 + o1
                for o2 in range(s.out2):
                    t2 = r.taps + s.out0 + s.out1 + o2
                    g = dy[out]
                    out += 1
                    for a in range(r.counts[0]):
                        for b in range(r.counts[1]):
                            w01 = t0.weight[a] * t1.weight[b]
                            base = p * plane + (t0.index[a] * s.in1 + t1.index[b]) * s.in2
                            for c in range(r.counts[2]):
                                dx[base + t2.index[c]] += <floating>(w01 * t2.weight[c] * g)
    return KERNEL_OK


cdef int planes_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return planes_part(<const ResizeRun*>ctx, lo, hi, <float*>NULL)
cdef int planes_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return planes_part(<const ResizeRun*>ctx, lo, hi, <double*>NULL)


cdef inline int resize_backward_impl(const floating* dy,  # IN  (planes, out0, out1, out2)
                                     floating* dx,        # OUT (planes, in0, in1, in2)
                                     Tap* taps,           # OUT workspace
                                     const Resize* s, const double* f) noexcept nogil:
    cdef ResizeRun r
    if s.aa_taps0:
        return antialias_backward_impl(dy, dx, <WideTap*>taps, s, f)
    fill_taps(s, f, taps, r.counts)
    r.s, r.taps, r.x, r.y = s, taps, <const char*>dy, <char*>dx
    return parallel_for(s.threads, s.planes, planes_f32 if floating is float else planes_f64, &r)


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int resize_f32(const Call* c) noexcept nogil:
    return resize_impl(<const float*>c.bufs[0], <float*>c.bufs[1], <Tap*>c.bufs[2],
                       <const Resize*>c.ints, c.floats)
cdef int resize_f64(const Call* c) noexcept nogil:
    return resize_impl(<const double*>c.bufs[0], <double*>c.bufs[1], <Tap*>c.bufs[2],
                       <const Resize*>c.ints, c.floats)
cdef int resize_u8(const Call* c) noexcept nogil:
    return resize_impl(<const uint8_t*>c.bufs[0], <uint8_t*>c.bufs[1], <Tap*>c.bufs[2],
                       <const Resize*>c.ints, c.floats)
cdef int resize_backward_f32(const Call* c) noexcept nogil:
    return resize_backward_impl(<const float*>c.bufs[0], <float*>c.bufs[1], <Tap*>c.bufs[2],
                                <const Resize*>c.ints, c.floats)
cdef int resize_backward_f64(const Call* c) noexcept nogil:
    return resize_backward_impl(<const double*>c.bufs[0], <double*>c.bufs[1], <Tap*>c.bufs[2],
                                <const Resize*>c.ints, c.floats)

KERNELS = {
    "resize_f32": kernel_address(resize_f32), "resize_f64": kernel_address(resize_f64),
    "resize_u8": kernel_address(resize_u8),
    "resize_backward_f32": kernel_address(resize_backward_f32),
    "resize_backward_f64": kernel_address(resize_backward_f64),
}
