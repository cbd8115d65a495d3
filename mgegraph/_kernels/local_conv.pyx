# Convolutions with unshared weights (local_conv2d) or region-restricted taps
# (region_restricted_conv), with their gradients: what the ops mean is mgegraph/ops/local_conv.py's
# docstring.
#
# Parameter layout (mgegraph/kernel_abi/local_conv.py packs it): ints, the Window struct below,
# whose field names this module exports as FIELDS; no floats, no workspace.
#   local_conv2d:                     bufs x, w, y
#   local_conv2d_backward:            bufs x, w, dy, dx, dw
#   region_restricted_conv:           bufs x, w, rin, rout, y
#   region_restricted_conv_backward:  bufs x, w, rin, rout, dy, dx, dw
# The family's other files: kernel_abi/local_conv.py, lowering/local_conv.py,
# csrc_cuda/local_conv.cu (the same sums, in the same order), cuda/kernels/local_conv.py.
#
# Design: each output element is a gather, summed in double in a fixed order: y over (i, kh, kw),
# dx over (kh, kw, o) of the cells whose window reads it, dw over (n, cells) (one cell for the
# local weight, all for the shared one). Threads split units no two threads write (the cells
# (n, g, cell) of y, the pixels (n, g, pixel) of dx, the (g, cell, i) slices of dw), so results
# are bitwise equal at any thread count and to the CUDA kernel's. The loops run along o
# innermost, where a local weight's entries lie next to each other, keeping up to OUT_BLOCK sums
# at once, so a cell's weights are read once per image. Plain loops, no GEMM.

from cython cimport floating
from libc.stdint cimport int32_t

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Window:
    Py_ssize_t batch, channels, height, width, groups, in_per_group, out_per_group, out_h, out_w
    Py_ssize_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w
    Py_ssize_t w_group, w_cell, w_in, w_tap, w_out, region, threads

cdef Window _window
FIELDS = fields_of(_window, sizeof(Window))


ctypedef struct Run:
    const Window* s
    const char* x
    const char* w
    const int32_t* rin     # NULL unless s.region
    const int32_t* rout
    const char* dy     # y's gradient (the backward ops)
    char* out          # y, or dx
    char* dw


cdef inline Py_ssize_t source(Py_ssize_t out, Py_ssize_t k, Py_ssize_t stride, Py_ssize_t pad,
                              Py_ssize_t dilation) noexcept nogil:
    return out * stride - pad + k * dilation


cdef inline Py_ssize_t target(Py_ssize_t inp, Py_ssize_t k, Py_ssize_t stride, Py_ssize_t pad,
                              Py_ssize_t dilation, Py_ssize_t size) noexcept nogil:
    # the output row whose window's tap k reads input row `inp`, or -1
    cdef Py_ssize_t t = inp + pad - k * dilation
    if t < 0 or t % stride:
        return -1
    t = t // stride
    return t if t < size else -1


# -- y: output cells (n, g, cell) split among threads, OUT_BLOCK output channels at a time --------
cdef enum:
    OUT_BLOCK = 32  # the sums kept at once: a cell's weights are read along o, where they lie


cdef inline int forward_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi,
                             floating* _) noexcept nogil:
    cdef const Window* s = r.s
    cdef const floating* x = <const floating*>r.x
    cdef const floating* w = <const floating*>r.w
    cdef floating* y = <floating*>r.out
    cdef Py_ssize_t cells = s.out_h * s.out_w, plane = s.height * s.width
    cdef Py_ssize_t unit, n, g, o, o0, o1, cell, oh, ow, i, kh, kw, ih, iw, region_id = 0
    cdef const floating* xp
    cdef const floating* wp
    cdef double acc[OUT_BLOCK]
    cdef double xv
    for unit in range(lo, hi):
        n, g, cell = unit // (s.groups * cells), unit // cells % s.groups, unit % cells
        oh, ow = cell // s.out_w, cell % s.out_w
        if s.region:
            region_id = r.rout[n * cells + cell]
        o0 = 0
        while o0 < s.out_per_group:
            o1 = min(o0 + OUT_BLOCK, s.out_per_group)
            for o in range(o1 - o0):
                acc[o] = 0
            for i in range(s.in_per_group):
                xp = x + (n * s.channels + g * s.in_per_group + i) * plane
                wp = w + g * s.w_group + cell * s.w_cell + i * s.w_in
                for kh in range(s.kernel_h):
                    ih = source(oh, kh, s.stride_h, s.pad_h, s.dilation_h)
                    if ih < 0 or ih >= s.height:
                        continue
                    for kw in range(s.kernel_w):
                        iw = source(ow, kw, s.stride_w, s.pad_w, s.dilation_w)
                        if iw < 0 or iw >= s.width:
                            continue
                        if s.region and r.rin[n * plane + ih * s.width + iw] != region_id:
                            continue
                        xv = xp[ih * s.width + iw]
                        for o in range(o0, o1):
                            acc[o - o0] += xv * wp[(kh * s.kernel_w + kw) * s.w_tap
                                                   + o * s.w_out]
            for o in range(o0, o1):
                y[((n * s.groups + g) * s.out_per_group + o) * cells + cell] = \
                    <floating>acc[o - o0]
            o0 += OUT_BLOCK
    return KERNEL_OK


# -- dx: input cells (n, g, pixel) split among threads, OUT_BLOCK input channels at a time --------
cdef inline int data_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi, floating* _) noexcept nogil:
    # a window tap's weights for all (i, o) of a group lie together: each is read once per image
    cdef const Window* s = r.s
    cdef const floating* w = <const floating*>r.w
    cdef const floating* dy = <const floating*>r.dy
    cdef floating* dx = <floating*>r.out
    cdef Py_ssize_t cells = s.out_h * s.out_w, plane = s.height * s.width
    cdef Py_ssize_t unit, n, g, i, i0, i1, o, at, ih, iw, kh, kw, oh, ow, cell, region_id = 0
    cdef const floating* gp
    cdef const floating* wp
    cdef double acc[OUT_BLOCK]
    for unit in range(lo, hi):
        n, g, at = unit // (s.groups * plane), unit // plane % s.groups, unit % plane
        ih, iw = at // s.width, at % s.width
        gp = dy + (n * s.groups + g) * s.out_per_group * cells
        if s.region:
            region_id = r.rin[n * plane + at]
        i0 = 0
        while i0 < s.in_per_group:
            i1 = min(i0 + OUT_BLOCK, s.in_per_group)
            for i in range(i1 - i0):
                acc[i] = 0
            for kh in range(s.kernel_h):
                oh = target(ih, kh, s.stride_h, s.pad_h, s.dilation_h, s.out_h)
                if oh < 0:
                    continue
                for kw in range(s.kernel_w):
                    ow = target(iw, kw, s.stride_w, s.pad_w, s.dilation_w, s.out_w)
                    if ow < 0:
                        continue
                    cell = oh * s.out_w + ow
                    if s.region and r.rout[n * cells + cell] != region_id:
                        continue
                    wp = w + g * s.w_group + cell * s.w_cell + (kh * s.kernel_w + kw) * s.w_tap
                    for i in range(i0, i1):
                        for o in range(s.out_per_group):
                            acc[i - i0] += (<double>gp[o * cells + cell]
                                            * wp[i * s.w_in + o * s.w_out])
            for i in range(i0, i1):
                dx[(n * s.channels + g * s.in_per_group + i) * plane + at] = <floating>acc[i - i0]
            i0 += OUT_BLOCK
    return KERNEL_OK


# -- dw: (g, weight cell, i) slices split among threads -------------------------------------------
cdef inline void weight_sums(const Run* r, Py_ssize_t g, Py_ssize_t wcell, Py_ssize_t i,
                             Py_ssize_t tap, Py_ssize_t o0, Py_ssize_t o1,
                             double* acc, floating* _) noexcept nogil:
    # dw entries (g, wcell, i, tap, o0..o1): over the batch, then the cells that use them (all
    # when the weight is shared)
    cdef const Window* s = r.s
    cdef const floating* x = <const floating*>r.x
    cdef const floating* dy = <const floating*>r.dy
    cdef Py_ssize_t cells = s.out_h * s.out_w, plane = s.height * s.width
    cdef Py_ssize_t first = wcell if s.w_cell else 0, last = wcell + 1 if s.w_cell else cells
    cdef Py_ssize_t n, cell, ih, iw, o
    cdef const floating* gp
    cdef double xv
    for o in range(o1 - o0):
        acc[o] = 0
    for n in range(s.batch):
        for cell in range(first, last):
            ih = source(cell // s.out_w, tap // s.kernel_w, s.stride_h, s.pad_h, s.dilation_h)
            iw = source(cell % s.out_w, tap % s.kernel_w, s.stride_w, s.pad_w, s.dilation_w)
            if ih < 0 or ih >= s.height or iw < 0 or iw >= s.width:
                continue
            if s.region and r.rin[n * plane + ih * s.width + iw] != r.rout[n * cells + cell]:
                continue
            xv = x[(n * s.channels + g * s.in_per_group + i) * plane + ih * s.width + iw]
            gp = dy + ((n * s.groups + g) * s.out_per_group + o0) * cells + cell
            for o in range(o1 - o0):
                acc[o] += xv * gp[o * cells]


cdef inline int weight_part(const Run* r, Py_ssize_t lo, Py_ssize_t hi, floating* _) noexcept nogil:
    cdef const Window* s = r.s
    cdef floating* dw = <floating*>r.dw
    cdef Py_ssize_t wcells = s.out_h * s.out_w if s.w_cell else 1
    cdef Py_ssize_t unit, g, wcell, i, tap, o, o0, o1
    cdef double acc[OUT_BLOCK]
    for unit in range(lo, hi):
        g, wcell, i = unit // (wcells * s.in_per_group), unit // s.in_per_group % wcells, \
            unit % s.in_per_group
        for tap in range(s.kernel_h * s.kernel_w):
            o0 = 0
            while o0 < s.out_per_group:
                o1 = min(o0 + OUT_BLOCK, s.out_per_group)
                weight_sums(r, g, wcell, i, tap, o0, o1, acc, <floating*>NULL)
                for o in range(o0, o1):
                    dw[g * s.w_group + wcell * s.w_cell + i * s.w_in + tap * s.w_tap
                       + o * s.w_out] = <floating>acc[o - o0]
                o0 += OUT_BLOCK
    return KERNEL_OK


cdef int forward_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return forward_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int forward_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return forward_part(<const Run*>ctx, lo, hi, <double*>NULL)
cdef int data_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return data_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int data_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return data_part(<const Run*>ctx, lo, hi, <double*>NULL)
cdef int weight_f32(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return weight_part(<const Run*>ctx, lo, hi, <float*>NULL)
cdef int weight_f64(void* ctx, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return weight_part(<const Run*>ctx, lo, hi, <double*>NULL)


# -- entry points ---------------------------------------------------------------------------------
cdef inline void start(const Call* c, Run* r) noexcept nogil:
    # the buffers after x and w: the region ids (when the op has them), then the rest
    r.s = <const Window*>c.ints
    r.x, r.w = c.bufs[0], c.bufs[1]
    r.rin = <const int32_t*>c.bufs[2] if r.s.region else NULL
    r.rout = <const int32_t*>c.bufs[3] if r.s.region else NULL


cdef inline int forward_impl(const Call* c, floating* _) noexcept nogil:
    cdef Run r
    start(c, &r)
    r.out = c.bufs[4 if r.s.region else 2]
    return parallel_for(r.s.threads, r.s.batch * r.s.groups * r.s.out_h * r.s.out_w,
                        forward_f32 if floating is float else forward_f64, &r)


cdef inline int backward_impl(const Call* c, floating* _) noexcept nogil:
    cdef Run r
    cdef int status
    cdef Py_ssize_t rest
    start(c, &r)
    rest = 4 if r.s.region else 2
    r.dy, r.out, r.dw = c.bufs[rest], c.bufs[rest + 1], c.bufs[rest + 2]
    status = parallel_for(r.s.threads, r.s.batch * r.s.groups * r.s.height * r.s.width,
                          data_f32 if floating is float else data_f64, &r)
    if status != KERNEL_OK:
        return status
    return parallel_for(r.s.threads, r.s.groups * r.s.in_per_group
                        * (r.s.out_h * r.s.out_w if r.s.w_cell else 1),
                        weight_f32 if floating is float else weight_f64, &r)


cdef int local_forward_f32(const Call* c) noexcept nogil:
    return forward_impl(c, <float*>NULL)
cdef int local_forward_f64(const Call* c) noexcept nogil:
    return forward_impl(c, <double*>NULL)
cdef int local_backward_f32(const Call* c) noexcept nogil:
    return backward_impl(c, <float*>NULL)
cdef int local_backward_f64(const Call* c) noexcept nogil:
    return backward_impl(c, <double*>NULL)

# the two ops of each pair are one kernel: the block's region field tells them apart
KERNELS = {
    "local_conv2d_f32": kernel_address(local_forward_f32),
    "local_conv2d_f64": kernel_address(local_forward_f64),
    "local_conv2d_backward_f32": kernel_address(local_backward_f32),
    "local_conv2d_backward_f64": kernel_address(local_backward_f64),
    "region_restricted_conv_f32": kernel_address(local_forward_f32),
    "region_restricted_conv_f64": kernel_address(local_forward_f64),
    "region_restricted_conv_backward_f32": kernel_address(local_backward_f32),
    "region_restricted_conv_backward_f64": kernel_address(local_backward_f64),
}
