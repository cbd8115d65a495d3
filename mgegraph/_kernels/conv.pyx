# Convolution (im2col + GEMM) and 2-D pooling over NCHW tensors, and their backward passes.
#
# Parameter layout (ints), written by mgegraph.ops.conv; the kernels read them as the structs
# below (a struct of Py_ssize_t fields has no padding, so it overlays the int array exactly):
#   conv2d:                 Conv fields in order; bufs: x, w, [bias,] y, [workspace]
#   conv2d_backward_data:   Conv fields (x is the result); bufs: w, dy, dx, [workspace]
#   conv2d_backward_filter: Conv fields (w is the result); bufs: x, dy, dw, [workspace]
# The workspace, present unless the path is C_DIRECT, holds workspace_size(ints) elements.
#   pool2d:                 Pool fields in order; bufs: x, y
#   max_pool2d_backward:    Pool fields; bufs: x, dy, dx
#   avg_pool2d_backward:    Pool fields; bufs: dy, dx
#   max_pool2d_select:      Pool fields; bufs: x, h, y (y = h at the argmax of each window of x)
#
# Design: the im2col matrix of one batch element and one group lives in the workspace and is
# reused for every (element, group) pair, so scratch memory does not grow with the batch. A 1x1,
# stride-1, unpadded convolution's input already is its im2col matrix, so it skips the copy.
# A forward convolution at stride 1 without dilation needs no im2col matrix: it sums one GEMM
# per tap over a padded copy of the input (see shifted_group).
# The backward passes reuse the forward's layout: backward-data is GEMM (W^T dy) then col2im,
# the adjoint of im2col; backward-filter accumulates dy col^T over the batch in place.

from libc.math cimport INFINITY, NAN
from libc.string cimport memcpy, memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, kernel_fn, kernel_address
from .blas cimport gemm, gemm_strided

ctypedef struct Conv:
    Py_ssize_t batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups
    Py_ssize_t has_bias, path, relu  # path: a ConvPath; relu: the epilogue applies relu (conv2d)

ctypedef struct Pool:
    Py_ssize_t mode, planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw

cdef enum ConvPath:
    C_DIRECT,   # a 1x1, stride-1, unpadded convolution: the input is its own im2col matrix
    C_IM2COL,   # im2col, then one GEMM per (image, group)
    C_SHIFTED,  # stride-1, undilated conv2d (forward only): one GEMM per tap

cdef enum PoolMode:
    P_MAX, P_AVG_INCLUDE, P_AVG_EXCLUDE, P_ADAPTIVE_MAX, P_ADAPTIVE_AVG

CONV_PATHS = {"direct": C_DIRECT, "im2col": C_IM2COL, "shifted": C_SHIFTED}
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


# Design: at stride 1 (any padding or dilation), tap (i, j)'s block of col (oh, ow) is the input
# plane shifted by (top, left) = (i dh - ph, j dw - pw), zero outside the image, so it is built
# from its bounds alone instead of row by row (im2col_row: a memset and memcpy per output row,
# tens of thousands of small calls per convolution). When rows have the same length on both
# sides (ow == w: 'same' padding), the whole block is one contiguous run from its first in-image
# cell to its last, and the cells in that run that wrapped round a row edge (|left| per row
# boundary) are fixed up separately: im2col is then one memcpy per tap and col2im one run of
# adds. Both paths give the same bits: im2col copies, and col2im adds in the same order.
ctypedef struct Shift:
    Py_ssize_t top, left  # the block's cell (r, c) reads plane cell (r + top, c + left)
    Py_ssize_t r0, r1     # its rows that read the image, or r0 == r1 when none of it does
    Py_ssize_t lo, hi     # its columns that do


cdef inline Shift shift_of(Py_ssize_t i, Py_ssize_t j, const Conv* s) noexcept nogil:
    cdef Shift t
    t.top, t.left = i * s.dh - s.ph, j * s.dw - s.pw
    t.r0 = clamp(-t.top, 0, s.oh)
    t.r1 = clamp(s.h - t.top, t.r0, s.oh)
    t.lo = clamp(-t.left, 0, s.ow)
    t.hi = clamp(s.w - t.left, t.lo, s.ow)
    if t.hi == t.lo:
        t.r1 = t.r0
    return t


cdef inline void run_of(const Shift* t, const Conv* s, Py_ssize_t* first,
                        Py_ssize_t* last) noexcept nogil:
    # With ow == w and r1 > r0: the block cells [first, last) from the first in-image cell to the
    # last; they read plane cells [first, last) + top * w + left
    first[0] = t.r0 * s.ow + t.lo
    last[0] = (t.r1 - 1) * s.ow + t.hi


cdef inline void zero(floating* p, Py_ssize_t n) noexcept nogil:
    memset(p, 0, <size_t>n * sizeof(floating))


cdef inline void clear_wrapped(floating* block, const Shift* t, const Conv* s) noexcept nogil:
    # With ow == w: zero the cells of the run that wrapped round a row edge. Column by column, as
    # a loop over each short run would compile to a call to memset.
    cdef Py_ssize_t r, k
    for k in range(s.ow - t.hi + t.lo):
        for r in range(t.r0, t.r1 - 1):
            block[r * s.ow + t.hi + k] = 0


cdef inline void im2col_shifted(const floating* plane, floating* block, const Shift* t,
                                const Conv* s) noexcept nogil:
    cdef Py_ssize_t r, first, last
    zero(block, t.r0 * s.ow)
    if s.ow == s.w and t.r1 > t.r0:
        run_of(t, s, &first, &last)
        memcpy(block + first, plane + first + t.top * s.w + t.left,
               <size_t>(last - first) * sizeof(floating))
        zero(block + t.r0 * s.ow, t.lo)
        clear_wrapped(block, t, s)
        zero(block + last, s.ow - t.hi)
    else:
        for r in range(t.r0, t.r1):
            zero(block + r * s.ow, t.lo)
            memcpy(block + r * s.ow + t.lo, plane + (r + t.top) * s.w + t.lo + t.left,
                   <size_t>(t.hi - t.lo) * sizeof(floating))
            zero(block + r * s.ow + t.hi, s.ow - t.hi)
    zero(block + t.r1 * s.ow, (s.oh - t.r1) * s.ow)


cdef inline void im2col(const floating* x, floating* col, const Conv* s) noexcept nogil:
    # x: one group of one image, (cin/groups, h, w); col: (cin/groups * kh * kw, oh * ow)
    cdef Py_ssize_t ci, i, j, oh, ih
    cdef Shift t
    for ci in range(s.cin // s.groups):
        for i in range(s.kh):
            for j in range(s.kw):
                if s.sh == 1 and s.sw == 1:
                    t = shift_of(i, j, s)
                    im2col_shifted(x + ci * s.h * s.w, col, &t, s)
                    col += s.oh * s.ow
                    continue
                for oh in range(s.oh):
                    ih = oh * s.sh - s.ph + i * s.dh
                    if 0 <= ih < s.h:
                        im2col_row(x + (ci * s.h + ih) * s.w, col, j * s.dw - s.pw, s)
                    else:
                        memset(col, 0, <size_t>s.ow * sizeof(floating))
                    col += s.ow


cdef inline void add_run(floating* x, const floating* v, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        x[k] += v[k]


cdef inline void col2im_shifted(floating* block, floating* plane, const Shift* t,
                                const Conv* s) noexcept nogil:
    # The adjoint of im2col_shifted, in unit-stride adds. With ow == w, one run once the wrapped
    # cells are cleared: adding them then adds +0, which leaves x bitwise as it was (x never
    # holds -0: it starts at +0, and a sum is -0 only when both terms are).
    cdef Py_ssize_t r, first, last
    if s.ow == s.w and t.r1 > t.r0:
        run_of(t, s, &first, &last)
        clear_wrapped(block, t, s)
        add_run(plane + first + t.top * s.w + t.left, block + first, last - first)
        return
    for r in range(t.r0, t.r1):
        add_run(plane + (r + t.top) * s.w + t.lo + t.left, block + r * s.ow + t.lo, t.hi - t.lo)


cdef inline void col2im(floating* col, floating* x, const Conv* s) noexcept nogil:
    # The adjoint of im2col: x += every column entry added back where im2col read it, so
    # overlapping windows accumulate, in the order (ci, i, j) on both paths. x must be zeroed
    # beforehand; col is scratch (col2im_shifted clears cells of it).
    cdef Py_ssize_t ci, i, j, oh, ih, ow, lo, hi, off
    cdef floating* xrow
    cdef Shift t
    for ci in range(s.cin // s.groups):
        for i in range(s.kh):
            for j in range(s.kw):
                if s.sh == 1 and s.sw == 1:
                    t = shift_of(i, j, s)
                    col2im_shifted(col, x + ci * s.h * s.w, &t, s)
                    col += s.oh * s.ow
                    continue
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
cdef inline void epilogue_rows(floating* y, const floating* bias, bint relu, Py_ssize_t rows,
                               Py_ssize_t cols) noexcept nogil:
    # bias and relu on one group's GEMM output while it is still in cache
    cdef Py_ssize_t r, i
    cdef floating b, v
    for r in range(rows):
        b = bias[r] if bias != NULL else 0
        if relu:
            for i in range(cols):
                v = y[i] + b
                y[i] = v if v > 0 else 0
        elif bias != NULL:
            for i in range(cols):
                y[i] += b
        y += cols


# Design: at stride 1 without dilation, the zero-padded input plane (hp, wp) read from flat
# offset i * wp + j is tap (i, j)'s block of im2col, except that its rows are wp long: each has
# wp - ow extra cells that wrapped round the padded row's edge. So conv2d is the sum over taps of
# W_ij (ocg, cg) @ that window (cg planes, hp * wp apart), each a GEMM reading the padded input in
# place (kn2row, or "shifted GEMM"): the input is copied once rather than kh * kw times, and no
# im2col matrix is stored. The result keeps rows of wp cells, and a copy into y drops the wrapped
# ones. Its last row stops at ow cells, so the last tap's window ends at the padded plane's last
# cell: (kh - 1) * wp + kw - 1 + (oh - 1) * wp + ow = hp * wp, as oh = hp - kh + 1 and
# ow = wp - kw + 1. Without padding, the input itself is the padded plane.
# Workspace, in order: the weights repacked as one (ocg, cg) matrix per (group, tap); one
# (image, group)'s padded input, (cg, hp, wp), only when padded; the result, (ocg, ncols).
ctypedef struct Shifted:
    Py_ssize_t hp, wp, ncols             # the padded plane; the result's row length
    Py_ssize_t npacked, npadded, nrows   # the workspace areas, in elements


cdef inline Shifted shifted_of(const Conv* s) noexcept nogil:
    cdef Shifted t
    cdef Py_ssize_t cg = s.cin // s.groups
    t.hp, t.wp = s.h + 2 * s.ph, s.w + 2 * s.pw
    t.ncols = (s.oh - 1) * t.wp + s.ow
    t.npacked = s.cout * cg * s.kh * s.kw
    t.npadded = cg * t.hp * t.wp if s.ph or s.pw else 0
    t.nrows = s.cout // s.groups * t.ncols
    return t


cdef inline void pack_taps(const floating* w, floating* packed, const Conv* s) noexcept nogil:
    # packed[g, t, o, c] = w[g * ocg + o, c, t], for tap t = i * kw + j
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, taps = s.kh * s.kw
    cdef Py_ssize_t o, c, t, g
    for o in range(s.cout):
        g = o // ocg
        for c in range(cg):
            for t in range(taps):
                packed[((g * taps + t) * ocg + o - g * ocg) * cg + c] = w[(o * cg + c) * taps + t]


cdef inline void pad_planes(const floating* x, floating* padded, Py_ssize_t cg, const Shifted* t,
                            const Conv* s) noexcept nogil:
    # The interior of cg padded planes; their borders are zeroed once per call
    cdef Py_ssize_t c, r
    for c in range(cg):
        for r in range(s.h):
            memcpy(padded + (c * t.hp + r + s.ph) * t.wp + s.pw, x + (c * s.h + r) * s.w,
                   <size_t>s.w * sizeof(floating))


cdef inline void shifted_group(const floating* x, const floating* packed, floating* y,
                               floating* padded, floating* rows, const Shifted* t,
                               const Conv* s) noexcept nogil:
    # y (ocg, oh, ow) = one group's convolution of x (cg, h, w), packed holding its weights
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, i, j, o, r
    if t.npadded:
        pad_planes(x, padded, cg, t, s)
        x = padded
    for i in range(s.kh):
        for j in range(s.kw):
            gemm_strided(ocg, t.ncols, cg, packed, cg, x + i * t.wp + j, t.hp * t.wp, rows,
                         t.ncols, i > 0 or j > 0)
            packed += ocg * cg
    for o in range(ocg):
        for r in range(s.oh):
            memcpy(y + (o * s.oh + r) * s.ow, rows + o * t.ncols + r * t.wp,
                   <size_t>s.ow * sizeof(floating))


cdef inline Py_ssize_t workspace_elems(const Conv* s) noexcept nogil:
    cdef Shifted t
    if s.path == C_IM2COL:
        return s.cin // s.groups * s.kh * s.kw * s.oh * s.ow
    if s.path == C_SHIFTED:
        t = shifted_of(s)
        return t.npacked + t.npadded + t.nrows
    return 0


def workspace_size(ints):
    """The elements of workspace a kernel of this module needs for Conv parameters ``ints``
    (the lowering's layout), for all three convolution kernels.

    >>> workspace_size(ints) * itemsize  # bytes, as the lowering asks for them
    """
    cdef Conv s
    cdef Py_ssize_t* fields = <Py_ssize_t*>&s
    cdef Py_ssize_t i
    if len(ints) != CONV_NINTS:
        raise ValueError(f"expected {CONV_NINTS} Conv parameters, got {len(ints)}")
    for i in range(CONV_NINTS):
        fields[i] = ints[i]
    return workspace_elems(&s)


cdef inline int conv2d_impl(const floating* x, const floating* w, const floating* bias,
                            floating* y, floating* ws, const Conv* s) noexcept nogil:
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Py_ssize_t npix = s.oh * s.ow, kdim = cg * s.kh * s.kw, n, g
    cdef const floating* xg
    cdef floating* yg
    cdef Shifted t
    if s.path == C_SHIFTED:
        t = shifted_of(s)
        pack_taps(w, ws, s)
        zero(ws + t.npacked, t.npadded)
    for n in range(s.batch):
        for g in range(s.groups):
            xg = x + (n * s.cin + g * cg) * s.h * s.w
            yg = y + (n * s.cout + g * ocg) * npix
            if s.path == C_SHIFTED:
                shifted_group(xg, ws + g * ocg * kdim, yg, ws + t.npacked,
                              ws + t.npacked + t.npadded, &t, s)
            else:
                if s.path == C_IM2COL:
                    im2col(xg, ws, s)
                    xg = ws
                gemm(False, False, ocg, npix, kdim, w + g * ocg * kdim, xg, yg, False)
            if bias != NULL or s.relu:
                epilogue_rows(yg, bias + g * ocg if bias != NULL else NULL, s.relu, ocg, npix)
    return KERNEL_OK


cdef inline int conv2d_backward_data_impl(const floating* w,   # IN  (cout, cin/groups, kh, kw)
                                          const floating* dy,  # IN  (batch, cout, oh, ow)
                                          floating* dx,        # OUT (batch, cin, h, w)
                                          floating* col, const Conv* s) noexcept nogil:
    # Per (image, group): col = W_g^T dy_g, then col2im; without im2col, W_g^T dy_g is dx_g.
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups
    cdef Py_ssize_t npix = s.oh * s.ow, kdim = cg * s.kh * s.kw, n, g
    cdef floating* dxg
    if s.path == C_IM2COL:
        memset(dx, 0, <size_t>(s.batch * s.cin * s.h * s.w) * sizeof(floating))
    for n in range(s.batch):
        for g in range(s.groups):
            dxg = dx + (n * s.cin + g * cg) * s.h * s.w
            gemm(True, False, kdim, npix, ocg, w + g * ocg * kdim,
                 dy + (n * s.cout + g * ocg) * npix, col if s.path == C_IM2COL else dxg, False)
            if s.path == C_IM2COL:
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
            if s.path == C_IM2COL:
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
    cdef floating* ws = <floating*>c.bufs[3 + nb] if s.path != C_DIRECT else NULL
    return conv2d_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1], bias,
                       <floating*>c.bufs[2 + nb], ws, s)


cdef inline int conv2d_backward_call(const Call* c, bint data, floating* dtype_tag) noexcept nogil:
    cdef const Conv* s = <const Conv*>c.ints
    cdef floating* col = <floating*>c.bufs[3] if s.path == C_IM2COL else NULL
    if data:
        return conv2d_backward_data_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1],
                                         <floating*>c.bufs[2], col, s)
    return conv2d_backward_filter_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1],
                                       <floating*>c.bufs[2], col, s)


# -- pooling --------------------------------------------------------------------------------------
# Design: every pooling kernel walks one output row at a time. The columns whose windows lie wholly
# inside the image (all of them when there is no padding) go through row_interior: loops over
# windows with no clamping whose per-window work is branch-free (maxss, compares and selects).
# Given a literal window shape (the common 2x2/2, 3x3/3, 3x3/2, 3x3/1), the C compiler unrolls
# the window and vectorises across windows. The argmax ops (max backward, select) run in chunks
# of three passes: maxima, first-hit indices, then the scatter or gather. Border columns and
# adaptive windows take pool_cell, which clamps each window. NaN semantics are np.max's: a NaN in
# a window is its maximum, and the argmax ops use the first maximum in row-major order, or the
# first NaN. Windows that tile the input (stride == kernel, no padding) let the max and avg
# backward passes store rather than zero all of dx and then add.
cdef enum RowOp:
    R_MAX, R_AVG, R_MAX_BACKWARD, R_SELECT, R_AVG_BACKWARD


cdef inline bint is_max(floating v, floating m) noexcept nogil:
    # v is a cell the maximum m came from: equal to it, or NaN (then m is NaN too)
    return (v == m) | (v != v)


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


cdef inline bint is_adaptive(const Pool* s) noexcept nogil:
    return s.mode == P_ADAPTIVE_MAX or s.mode == P_ADAPTIVE_AVG


cdef inline Py_ssize_t divisor(const Pool* s, Py_ssize_t h0, Py_ssize_t h1, Py_ssize_t w0,
                               Py_ssize_t w1) noexcept nogil:
    return s.kh * s.kw if s.mode == P_AVG_INCLUDE else (h1 - h0) * (w1 - w0)


cdef inline void interior(const Pool* s, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    # The output columns [lo, hi) whose windows need no clamping; none for adaptive windows
    # (they vary in width). Never empty windows: the shape rules keep padding below the kernel.
    lo[0] = hi[0] = 0
    if is_adaptive(s) or s.w + s.pw < s.kw:
        return
    lo[0] = clamp(ceil_div(s.pw, s.sw), 0, s.ow)
    hi[0] = clamp((s.w + s.pw - s.kw) // s.sw + 1, lo[0], s.ow)


# -- one window: rows r < nr, columns j < nc of a plane of row length w, clamping already done --
cdef inline floating window_max(const floating* x, Py_ssize_t w, Py_ssize_t nr,
                                Py_ssize_t nc) noexcept nogil:
    # `v if v > m else m` is exactly maxss/maxsd (vector or scalar): no branch either way.
    # NaNs, which it skips, are counted beside it, so the maximum of a window with one is NaN.
    cdef floating m = -INFINITY, v
    cdef bint nan = False
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            v = x[r * w + j]
            m = v if v > m else m
            nan = nan | (v != v)
    return NAN if nan else m


cdef inline int first_hit(const floating* x, Py_ssize_t w, Py_ssize_t nr, Py_ssize_t nc,
                          floating m) noexcept nogil:
    # The row-major index r * nc + j of the first cell holding the window's maximum m (or the
    # first NaN). Scanning backwards, the last hit is the first; an int select over float compares
    # vectorises across windows, or is a cmov in scalar code, where a float one would branch.
    cdef int best = 0
    cdef Py_ssize_t r, j
    for r in range(nr - 1, -1, -1):
        for j in range(nc - 1, -1, -1):
            best = <int>(r * nc + j) if is_max(x[r * w + j], m) else best
    return best


cdef inline Py_ssize_t first_max(const floating* x, Py_ssize_t w, Py_ssize_t nr,
                                 Py_ssize_t nc) noexcept nogil:
    # The offset of the cell window_max's value comes from
    cdef int k = first_hit(x, w, nr, nc, window_max(x, w, nr, nc))
    return (k // nc) * w + k % nc


cdef inline double window_sum(const floating* x, Py_ssize_t w, Py_ssize_t nr,
                              Py_ssize_t nc) noexcept nogil:
    # Accumulates in double: a global pool sums thousands of float32 values.
    cdef double acc = 0
    cdef Py_ssize_t r, j
    if nc == w:  # whole rows are one contiguous run (global pooling)
        for r in range(nr * w):
            acc += x[r]
        return acc
    for r in range(nr):
        for j in range(nc):
            acc += x[r * w + j]
    return acc


cdef inline void window_route(const floating* x, floating* dx, Py_ssize_t w, Py_ssize_t nr,
                              Py_ssize_t nc, floating g) noexcept nogil:
    dx[first_max(x, w, nr, nc)] += g


cdef inline floating window_select(const floating* x, const floating* h, Py_ssize_t w,
                                   Py_ssize_t nr, Py_ssize_t nc) noexcept nogil:
    # h at the cell window_route sends the gradient to
    return h[first_max(x, w, nr, nc)]


cdef inline void window_spread(floating* dx, Py_ssize_t w, Py_ssize_t nr, Py_ssize_t nc,
                               floating share, bint overwrite) noexcept nogil:
    cdef Py_ssize_t r, j
    for r in range(nr):
        for j in range(nc):
            if overwrite:
                dx[r * w + j] = share
            else:
                dx[r * w + j] += share


# -- one output row ------------------------------------------------------------------------------
# Full-size side (offset like x): x, h, dx. Pooled side (offset like y): pin (dy), pout (y).
cdef inline void window_op(RowOp op, const floating* x, const floating* h, floating* dx,
                           const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t nr,
                           Py_ssize_t nc, double div, bint overwrite) noexcept nogil:
    if op == R_MAX:
        pout[0] = window_max(x, w, nr, nc)
    elif op == R_AVG:
        pout[0] = <floating>(window_sum(x, w, nr, nc) / div)
    elif op == R_MAX_BACKWARD:
        window_route(x, dx, w, nr, nc, pin[0])
    elif op == R_SELECT:
        pout[0] = window_select(x, h, w, nr, nc)
    else:
        window_spread(dx, w, nr, nc, pin[0] / <floating>div, overwrite)


cdef enum:
    CHUNK = 64  # windows per pass of row_argmax; its scratch lives on the stack


cdef inline void chunk_hits(const floating* x, floating* m, int* k, Py_ssize_t cnt, Py_ssize_t w,
                           Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride) noexcept nogil:
    # m[o], k[o]: the maximum of window o and the index of its first cell holding it
    cdef Py_ssize_t o
    for o in range(cnt):
        m[o] = window_max(x + o * stride, w, nr, nc)
    for o in range(cnt):
        k[o] = first_hit(x + o * stride, w, nr, nc, m[o])


cdef void chunk_argmax(const floating* x, floating* m, int* k, Py_ssize_t cnt, Py_ssize_t w,
                       Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride) noexcept nogil:
    # row_interior's literal cases, applied here: GCC will not inline the whole of row_argmax
    # into each of them, but does inline these two loops.
    if nr == 2 and nc == 2 and stride == 2:
        chunk_hits(x, m, k, cnt, w, 2, 2, 2)
    elif nr == 3 and nc == 3 and stride == 3:
        chunk_hits(x, m, k, cnt, w, 3, 3, 3)
    elif nr == 3 and nc == 3 and stride == 2:
        chunk_hits(x, m, k, cnt, w, 3, 3, 2)
    elif nr == 3 and nc == 3 and stride == 1:
        chunk_hits(x, m, k, cnt, w, 3, 3, 1)
    else:
        chunk_hits(x, m, k, cnt, w, nr, nc, stride)


cdef inline void row_argmax(bint select, const floating* x, const floating* h, floating* dx,
                            const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                            Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride,
                            bint overwrite) noexcept nogil:
    # max_pool2d_backward (dx += dy at each window's argmax) or _select (y = h there), in three
    # passes per chunk so the first two, maxima and then argmax indices, vectorise across
    # windows; the third reads or scatters. overwrite: the windows tile these nr rows, so they
    # are zeroed here rather than by a memset of all of dx.
    cdef floating m[CHUNK]
    cdef int k[CHUNK]
    cdef Py_ssize_t offset[CHUNK]  # of each window index k, when a window has <= CHUNK cells
    cdef Py_ssize_t c, base, o, cnt, at, r
    cdef bint table = nr * nc <= CHUNK
    if table:
        for r in range(nr * nc):
            offset[r] = (r // nc) * w + r % nc  # a lookup: no division per window
    if overwrite:
        for r in range(nr):
            memset(dx + r * w, 0, <size_t>(n * stride) * sizeof(floating))
    for c in range((n + CHUNK - 1) // CHUNK):
        base = c * CHUNK
        cnt = n - base if n - base < CHUNK else CHUNK
        chunk_argmax(x + base * stride, m, k, cnt, w, nr, nc, stride)
        for o in range(cnt):
            at = offset[k[o]] if table else (k[o] // nc) * w + k[o] % nc
            at += (base + o) * stride
            if select:
                pout[base + o] = h[at]
            else:
                dx[at] += pin[base + o]


cdef inline void row_windows(RowOp op, const floating* x, const floating* h, floating* dx,
                             const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                             Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride, double div,
                             bint overwrite) noexcept nogil:
    # n windows of nr x nc cells, `stride` columns apart; pooled-side pointers step by one
    cdef Py_ssize_t o
    for o in range(n):
        window_op(op, x + o * stride, h + o * stride, dx + o * stride, pin + o, pout + o, w,
                  nr, nc, div, overwrite)


cdef inline void row_interior(RowOp op, const floating* x, const floating* h, floating* dx,
                              const floating* pin, floating* pout, Py_ssize_t w, Py_ssize_t n,
                              Py_ssize_t nr, Py_ssize_t nc, Py_ssize_t stride, double div,
                              bint overwrite) noexcept nogil:
    # Literal window shapes for the common layers, so each call below compiles to its own loop
    if op == R_MAX_BACKWARD or op == R_SELECT:  # specialised per chunk instead
        row_argmax(op == R_SELECT, x, h, dx, pin, pout, w, n, nr, nc, stride, overwrite)
    elif nr == 2 and nc == 2 and stride == 2:
        row_windows(op, x, h, dx, pin, pout, w, n, 2, 2, 2, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 3:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 3, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 2:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 2, div, overwrite)
    elif nr == 3 and nc == 3 and stride == 1:
        row_windows(op, x, h, dx, pin, pout, w, n, 3, 3, 1, div, overwrite)
    else:
        row_windows(op, x, h, dx, pin, pout, w, n, nr, nc, stride, div, overwrite)


cdef inline void pool_cell(RowOp op, const Pool* s, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t h0,
                           Py_ssize_t h1, const floating* x, const floating* h, floating* dx,
                           const floating* pin, floating* pout) noexcept nogil:
    # One clamped window (border or adaptive); accumulates into dx, which never overwrites here
    cdef Py_ssize_t w0, w1, at
    window(ow, s.w, s.ow, s.kw, s.sw, s.pw, is_adaptive(s), &w0, &w1)
    at = h0 * s.w + w0
    window_op(op, x + at, h + at, dx + at, pin + ow, pout + ow, s.w, h1 - h0, w1 - w0,
              <double>divisor(s, h0, h1, w0, w1), False)


cdef inline void pool_plane(RowOp op, const Pool* s, const floating* x, const floating* h,
                            floating* dx, const floating* pin, floating* pout,
                            bint overwrite) noexcept nogil:
    cdef Py_ssize_t lo, hi, oh, ow, h0, h1, at
    interior(s, &lo, &hi)
    for oh in range(s.oh):
        window(oh, s.h, s.oh, s.kh, s.sh, s.ph, is_adaptive(s), &h0, &h1)
        at = h0 * s.w + lo * s.sw - s.pw
        if overwrite:  # a literal, so the stores compile without a test
            row_interior(op, x + at, h + at, dx + at, pin + lo, pout + lo, s.w, hi - lo,
                         h1 - h0, s.kw, s.sw, <double>divisor(s, h0, h1, 0, s.kw), True)
        elif hi > lo:
            row_interior(op, x + at, h + at, dx + at, pin + lo, pout + lo, s.w, hi - lo,
                         h1 - h0, s.kw, s.sw, <double>divisor(s, h0, h1, 0, s.kw), False)
        for ow in range(lo):
            pool_cell(op, s, oh, ow, h0, h1, x, h, dx, pin, pout)
        for ow in range(hi, s.ow):
            pool_cell(op, s, oh, ow, h0, h1, x, h, dx, pin, pout)
        pin += s.ow
        pout += s.ow


cdef inline bint tiles(const Pool* s) noexcept nogil:
    # Windows that are disjoint, unclamped and adjacent: a backward pass can store, not add
    return (not is_adaptive(s) and s.ph == 0 and s.pw == 0 and s.sh == s.kh and s.sw == s.kw)


cdef inline void clear_untiled(floating* dx, const Pool* s) noexcept nogil:
    # Zero the cells of one plane that no tiling window covers: the last rows and columns
    cdef Py_ssize_t r, used_h = s.oh * s.kh, used_w = s.ow * s.kw
    if used_w < s.w:
        for r in range(used_h):
            memset(dx + r * s.w + used_w, 0, <size_t>(s.w - used_w) * sizeof(floating))
    memset(dx + used_h * s.w, 0, <size_t>((s.h - used_h) * s.w) * sizeof(floating))


cdef inline int pool_planes(RowOp op, const Pool* s, const floating* x, const floating* h,
                            floating* dx, const floating* pin, floating* pout) noexcept nogil:
    # An op's unused pointers are set to used ones of the same layout, and are never read.
    cdef Py_ssize_t p, full = s.h * s.w, pooled = s.oh * s.ow
    cdef bint backward = op == R_MAX_BACKWARD or op == R_AVG_BACKWARD
    cdef bint overwrite = backward and tiles(s)
    if backward and not overwrite:
        memset(dx, 0, <size_t>(s.planes * full) * sizeof(floating))
    for p in range(s.planes):
        if overwrite:
            clear_untiled(dx + p * full, s)
        pool_plane(op, s, x + p * full, h + p * full, dx + p * full, pin + p * pooled,
                   pout + p * pooled, overwrite)
    return KERNEL_OK


cdef inline int pool2d_impl(const floating* x,  # IN  (planes, h, w)
                            floating* y,        # OUT (planes, oh, ow)
                            const Pool* s) noexcept nogil:
    if s.mode == P_MAX or s.mode == P_ADAPTIVE_MAX:
        return pool_planes(R_MAX, s, x, x, y, y, y)
    return pool_planes(R_AVG, s, x, x, y, y, y)


cdef inline int max_pool2d_backward_impl(const floating* x,   # IN  (planes, h, w)
                                         const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window's gradient goes to its argmax; overlapping windows add up.
    return pool_planes(R_MAX_BACKWARD, s, x, x, dx, dy, dx)


cdef inline int max_pool2d_select_impl(const floating* x,  # IN  (planes, h, w)
                                       const floating* h,  # IN  (planes, h, w)
                                       floating* y,        # OUT (planes, oh, ow)
                                       const Pool* s) noexcept nogil:
    # The adjoint of max_pool2d_backward in its gradient argument: read h where it wrote.
    return pool_planes(R_SELECT, s, x, h, y, y, y)


cdef inline int avg_pool2d_backward_impl(const floating* dy,  # IN  (planes, oh, ow)
                                         floating* dx,        # OUT (planes, h, w)
                                         const Pool* s) noexcept nogil:
    # Each window spreads dy / divisor over the cells it read; overlapping windows add up.
    return pool_planes(R_AVG_BACKWARD, s, dx, dx, dx, dy, dx)


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

KERNELS = {
    "conv2d_f32": kernel_address(conv2d_f32), "conv2d_f64": kernel_address(conv2d_f64),
    "conv2d_backward_data_f32": kernel_address(conv2d_backward_data_f32),
    "conv2d_backward_data_f64": kernel_address(conv2d_backward_data_f64),
    "conv2d_backward_filter_f32": kernel_address(conv2d_backward_filter_f32),
    "conv2d_backward_filter_f64": kernel_address(conv2d_backward_filter_f64),
    "pool2d_f32": kernel_address(pool2d_f32), "pool2d_f64": kernel_address(pool2d_f64),
    "max_pool2d_backward_f32": kernel_address(max_pool2d_backward_f32),
    "max_pool2d_backward_f64": kernel_address(max_pool2d_backward_f64),
    "max_pool2d_select_f32": kernel_address(max_pool2d_select_f32),
    "max_pool2d_select_f64": kernel_address(max_pool2d_select_f64),
    "avg_pool2d_backward_f32": kernel_address(avg_pool2d_backward_f32),
    "avg_pool2d_backward_f64": kernel_address(avg_pool2d_backward_f64),
}
