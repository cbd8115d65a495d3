# Convolution (im2col + GEMM, shifted GEMMs, or register-blocked float32 tiles) over NCHW tensors,
# and its backward passes.
#
# Parameter layout (ints): the Conv struct below, whose field names this module exports as
# CONV_FIELDS (the lowering, mgegraph/_kernels/lowering/conv.py, packs them by name; a struct of
# Py_ssize_t fields has no padding, so it overlays the int array exactly):
#   conv2d:                 bufs: x, w, [bias,] y, [workspace]
#   conv2d_backward_data:   x is the result; bufs: w, dy, [bias,] dx, [workspace] (the bias
#                           the epilogue pass folds in: added to each cell of dx once its sum
#                           is complete, so the bits are those of a separate add)
#   conv2d_backward_filter: w is the result; bufs: x, dy, dw, [workspace]
# ``path`` is one of CONV_PATHS; the workspace, present unless the path is C_DIRECT, holds
# workspace_size(ints, op) elements. ``isa`` and ``threads`` matter to the tiled paths only.
#
# Design: the im2col matrix of one batch element and one group lives in the workspace and is
# reused for every (element, group) pair, so scratch memory does not grow with the batch (it
# grows with the threads instead: one per thread, see conv_gemm.pxi, which splits the GEMM paths
# among threads and runs the BLAS single-threaded under them). A 1x1,
# stride-1, unpadded convolution's input already is its im2col matrix, so it skips the copy.
# A forward convolution at stride 1 without dilation needs no im2col matrix: it sums one GEMM
# per tap over a padded copy of the input (see shifted_group).
# The backward passes reuse the forward's layout: backward-data is GEMM (W^T dy) then col2im,
# the adjoint of im2col; backward-filter accumulates dy col^T over the batch in place.
# Backward data's "tiles" way (float32) runs that GEMM on gemm_tile.h's panels and col2im from
# conv_data_gemm.h, the C runtime's own (conv_gemm.pxi's data_tiles).
# The tiled paths ("blocked", "gather"; float32) live in conv_blocked.pxi and conv_tile.h, the
# depthwise path in conv_depthwise.pxi (dw3.h, dw_tap.h), the pointwise one (float32 1x1 at
# stride 1: register tiles over NCHW in place) in conv_pointwise.pxi and conv_pointwise.h.
# Pooling is in pool.pyx.

from libc.string cimport memcpy, memset
from cython cimport floating

from .abi cimport Call, KERNEL_OK, KERNEL_UNSUPPORTED, kernel_fn, kernel_address
from .params cimport fields_of
from .window cimport ceil_div, clamp
from .blas cimport gemm, gemm_ld
from .blas_table cimport blas_one_thread, blas_restore_threads
from .activation cimport activate

cdef extern from "conv_col2im.h":  # the GEMM path's col2im, shared with the C runtime
    ctypedef struct conv_col2im_geometry:
        Py_ssize_t h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw
    void conv_col2im_rows_f32(const float* col, float* x, const float* bias, Py_ssize_t c0,
                              Py_ssize_t c1, const conv_col2im_geometry* s) noexcept nogil
    void conv_col2im_rows_f64(const double* col, double* x, const double* bias, Py_ssize_t c0,
                              Py_ssize_t c1, const conv_col2im_geometry* s) noexcept nogil

cdef extern from "conv_data.h":  # the data gradient's layout, shared with the C runtime
    ctypedef struct conv_shape:  # the sizes: the Conv struct's first fields
        Py_ssize_t batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups
    int conv_data_as_forward(const conv_shape* s, conv_shape* t) noexcept nogil
    Py_ssize_t conv_data_pad(Py_ssize_t k, Py_ssize_t d, Py_ssize_t p) noexcept nogil
    Py_ssize_t conv_data_weight(Py_ssize_t g, Py_ssize_t o, Py_ssize_t c, Py_ssize_t t,
                                Py_ssize_t nc, Py_ssize_t no, Py_ssize_t taps) noexcept nogil

ctypedef struct Conv:
    Py_ssize_t batch, cin, h, w, cout, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, groups
    # path: a ConvPath; activation: the epilogue's (conv2d), an activation.h code (ACT_*)
    Py_ssize_t has_bias, path, activation
    Py_ssize_t isa, threads  # the blocked path's tiles (BLOCKED_ISAS), the threads it may use
    Py_ssize_t transposed  # im2col's conv2d GEMM gives y^T (cells x channels), then transposes
    # conv2d_packed: the weights come packed in blocks of this many output channels (the
    # width of one of the isa's gather tiles; conv_blocked.pxi); 0: conv2d's weights
    Py_ssize_t packed

cdef enum ConvPath:
    C_DIRECT,   # a 1x1, stride-1, unpadded convolution: the input is its own im2col matrix
    C_IM2COL,   # im2col, then one GEMM per (image, group)
    C_SHIFTED,  # stride-1, undilated conv2d (forward only): one GEMM per tap
    C_BLOCKED,  # float32 register-blocked row tiles: conv2d at stride 1 or 2, backward data at 1
    C_GATHER,   # float32, conv2d (any stride) and backward data at stride 1: gather tiles
    C_BATCHED,  # conv2d without groups: every image's im2col in one matrix, one GEMM
    C_WINOGRAD,  # conv2d without groups, 3x3 at stride 1: Winograd F(2x2, 3x3), 16 GEMMs
    C_DEPTHWISE,  # conv2d with one input and output channel per group: planes summed in place
    C_POINTWISE,  # float32 conv2d 1x1 at stride 1 unpadded: register tiles on NCHW in place
    C_TILES,    # float32 backward data: im2col's (or direct's) GEMM on gemm_tile.h's panels

CONV_PATHS = {"direct": C_DIRECT, "im2col": C_IM2COL, "shifted": C_SHIFTED, "blocked": C_BLOCKED,
              "gather": C_GATHER, "batched": C_BATCHED, "winograd": C_WINOGRAD,
              "depthwise": C_DEPTHWISE, "pointwise": C_POINTWISE, "tiles": C_TILES}

cdef Conv _conv
CONV_FIELDS = fields_of(_conv, sizeof(Conv))


cdef Conv conv_params(ints) except *:
    # the Conv struct of parameters ``ints`` (the lowering's layout)
    cdef Conv s
    cdef Py_ssize_t* fields = <Py_ssize_t*>&s
    cdef Py_ssize_t i
    if len(ints) != len(CONV_FIELDS):
        raise ValueError(f"expected the {len(CONV_FIELDS)} Conv parameters {CONV_FIELDS}, "
                         f"got {len(ints)}")
    for i in range(len(CONV_FIELDS)):
        fields[i] = ints[i]
    return s

cdef enum ConvOp:
    OP_FORWARD, OP_DATA, OP_FILTER

OPS = {"conv2d": OP_FORWARD, "conv2d_backward_data": OP_DATA,
       "conv2d_backward_filter": OP_FILTER}

include "conv_blocked.pxi"
include "conv_gemm.pxi"
include "conv_winograd.pxi"
include "conv_depthwise.pxi"
include "conv_pointwise.pxi"


# -- im2col and its adjoint -----------------------------------------------------------------------


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
    im2col_range(x, col, 0, s.cin // s.groups, s)


cdef inline void im2col_range(const floating* x, floating* col, Py_ssize_t c0, Py_ssize_t c1,
                              const Conv* s) noexcept nogil:
    # the rows of input channels [c0, c1) of x's im2col matrix, from col on
    cdef Py_ssize_t ci, i, j, oh, ih
    cdef Shift t
    for ci in range(c0, c1):
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
    col2im_range(col, x, 0, s.cin // s.groups, s)


cdef inline void col2im_range(floating* col, floating* x, Py_ssize_t c0, Py_ssize_t c1,
                              const Conv* s) noexcept nogil:
    # col2im of the rows of input channels [c0, c1), from col on: they add to those planes only
    cdef Py_ssize_t ci, i, j, oh, ih, ow, lo, hi, off
    cdef floating* xrow
    cdef Shift t
    for ci in range(c0, c1):
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


cdef inline void col2im_rows(const floating* col, floating* x, const floating* bias,
                             Py_ssize_t c0, Py_ssize_t c1, const Conv* s) noexcept nogil:
    # col2im of the rows of input channels [c0, c1) at a stride, planes of x written whole (no
    # zeroing beforehand), bias (the group's, or NULL) added to each row once its sums are
    # complete: conv_col2im.h's, which the C runtime runs too (the same order of adds as
    # col2im_range: the same bits)
    cdef conv_col2im_geometry g
    g.h, g.w, g.oh, g.ow, g.kh, g.kw = s.h, s.w, s.oh, s.ow, s.kh, s.kw
    g.sh, g.sw, g.ph, g.pw, g.dh, g.dw = s.sh, s.sw, s.ph, s.pw, s.dh, s.dw
    if floating is float:
        conv_col2im_rows_f32(col, x, bias, c0, c1, &g)
    else:
        conv_col2im_rows_f64(col, x, bias, c0, c1, &g)


# -- convolution ----------------------------------------------------------------------------------
cdef inline void epilogue_rows(floating* y, const floating* bias, Py_ssize_t act,
                               Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    # bias and activation on one group's GEMM output while it is still in cache; the activation
    # is the op's own scalar function (activation.pxd), so it gives bitwise what a relu or relu6
    # (clip) node after the conv would
    cdef Py_ssize_t r, i
    cdef floating b
    for r in range(rows):
        b = bias[r] if bias != NULL else 0
        if act:
            for i in range(cols):
                y[i] = activate(y[i] + b, act)
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


cdef inline void pad_planes(const floating* x, floating* padded, Py_ssize_t c0, Py_ssize_t c1,
                            const Shifted* t, const Conv* s) noexcept nogil:
    # The interior of padded planes [c0, c1); their borders are zeroed once per call
    cdef Py_ssize_t c, r
    for c in range(c0, c1):
        for r in range(s.h):
            memcpy(padded + (c * t.hp + r + s.ph) * t.wp + s.pw, x + (c * s.h + r) * s.w,
                   <size_t>s.w * sizeof(floating))


cdef inline void shifted_rows(const floating* x, const floating* packed, floating* y,
                              floating* rows, Py_ssize_t o0, Py_ssize_t o1, const Shifted* t,
                              const Conv* s) noexcept nogil:
    # output channels [o0, o1) of y (ocg, oh, ow) = one group's convolution of x, its (cg, hp,
    # wp) padded planes (or the input itself when unpadded), packed holding its weights
    cdef Py_ssize_t cg = s.cin // s.groups, ocg = s.cout // s.groups, i, j, o, r
    for i in range(s.kh):
        for j in range(s.kw):
            gemm_ld(False, False, o1 - o0, t.ncols, cg, packed + o0 * cg, cg, x + i * t.wp + j,
                    t.hp * t.wp, rows + o0 * t.ncols, t.ncols, i > 0 or j > 0)
            packed += ocg * cg
    for o in range(o0, o1):
        for r in range(s.oh):
            memcpy(y + (o * s.oh + r) * s.ow, rows + o * t.ncols + r * t.wp,
                   <size_t>s.ow * sizeof(floating))


cdef inline Py_ssize_t workspace_elems(const Conv* s, int op) noexcept nogil:
    cdef Py_ssize_t extra = 0
    cdef Conv backward
    if s.packed:
        return packed_elems(s)
    if s.path == C_BLOCKED or s.path == C_GATHER:
        return blocked_elems(s, op)
    if s.path == C_WINOGRAD:
        backward = wino_backward(s)
        return winograd_elems(&backward if op == OP_DATA else s)
    if s.path == C_DEPTHWISE:
        return depthwise_elems(s)
    if s.path == C_POINTWISE:
        return 0
    if s.path == C_TILES:
        return data_tiles_elems(s) if op == OP_DATA else 0
    if s.path == C_SHIFTED:
        extra = shifted_of(s).npacked
    if s.path == C_BATCHED:  # every image's im2col and the GEMM's result
        extra = (s.cin * s.kh * s.kw + s.cout) * s.batch * s.oh * s.ow
    return extra + gemm_slots(s, op) * gemm_slot(s, op)


def workspace_size(ints, op="conv2d"):
    """The elements of workspace the kernel of ``op`` (a key of OPS) needs for Conv parameters
    ``ints`` (the lowering's layout).

    >>> workspace_size(ints) * itemsize  # bytes, as the lowering asks for them
    """
    cdef Conv s = conv_params(ints)
    return workspace_elems(&s, OPS[op])


cdef inline int conv2d_impl(const floating* x, const floating* w, const floating* bias,
                            floating* y, floating* ws, const Conv* s) noexcept nogil:
    cdef Blocked b
    if s.packed:
        if floating is float and s.path == C_GATHER:
            return packed_call(x, w, bias, s.activation, y, ws, s)
        return KERNEL_UNSUPPORTED  # the lowering takes it for float32 on the gather tiles only
    if s.path == C_BLOCKED or s.path == C_GATHER:
        if floating is float:
            b = blocked_forward(s)
            return blocked_call(x, w, bias, s.activation, y, ws, &b, s)
        return KERNEL_UNSUPPORTED  # the lowering takes it for float32 only
    if s.path == C_WINOGRAD:
        if floating is float:
            return conv2d_winograd(x, w, bias, y, ws, False, s)
        return KERNEL_UNSUPPORTED  # the lowering takes it for float32 only
    if s.path == C_BATCHED:
        return conv2d_batched(x, w, bias, y, ws, s)
    if s.path == C_DEPTHWISE:
        return conv2d_depthwise(x, w, bias, y, ws, s)
    if s.path == C_POINTWISE:
        if floating is float:
            return conv2d_pointwise(x, w, bias, y, s)
        return KERNEL_UNSUPPORTED  # the lowering takes it for float32 only
    return conv2d_gemm(x, w, bias, y, ws, s)


cdef inline int conv2d_backward_data_impl(const floating* w,   # IN  (cout, cin/groups, kh, kw)
                                          const floating* dy,  # IN  (batch, cout, oh, ow)
                                          const floating* bias,  # IN (cin,) or NULL
                                          floating* dx,        # OUT (batch, cin, h, w)
                                          floating* col, const Conv* s) noexcept nogil:
    # Per (image, group): col = W_g^T dy_g, then col2im; without im2col, W_g^T dy_g is dx_g.
    # The tiles add the bias as they store a cell, as conv2d's epilogue does.
    cdef Blocked b
    cdef Conv t
    if s.path == C_BLOCKED or s.path == C_GATHER:
        if floating is float:
            b = blocked_backward(s)
            return blocked_call(dy, w, bias, False, dx, col, &b, s)
        return KERNEL_UNSUPPORTED
    if s.path == C_WINOGRAD:
        if floating is float:
            t = wino_backward(s)
            return conv2d_winograd(dy, w, bias, dx, col, True, &t)
        return KERNEL_UNSUPPORTED
    if s.path == C_TILES:
        if floating is float:
            return data_tiles(w, dy, bias, dx, col, s)
        return KERNEL_UNSUPPORTED  # the lowering takes it for float32 only
    return backward_gemm(w, dy, bias, dx, col, True, s)


cdef inline int conv2d_backward_filter_impl(const floating* x,   # IN  (batch, cin, h, w)
                                            const floating* dy,  # IN  (batch, cout, oh, ow)
                                            floating* dw,        # OUT (cout, cin/groups, kh, kw)
                                            floating* col, const Conv* s) noexcept nogil:
    # dW_g = sum over images of dy_g col_g^T, accumulated by the GEMM itself (beta = 1)
    if s.path == C_GATHER:
        if floating is float:
            return filter_call(x, dy, dw, col, s)
        return KERNEL_UNSUPPORTED
    return backward_gemm(x, dy, NULL, dw, col, False, s)


cdef inline int conv2d_call(const Call* c, floating* dtype_tag) noexcept nogil:
    # dtype_tag (always NULL) only selects the fused specialisation
    cdef const Conv* s = <const Conv*>c.ints
    cdef int nb = <int>s.has_bias
    cdef const floating* bias = <const floating*>c.bufs[2] if nb else NULL
    cdef bint has_ws = s.path != C_DIRECT and s.path != C_POINTWISE and (
        s.path != C_DEPTHWISE or depthwise_elems(s) > 0)
    cdef floating* ws = <floating*>c.bufs[3 + nb] if has_ws else NULL
    # the BLAS runs on one thread under each of ours, this one included (conv_gemm.pxi)
    cdef int previous = blas_one_thread(), status
    status = conv2d_impl(<const floating*>c.bufs[0], <const floating*>c.bufs[1], bias,
                         <floating*>c.bufs[2 + nb], ws, s)
    blas_restore_threads(previous)
    return status


cdef inline int conv2d_backward_call(const Call* c, bint data, floating* dtype_tag) noexcept nogil:
    cdef const Conv* s = <const Conv*>c.ints
    cdef int nb = <int>(data and s.has_bias)
    cdef const floating* bias = <const floating*>c.bufs[2] if nb else NULL
    cdef floating* col = (<floating*>c.bufs[3 + nb] if s.path in (
        C_IM2COL, C_BLOCKED, C_GATHER, C_WINOGRAD, C_TILES) else NULL)
    cdef int previous = blas_one_thread(), status  # as conv2d_call's
    if data:
        status = conv2d_backward_data_impl(<const floating*>c.bufs[0],
                                           <const floating*>c.bufs[1], bias,
                                           <floating*>c.bufs[2 + nb], col, s)
    else:
        status = conv2d_backward_filter_impl(<const floating*>c.bufs[0],
                                             <const floating*>c.bufs[1], <floating*>c.bufs[2], col,
                                             s)
    blas_restore_threads(previous)
    return status


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

cdef int conv2d_pack_weight_f32(const Call* c) noexcept nogil:
    pack_weight(<const float*>c.bufs[0], <float*>c.bufs[1], <const Conv*>c.ints)
    return KERNEL_OK

KERNELS = {
    "conv2d_f32": kernel_address(conv2d_f32), "conv2d_f64": kernel_address(conv2d_f64),
    "conv2d_pack_weight_f32": kernel_address(conv2d_pack_weight_f32),
    "conv2d_backward_data_f32": kernel_address(conv2d_backward_data_f32),
    "conv2d_backward_data_f64": kernel_address(conv2d_backward_data_f64),
    "conv2d_backward_filter_f32": kernel_address(conv2d_backward_filter_f32),
    "conv2d_backward_filter_f64": kernel_address(conv2d_backward_filter_f64),
}
