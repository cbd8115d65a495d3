# Convolution (im2col + GEMM) and 2-D pooling over NCHW tensors, and their backward passes.
#
# Parameter layout (ints), written by mgegraph.ops.conv; the kernels read them as the structs
# below (a struct of Py_ssize_t fields has no padding, so it overlays the int array exactly):
#   conv2d:                 Conv fields in order; bufs: x, w, [bias,] y, [workspace when use_col]
#   conv2d_backward_data:   Conv fields (x is the result); bufs: w, dy, dx, [workspace]
#   conv2d_backward_filter: Conv fields (w is the result); bufs: x, dy, dw, [workspace]
#   pool2d:                 Pool fields in order; bufs: x, y
#   max_pool2d_backward:    Pool fields; bufs: x, dy, dx
#   avg_pool2d_backward:    Pool fields; bufs: dy, dx
#   max_pool2d_select:      Pool fields; bufs: x, h, y (y = h at the argmax of each window of x)
#
# Design: the im2col matrix of one batch element and one group lives in the workspace and is
# reused for every (element, group) pair, so scratch memory does not grow with the batch. A 1x1,
# stride-1, unpadded convolution's input already is its im2col matrix, so it skips the copy.
# The backward passes reuse the forward's layout: backward-data is GEMM (W^T dy) then col2im,
# the adjoint of im2col; backward-filter accumulates dy col^T over the batch in place.

from libc.math cimport INFINITY
from libc.string cimport memcpy, memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_fn
from .blas cimport gemm

ctypedef struct Conv:
    Py_ssize_t batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups
    Py_ssize_t has_bias, use_col

ctypedef struct Pool:
    Py_ssize_t mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw

cdef enum PoolMode:
    P_MAX, P_AVG_INCLUDE, P_AVG_EXCLUDE, P_ADAPTIVE_MAX, P_ADAPTIVE_AVG

POOL_MODES = {"max": P_MAX, "average": P_AVG_INCLUDE,
              "average_count_exclude_padding": P_AVG_EXCLUDE,
              "adaptive_max": P_ADAPTIVE_MAX, "adaptive_average": P_ADAPTIVE_AVG}
CONV_NINTS = sizeof(Conv) // sizeof(Py_ssize_t)  # lowerings check their layout against these
POOL_NINTS = sizeof(Pool) // sizeof(Py_ssize_t)


# -- im2col and its adjoint -----------------------------------------------------------------------
cdef inline Py_ssize_t ceil_div(Py_ssize_t a, Py_ssize_t d) noexcept nogil:
    # d > 0; C division truncates, which is a floor only for a >= 0
    return (a + d - 1) // d if a > 0 else -((-a) // d)


cdef inline Py_ssize_t clamp(Py_ssize_t v, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return lo if v < lo else (hi if v > hi else v)


cdef inline void inside(Py_ssize_t off, const Conv* s, Py_ssize_t* lo,
                        Py_ssize_t* hi) noexcept nogil:
    # The output columns [lo, hi) whose input column ow * sw + off lies inside the image
    lo[0] = clamp(ceil_div(-off, s.sw), 0, s.ow)
    hi[0] = clamp(ceil_div(s.w - off, s.sw), lo[0], s.ow)


cdef inline void im2col_row(const floating* xrow, floating* out, Py_ssize_t off,
                            const Conv* s) noexcept nogil:
    # out[ow] = xrow[ow * sw + off] where that column is inside the image, else 0
    cdef Py_ssize_t lo, hi, ow
    inside(off, s, &lo, &hi)
    memset(out, 0, <size_t>lo * sizeof(floating))
    if s.sw == 1:
        memcpy(out + lo, xrow + lo + off, <size_t>(hi - lo) * sizeof(floating))
    else:
        for ow in range(lo, hi):
            out[ow] = xrow[ow * s.sw + off]
    memset(out + hi, 0, <size_t>(s.ow - hi) * sizeof(floating))


cdef inline void im2col(const floating* x, floating* col, const Conv* s) noexcept nogil:
    # x: one group of one image, (cin/groups, h, w); col: (cin/groups * kh * kw, oh * ow)
    cdef Py_ssize_t ci, i, j, oh, ih
    for ci in range(s.cin // s.groups):
        for i in range(s.kh):
            for j in range(s.kw):
                for oh in range(s.oh):
                    ih = oh * s.sh - s.ph + i * s.dh
                    if 0 <= ih < s.h:
                        im2col_row(x + (ci * s.h + ih) * s.w, col, j * s.dw - s.pw, s)
                    else:
                        memset(col, 0, <size_t>s.ow * sizeof(floating))
                    col += s.ow


cdef inline void col2im(const floating* col, floating* x, const Conv* s) noexcept nogil:
    # The adjoint of im2col: x += every column entry added back where im2col read it, so
    # overlapping windows accumulate. x must be zeroed (or hold a partial sum) beforehand.
    cdef Py_ssize_t ci, i, j, oh, ih, ow, lo, hi, off
    cdef floating* xrow
    for ci in range(s.cin // s.groups):
        for i in range(s.kh):
            for j in range(s.kw):
                off = j * s.dw - s.pw
                inside(off, s, &lo, &hi)
                for oh in range(s.oh):
                    ih = oh * s.sh - s.ph + i * s.dh
                    if 0 <= ih < s.h:
                        xrow = x + (ci * s.h + ih) * s.w
                        for ow in range(lo, hi):
                            xrow[ow * s.sw + off] += col[ow]
                    col += s.ow


# -- convolution ----------------------------------------------------------------------------------
cdef inline void add_bias_rows(floating* y, const floating* bias, Py_ssize_t rows,
                               Py_ssize_t cols) noexcept nogil:
    cdef Py_ssize_t r, i
    for r in range(rows):
        for i in range(cols):
            y[i] += bias[r]
        y += cols


cdef inline int conv2d_impl(const floating* x, const floating* w, const floating* bias,
                            floating* y, floating* col, const Conv* s) noexcept nogil:
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Py_ssize_t npix = s.oh * s.ow, kdim = cg * s.kh * s.kw, n, g
    cdef const floating* xg
    cdef floating* yg
    for n in range(s.batch):
        for g in range(s.groups):
            xg = x + (n * s.cin + g * cg) * s.h * s.w
            yg = y + (n * s.cout + g * ocg) * npix
            if s.use_col:
                im2col(xg, col, s)
                xg = col
            gemm(False, False, ocg, npix, kdim, w + g * ocg * kdim, xg, yg, False)
            if bias != NULL:
                add_bias_rows(yg, bias + g * ocg, ocg, npix)
    return KERNEL_OK


cdef inline int conv2d_backward_data_impl(const floating* w,   # IN  (cout, cin/groups, kh, kw)
                                          const floating* dy,  # IN  (batch, cout, oh, ow)
                                          floating* dx,        # OUT (batch, cin, h, w)
                                          floating* col, const Conv* s) noexcept nogil:
    # Per (image, group): col = W_g^T dy_g, then col2im; without im2col, W_g^T dy_g is dx_g.
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Py_ssize_t npix = s.oh * s.ow, kdim = cg * s.kh * s.kw, n, g
    cdef floating* dxg
    if s.use_col:
        memset(dx, 0, <size_t>(s.batch * s.cin * s.h * s.w) * sizeof(floating))
    for n in range(s.batch):
        for g in range(s.groups):
            dxg = dx + (n * s.cin + g * cg) * s.h * s.w
            gemm(True, False, kdim, npix, ocg, w + g * ocg * kdim,
                 dy + (n * s.cout + g * ocg) * npix, col if s.use_col else dxg, False)
            if s.use_col:
                col2im(col, dxg, s)
    return KERNEL_OK


cdef inline int conv2d_backward_filter_impl(const floating* x,   # IN  (batch, cin, h, w)
                                            const floating* dy,  # IN  (batch, cout, oh, ow)
                                            floating* dw,        # OUT (cout, cin/groups, kh, kw)
                                            floating* col, const Conv* s) noexcept nogil:
    # dW_g = sum over images of dy_g col_g^T, accumulated by the GEMM itself (beta = 1)
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Py_ssize_t npix = s.oh * s.ow, kdim = cg * s.kh * s.kw, n, g
    cdef const floating* xg
    memset(dw, 0, <size_t>(s.cout * kdim) * sizeof(floating))
    for n in range(s.batch):
        for g in range(s.groups):
            xg = x + (n * s.cin + g * cg) * s.h * s.w
            if s.use_col:
                im2col(xg, col, s)
                xg = col
            gemm(False, True, ocg, kdim, npix, dy + (n * s.cout + g * ocg) * npix, xg,
                 dw + g * ocg * kdim, True)
    return KERNEL_OK


cdef inline int conv2d_call(const Call* c, floating* dtype_tag) noexcept nogil:
    # dtype_tag (always NULL) only selects the fused specialisation
    cdef const Conv* s = <const Conv*>c.ints
    cdef int nb = <int>s.has_bias
    cdef const floating* bias = <const floating*>c.bufs[2] if nb else NULL
    cdef floating* col = <floating*>c.bufs[3 + nb] if s.use_col else NULL
    return conv2d_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1], bias,
                       <floating*>c.bufs[2 + nb], col, s)


cdef inline int conv2d_backward_call(const Call* c, bint data, floating* dtype_tag) noexcept nogil:
    cdef const Conv* s = <const Conv*>c.ints
    cdef floating* col = <floating*>c.bufs[3] if s.use_col else NULL
    if data:
        return conv2d_backward_data_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1],
                                         <floating*>c.bufs[2], col, s)
    return conv2d_backward_filter_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1],
                                       <floating*>c.bufs[2], col, s)


# -- pooling --------------------------------------------------------------------------------------
cdef inline void window(Py_ssize_t o, Py_ssize_t size, Py_ssize_t osize, Py_ssize_t k,
                        Py_ssize_t stride, Py_ssize_t pad, bint adaptive,
                        Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    # The input range [lo, hi) that output index o reads along one axis, padding cut off.
    # Adaptive windows are PyTorch's: [floor(o * size / osize), ceil((o + 1) * size / osize)).
    cdef Py_ssize_t start
    if adaptive:
        lo[0] = o * size // osize
        hi[0] = ((o + 1) * size + osize - 1) // osize
    else:
        start = o * stride - pad
        lo[0] = start if start > 0 else 0
        hi[0] = start + k if start + k < size else size


cdef inline void window2d(const Pool* s, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t* h0,
                          Py_ssize_t* h1, Py_ssize_t* w0, Py_ssize_t* w1) noexcept nogil:
    # Never empty: the shape rules keep padding below the window size.
    cdef bint adaptive = s.mode == P_ADAPTIVE_MAX or s.mode == P_ADAPTIVE_AVG
    window(oh, s.h, s.oh, s.kh, s.sh, s.ph, adaptive, h0, h1)
    window(ow, s.w, s.ow, s.kw, s.sw, s.pw, adaptive, w0, w1)


cdef inline Py_ssize_t divisor(const Pool* s, Py_ssize_t h0, Py_ssize_t h1, Py_ssize_t w0,
                               Py_ssize_t w1) noexcept nogil:
    return s.kh * s.kw if s.mode == P_AVG_INCLUDE else (h1 - h0) * (w1 - w0)


cdef inline floating window_max(const floating* x, Py_ssize_t w, Py_ssize_t h0, Py_ssize_t h1,
                                Py_ssize_t w0, Py_ssize_t w1) noexcept nogil:
    cdef floating m = -INFINITY, v
    cdef Py_ssize_t i, j
    for i in range(h0, h1):
        for j in range(w0, w1):
            v = x[i * w + j]
            if v > m or v != v:  # NaN propagates, as np.max
                m = v
    return m


cdef inline Py_ssize_t window_argmax(const floating* x, Py_ssize_t w, Py_ssize_t h0,
                                     Py_ssize_t h1, Py_ssize_t w0, Py_ssize_t w1) noexcept nogil:
    # The cell window_max returns: the first maximum in row-major order, or the first NaN
    cdef Py_ssize_t best = h0 * w + w0, i, j
    cdef floating m = x[best], v
    for i in range(h0, h1):
        for j in range(w0, w1):
            v = x[i * w + j]
            if v > m or (v != v and m == m):
                m = v
                best = i * w + j
    return best


cdef inline double window_sum(const floating* x, Py_ssize_t w, Py_ssize_t h0, Py_ssize_t h1,
                              Py_ssize_t w0, Py_ssize_t w1) noexcept nogil:
    # Accumulates in double: a global pool sums thousands of float32 values.
    cdef double acc = 0
    cdef Py_ssize_t i, j
    if w0 == 0 and w1 == w:  # whole rows are one contiguous run (global pooling)
        for i in range(h0 * w, h1 * w):
            acc += x[i]
        return acc
    for i in range(h0, h1):
        for j in range(w0, w1):
            acc += x[i * w + j]
    return acc


cdef inline floating pool_one(const floating* x, const Pool* s, Py_ssize_t oh,
                              Py_ssize_t ow) noexcept nogil:
    cdef Py_ssize_t h0, h1, w0, w1
    window2d(s, oh, ow, &h0, &h1, &w0, &w1)
    if s.mode == P_MAX or s.mode == P_ADAPTIVE_MAX:
        return window_max(x, s.w, h0, h1, w0, w1)
    return <floating>(window_sum(x, s.w, h0, h1, w0, w1) / divisor(s, h0, h1, w0, w1))


cdef inline int pool2d_impl(const floating* x, floating* y, const Pool* s) noexcept nogil:
    cdef Py_ssize_t p, oh, ow
    for p in range(s.planes):
        for oh in range(s.oh):
            for ow in range(s.ow):
                y[oh * s.ow + ow] = pool_one(x, s, oh, ow)
        x += s.h * s.w
        y += s.oh * s.ow
    return KERNEL_OK


cdef inline int max_pool2d_backward_impl(const floating* x,   # IN  (planes, h, w)
                                         const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window's gradient goes to its argmax; overlapping windows add up.
    cdef Py_ssize_t p, oh, ow, h0, h1, w0, w1
    memset(dx, 0, <size_t>(s.planes * s.h * s.w) * sizeof(floating))
    for p in range(s.planes):
        for oh in range(s.oh):
            for ow in range(s.ow):
                window2d(s, oh, ow, &h0, &h1, &w0, &w1)
                dx[window_argmax(x, s.w, h0, h1, w0, w1)] += dy[oh * s.ow + ow]
        x += s.h * s.w
        dx += s.h * s.w
        dy += s.oh * s.ow
    return KERNEL_OK


cdef inline int max_pool2d_select_impl(const floating* x,  # IN  (planes, h, w)
                                       const floating* h,  # IN  (planes, h, w)
                                       floating* y,        # OUT (planes, oh, ow)
                                       const Pool* s) noexcept nogil:
    # The adjoint of max_pool2d_backward in its gradient argument: read h where it wrote.
    cdef Py_ssize_t p, oh, ow, h0, h1, w0, w1
    for p in range(s.planes):
        for oh in range(s.oh):
            for ow in range(s.ow):
                window2d(s, oh, ow, &h0, &h1, &w0, &w1)
                y[oh * s.ow + ow] = h[window_argmax(x, s.w, h0, h1, w0, w1)]
        x += s.h * s.w
        h += s.h * s.w
        y += s.oh * s.ow
    return KERNEL_OK


cdef inline int avg_pool2d_backward_impl(const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window spreads dy / divisor over the cells it read; overlapping windows add up.
    cdef Py_ssize_t p, oh, ow, h0, h1, w0, w1, i, j
    cdef floating share
    memset(dx, 0, <size_t>(s.planes * s.h * s.w) * sizeof(floating))
    for p in range(s.planes):
        for oh in range(s.oh):
            for ow in range(s.ow):
                window2d(s, oh, ow, &h0, &h1, &w0, &w1)
                share = dy[oh * s.ow + ow] / divisor(s, h0, h1, w0, w1)
                for i in range(h0, h1):
                    for j in range(w0, w1):
                        dx[i * s.w + j] += share
        dx += s.h * s.w
        dy += s.oh * s.ow
    return KERNEL_OK


# -- entry points: one per (kernel family, dtype) -------------------------------------------------
cdef int conv2d_f32(const Call* c) noexcept nogil:
    return conv2d_call(c, <float*>NULL)
cdef int conv2d_f64(const Call* c) noexcept nogil:
    return conv2d_call(c, <double*>NULL)

cdef int conv2d_backward_data_f32(const Call* c) noexcept nogil:
    return conv2d_backward_call(c, True, <float*>NULL)
cdef int conv2d_backward_data_f64(const Call* c) noexcept nogil:
    return conv2d_backward_call(c, True, <double*>NULL)
cdef int conv2d_backward_filter_f32(const Call* c) noexcept nogil:
    return conv2d_backward_call(c, False, <float*>NULL)
cdef int conv2d_backward_filter_f64(const Call* c) noexcept nogil:
    return conv2d_backward_call(c, False, <double*>NULL)

cdef int pool2d_f32(const Call* c) noexcept nogil:
    return pool2d_impl(<const float*>c.bufs[0], <float*>c.bufs[1], <const Pool*>c.ints)
cdef int pool2d_f64(const Call* c) noexcept nogil:
    return pool2d_impl(<const double*>c.bufs[0], <double*>c.bufs[1], <const Pool*>c.ints)

cdef int max_pool2d_backward_f32(const Call* c) noexcept nogil:
    return max_pool2d_backward_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                    <float*>c.bufs[2], <const Pool*>c.ints)
cdef int max_pool2d_backward_f64(const Call* c) noexcept nogil:
    return max_pool2d_backward_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                    <double*>c.bufs[2], <const Pool*>c.ints)

cdef int max_pool2d_select_f32(const Call* c) noexcept nogil:
    return max_pool2d_select_impl(<const float*>c.bufs[0], <const float*>c.bufs[1],
                                  <float*>c.bufs[2], <const Pool*>c.ints)
cdef int max_pool2d_select_f64(const Call* c) noexcept nogil:
    return max_pool2d_select_impl(<const double*>c.bufs[0], <const double*>c.bufs[1],
                                  <double*>c.bufs[2], <const Pool*>c.ints)

cdef int avg_pool2d_backward_f32(const Call* c) noexcept nogil:
    return avg_pool2d_backward_impl(<const float*>c.bufs[0], <float*>c.bufs[1],
                                    <const Pool*>c.ints)
cdef int avg_pool2d_backward_f64(const Call* c) noexcept nogil:
    return avg_pool2d_backward_impl(<const double*>c.bufs[0], <double*>c.bufs[1],
                                    <const Pool*>c.ints)

cdef inline object addr(kernel_fn f):
    return <Py_ssize_t>f

KERNELS = {
    "conv2d_f32": addr(conv2d_f32), "conv2d_f64": addr(conv2d_f64),
    "conv2d_backward_data_f32": addr(conv2d_backward_data_f32),
    "conv2d_backward_data_f64": addr(conv2d_backward_data_f64),
    "conv2d_backward_filter_f32": addr(conv2d_backward_filter_f32),
    "conv2d_backward_filter_f64": addr(conv2d_backward_filter_f64),
    "pool2d_f32": addr(pool2d_f32), "pool2d_f64": addr(pool2d_f64),
    "max_pool2d_backward_f32": addr(max_pool2d_backward_f32),
    "max_pool2d_backward_f64": addr(max_pool2d_backward_f64),
    "max_pool2d_select_f32": addr(max_pool2d_select_f32),
    "max_pool2d_select_f64": addr(max_pool2d_select_f64),
    "avg_pool2d_backward_f32": addr(avg_pool2d_backward_f32),
    "avg_pool2d_backward_f64": addr(avg_pool2d_backward_f64),
}
