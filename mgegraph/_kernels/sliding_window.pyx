# sliding_window and sliding_window_transpose (mgegraph/ops/sliding_window.py): MegEngine's
# im2col of an (N, C, H, W) image to (N, C, OH, OW, WH, WW) windows, and its adjoint.
#
# Parameter layout: the ints are the Window struct below (the same for both ops), whose field
# names this module exports (WINDOW_FIELDS) for the lowering,
# mgegraph/_kernels/lowering/sliding_window.py, to pack by name; no floats, no workspace.
# Buffers: sliding_window x, cols; sliding_window_transpose cols, x.
#
# Design: every output is written once, so no zeroing pass and no scatter. The window reads
# each tap (zero in the padding). The transpose gathers, for each image cell, the taps that
# read it, in the order of the windows (oh, then ow: the tap rows and columns descending) and
# in the dtype, which is the order a loop over the windows adding each tap would use. The
# units of work are rows (of windows, of the image); threads (parallel.pyx) take contiguous
# ranges of them, so results are the same bits on any thread count, and
# csrc_cuda/sliding_window.cu computes the same sums in the same order.

from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Window:     # the image (planes, height, width), cols (planes, out_h, out_w, kh, kw)
    Py_ssize_t planes, height, width, out_h, out_w, kernel_h, kernel_w
    Py_ssize_t pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, threads

cdef Window _w
WINDOW_FIELDS = fields_of(_w, sizeof(Window))


cdef inline int window_rows(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                            floating* tag) noexcept nogil:
    # units: (plane, oh), the windows of one output row
    cdef const Window* s = <const Window*>c.ints
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef floating* cols = <floating*>c.bufs[1]
    cdef Py_ssize_t unit, plane, oh, ow, i, j, h, w
    cdef Py_ssize_t taps = s.kernel_h * s.kernel_w
    cdef const floating* image
    cdef floating* out
    for unit in range(lo, hi):
        plane, oh = unit // s.out_h, unit % s.out_h
        image = x + plane * s.height * s.width
        out = cols + unit * s.out_w * taps
        for ow in range(s.out_w):
            for i in range(s.kernel_h):
                h = oh * s.stride_h - s.pad_h + i * s.dilation_h
                for j in range(s.kernel_w):
                    w = ow * s.stride_w - s.pad_w + j * s.dilation_w
                    out[(ow * s.kernel_h + i) * s.kernel_w + j] = (
                        image[h * s.width + w]
                        if 0 <= h < s.height and 0 <= w < s.width else 0)
    return KERNEL_OK


cdef inline Py_ssize_t cell_of(Py_ssize_t at, Py_ssize_t stride, Py_ssize_t cells) noexcept nogil:
    # the window index whose tap lands at offset ``at`` (>= 0) from the padded origin, or -1
    if at < 0 or at % stride != 0 or at // stride >= cells:
        return -1
    return at // stride


cdef inline int image_rows(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                           floating* tag) noexcept nogil:
    # units: (plane, h), one row of the image
    cdef const Window* s = <const Window*>c.ints
    cdef const floating* cols = <const floating*>c.bufs[0]
    cdef floating* x = <floating*>c.bufs[1]
    cdef Py_ssize_t unit, plane, h, w, i, j, oh, ow
    cdef Py_ssize_t taps = s.kernel_h * s.kernel_w
    cdef const floating* windows
    cdef floating acc
    for unit in range(lo, hi):
        plane, h = unit // s.height, unit % s.height
        windows = cols + plane * s.out_h * s.out_w * taps
        for w in range(s.width):
            acc = 0
            for i in range(s.kernel_h - 1, -1, -1):
                oh = cell_of(h + s.pad_h - i * s.dilation_h, s.stride_h, s.out_h)
                if oh < 0:
                    continue
                for j in range(s.kernel_w - 1, -1, -1):
                    ow = cell_of(w + s.pad_w - j * s.dilation_w, s.stride_w, s.out_w)
                    if ow >= 0:
                        acc = acc + windows[((oh * s.out_w + ow) * s.kernel_h + i) * s.kernel_w
                                            + j]
            x[unit * s.width + w] = acc
    return KERNEL_OK


cdef int window_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return window_rows(<const Call*>c, lo, hi, <float*>NULL)
cdef int window_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return window_rows(<const Call*>c, lo, hi, <double*>NULL)
cdef int image_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return image_rows(<const Call*>c, lo, hi, <float*>NULL)
cdef int image_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return image_rows(<const Call*>c, lo, hi, <double*>NULL)


cdef int sliding_window_f32(const Call* c) noexcept nogil:
    cdef const Window* s = <const Window*>c.ints
    return parallel_for(s.threads, s.planes * s.out_h, window_f32, <void*>c)
cdef int sliding_window_f64(const Call* c) noexcept nogil:
    cdef const Window* s = <const Window*>c.ints
    return parallel_for(s.threads, s.planes * s.out_h, window_f64, <void*>c)
cdef int sliding_window_transpose_f32(const Call* c) noexcept nogil:
    cdef const Window* s = <const Window*>c.ints
    return parallel_for(s.threads, s.planes * s.height, image_f32, <void*>c)
cdef int sliding_window_transpose_f64(const Call* c) noexcept nogil:
    cdef const Window* s = <const Window*>c.ints
    return parallel_for(s.threads, s.planes * s.height, image_f64, <void*>c)

KERNELS = {
    "sliding_window_f32": kernel_address(sliding_window_f32),
    "sliding_window_f64": kernel_address(sliding_window_f64),
    "sliding_window_transpose_f32": kernel_address(sliding_window_transpose_f32),
    "sliding_window_transpose_f64": kernel_address(sliding_window_transpose_f64),
}
