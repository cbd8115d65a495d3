# The int8 compute ops (mgegraph/ops/quantized.py): quantized_conv2d and quantized_linear (one
# kernel: a linear layer is a 1x1 convolution of (rows, in, 1, 1)), and quantized_add.
#
# Parameter layout: the ints are the structs below, whose field names this module exports
# (QCONV_FIELDS, QADD_FIELDS) for the lowering, mgegraph/_kernels/lowering/quantized.py, to pack
# by name. The convolution's floats are each output channel's requantisation multiplier, then
# each one's weight zero point; quantized_add's are its two multipliers. Buffers: x, w, the
# bias when there is one, the output, then the workspace (per thread: one output plane of int32
# accumulators and one output channel's weights less their zero point).
#
# Design: this is the portable way, plain loops that any C compiler vectorises along the output
# row; the integers are exactly ops/quantized.py's. The accumulator starts at the bias and adds
# (w - zw) * (x - zx) over the window, a padded position adding nothing (it holds the zero
# point). The epilogue multiplies the float32 accumulator by the float32 multiplier (a float
# product, as the reference: no double rounding), rounds half to even (rintf in the default
# rounding mode), adds the output zero point and saturates to [low, high], relu having raised
# low to the zero point. The units of work are the (image, output channel) planes.

from libc.math cimport rintf
from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.stdlib cimport free, malloc

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_OK, kernel_address
from .nditer cimport MAX_DIMS, Odometer, dims_ok, odometer_init, odometer_next, odometer_seek
from .params cimport fields_of
from .parallel cimport parallel_for
from .qgemm cimport (QG_NOT_RUN, QG_OUT_INT8, QG_OUT_INT32, QG_OUT_UINT8, QOutput, QWeights,
                     conv_run, depthwise_run, linear_run, pack_weights, packed_size, qg_conv,
                     weights_view)

ctypedef struct QConv:
    Py_ssize_t batch, channels, height, width, out_channels, kernel_h, kernel_w, out_h, out_w
    Py_ssize_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups
    Py_ssize_t w_code, out_code, x_zero, out_zero, low, high, has_bias, threads

ctypedef struct QAdd:
    Py_ssize_t a_zero, b_zero, out_zero, low, high, out_code, threads, ndim

cdef QConv _c
cdef QAdd _a
QCONV_FIELDS = fields_of(_c, sizeof(QConv))
QADD_FIELDS = fields_of(_a, sizeof(QAdd))

cdef enum:
    CODE_INT8 = 0
    CODE_UINT8 = 1
    CODE_INT32 = 2

ctypedef fused xint:
    int8_t
    uint8_t


cdef inline int32_t stored(const char* p, Py_ssize_t i, Py_ssize_t code) noexcept nogil:
    if code == CODE_INT8:
        return (<const int8_t*>p)[i]
    return (<const uint8_t*>p)[i]


cdef inline void store(char* out, Py_ssize_t i, int32_t acc, float m, const QConv* s) noexcept nogil:
    # the requantisation: clamp(rint(float32(acc) * m) + zy, low, high), or acc itself
    cdef double q
    if s.out_code == CODE_INT32:
        (<int32_t*>out)[i] = acc
        return
    q = <double>rintf(<float>acc * m) + s.out_zero
    q = s.low if q < s.low else (s.high if q > s.high else q)
    if s.out_code == CODE_INT8:
        (<int8_t*>out)[i] = <int8_t>q
    else:
        (<uint8_t*>out)[i] = <uint8_t>q


cdef inline Py_ssize_t first_inside(Py_ssize_t offset, Py_ssize_t stride,
                                    Py_ssize_t size) noexcept nogil:
    # the first output index o with 0 <= o * stride + offset (offset may be negative)
    if offset >= 0:
        return 0
    return (-offset + stride - 1) // stride


cdef inline Py_ssize_t end_inside(Py_ssize_t offset, Py_ssize_t stride, Py_ssize_t size,
                                  Py_ssize_t outputs) noexcept nogil:
    # one past the last output index o < outputs with o * stride + offset < size
    cdef Py_ssize_t last
    if offset >= size:
        return 0
    last = (size - 1 - offset) // stride + 1
    return last if last < outputs else outputs


cdef inline void accumulate_tap(int32_t* acc, const xint* xc, int32_t wv, const QConv* s,
                                Py_ssize_t i, Py_ssize_t j) noexcept nogil:
    # acc[oh, ow] += wv * (x[ih, iw] - zx) for the tap (i, j) where (ih, iw) is inside
    cdef Py_ssize_t oh, ow, ih, row, col_off = j * s.dilation_w - s.pad_w
    cdef Py_ssize_t row_off = i * s.dilation_h - s.pad_h
    cdef Py_ssize_t oh0 = first_inside(row_off, s.stride_h, s.height)
    cdef Py_ssize_t oh1 = end_inside(row_off, s.stride_h, s.height, s.out_h)
    cdef Py_ssize_t ow0 = first_inside(col_off, s.stride_w, s.width)
    cdef Py_ssize_t ow1 = end_inside(col_off, s.stride_w, s.width, s.out_w)
    cdef int32_t zx = <int32_t>s.x_zero
    cdef const xint* xrow
    cdef int32_t* arow
    for oh in range(oh0, oh1):
        ih = oh * s.stride_h + row_off
        xrow = xc + ih * s.width + col_off
        arow = acc + oh * s.out_w
        if s.stride_w == 1:
            for ow in range(ow0, ow1):
                arow[ow] += wv * (<int32_t>xrow[ow] - zx)
        else:
            for ow in range(ow0, ow1):
                arow[ow] += wv * (<int32_t>xrow[ow * s.stride_w] - zx)


cdef inline int conv_planes(const Call* c, int part, Py_ssize_t lo, Py_ssize_t hi,
                            const xint* x) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t plane = s.out_h * s.out_w, taps = s.kernel_h * s.kernel_w
    cdef Py_ssize_t cg = s.channels // s.groups, per_group = s.out_channels // s.groups
    cdef Py_ssize_t out_slot = 2 + s.has_bias
    cdef int32_t* acc = <int32_t*>c.bufs[out_slot + 1] + part * (plane + cg * taps)
    cdef int32_t* wz = acc + plane
    cdef Py_ssize_t u, n, o, g, ci, t, k
    cdef int32_t start
    cdef float m
    for u in range(lo, hi):
        n, o = u // s.out_channels, u % s.out_channels
        g = o // per_group
        for k in range(cg * taps):
            wz[k] = stored(c.bufs[1], o * cg * taps + k, s.w_code) - \
                <int32_t>c.floats[s.out_channels + o]
        start = (<const int32_t*>c.bufs[2])[o] if s.has_bias else 0
        for k in range(plane):
            acc[k] = start
        for ci in range(cg):
            for t in range(taps):
                if wz[ci * taps + t] != 0:
                    accumulate_tap(acc, x + (n * s.channels + g * cg + ci) * s.height * s.width,
                                   wz[ci * taps + t], s, t // s.kernel_w, t % s.kernel_w)
        m = <float>c.floats[o]
        for k in range(plane):
            store(c.bufs[out_slot], u * plane + k, acc[k], m, s)
    return KERNEL_OK


cdef int conv_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return conv_planes(<const Call*>c, part, lo, hi, <const int8_t*>(<const Call*>c).bufs[0])
cdef int conv_u8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return conv_planes(<const Call*>c, part, lo, hi, <const uint8_t*>(<const Call*>c).bufs[0])


# -- the fast way: the int8 GEMM of qgemm.pyx (VNNI, AVX2 or portable tiles, the epilogue fused
# at the tile's store) for a convolution or a linear layer (its 1x1 planes: one GEMM over the
# rows), the direct depthwise kernel for groups == channels == out channels. Both wrap their
# int32 sums as the loops above do, so they give the same integers even where an accumulator
# leaves int32 (outside the ops' contract); where their scratch cannot be had, the loops above
# run instead.
cdef int gemm_conv(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels, o
    cdef Py_ssize_t k = s.channels // s.groups * s.kernel_h * s.kernel_w
    cdef const int32_t* bias = <const int32_t*>c.bufs[2] if s.has_bias else NULL
    cdef int32_t* zw = <int32_t*>malloc(oc * sizeof(int32_t))
    cdef float* mult = <float*>malloc(oc * sizeof(float))
    cdef int status = QG_NOT_RUN
    cdef qg_conv g
    cdef QOutput out
    if zw != NULL and mult != NULL:
        for o in range(oc):
            mult[o] = <float>c.floats[o]  # the double holds the float32 exactly
            zw[o] = <int32_t>c.floats[oc + o]
        g = geometry(s)
        out = output_of(c)
        if s.groups == s.channels == oc:
            g.c = s.channels  # the depthwise kernel's channels: all of them
            status = depthwise_run(<const uint8_t*>c.bufs[0], x_signed, <int32_t>s.x_zero,
                                   <const uint8_t*>c.bufs[1], s.w_code == CODE_UINT8, zw, bias,
                                   mult, s.batch, &g, &out, s.threads)
        else:
            status = gemm_run(c, x_signed, k, zw, bias, mult, &g, &out)
    free(zw)
    free(mult)
    return status


cdef int gemm_run(const Call* c, int x_signed, Py_ssize_t k, const int32_t* zw,
                  const int32_t* bias, const float* mult, const qg_conv* g,
                  const QOutput* out) noexcept nogil:
    # the weights packed now, then the GEMMs
    cdef const QConv* s = <const QConv*>c.ints
    cdef char* packed = <char*>malloc(packed_size(s.out_channels, k, s.groups))
    cdef QWeights pw
    cdef int status
    cdef int32_t zx = <int32_t>s.x_zero
    if packed == NULL:
        return QG_NOT_RUN
    pack_weights(packed, <const uint8_t*>c.bufs[1], s.w_code == CODE_UINT8, s.out_channels, k,
                 s.groups, zw, zx + 128 if x_signed else zx, bias)
    weights_view(&pw, packed, s.out_channels, k, s.groups,
                 NULL if s.out_code == CODE_INT32 else mult)
    if g.h == g.w == g.kh == g.kw == 1 and s.groups == 1:
        status = linear_run(&pw, <const uint8_t*>c.bufs[0], x_signed, s.batch, out, s.threads)
    else:
        status = conv_run(&pw, <const uint8_t*>c.bufs[0], x_signed, zx, s.batch, g, out,
                          s.threads)
    free(packed)
    return status


# -- quantized_conv2d_packed and quantized_linear_packed (ops/quantized_pack.py): the weights
# packed once by quantized_pack_weight (bufs[1]); the floats are the multipliers alone.
cdef int conv_packed(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels, o
    cdef Py_ssize_t k = s.channels // s.groups * s.kernel_h * s.kernel_w
    cdef float* mult = <float*>malloc(oc * sizeof(float))
    cdef QWeights pw
    cdef qg_conv g = geometry(s)
    cdef QOutput out = output_of(c)
    cdef int status
    if mult == NULL:
        return KERNEL_BAD_VALUE
    for o in range(oc):
        mult[o] = <float>c.floats[o]  # the double holds the float32 exactly
    weights_view(&pw, c.bufs[1], oc, k, s.groups, NULL if s.out_code == CODE_INT32 else mult)
    if g.h == g.w == g.kh == g.kw == 1 and s.groups == 1:
        status = linear_run(&pw, <const uint8_t*>c.bufs[0], x_signed, s.batch, &out, s.threads)
    else:
        status = conv_run(&pw, <const uint8_t*>c.bufs[0], x_signed, <int32_t>s.x_zero, s.batch,
                          &g, &out, s.threads)
    free(mult)
    return KERNEL_BAD_VALUE if status == QG_NOT_RUN else status


cdef int quantized_conv2d_packed_i8(const Call* c) noexcept nogil:
    return conv_packed(c, 1)
cdef int quantized_conv2d_packed_u8(const Call* c) noexcept nogil:
    return conv_packed(c, 0)


cdef qg_conv geometry(const QConv* s) noexcept nogil:
    cdef qg_conv g
    g.c, g.h, g.w = s.channels // s.groups, s.height, s.width
    g.kh, g.kw, g.sh, g.sw = s.kernel_h, s.kernel_w, s.stride_h, s.stride_w
    g.ph, g.pw, g.dh, g.dw = s.pad_h, s.pad_w, s.dilation_h, s.dilation_w
    g.oh, g.ow = s.out_h, s.out_w
    return g


cdef QOutput output_of(const Call* c) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef QOutput out
    out.y = c.bufs[2 + s.has_bias]
    out.kind = (QG_OUT_INT32 if s.out_code == CODE_INT32 else
                QG_OUT_INT8 if s.out_code == CODE_INT8 else QG_OUT_UINT8)
    out.zy, out.lo, out.hi = <int32_t>s.out_zero, <int32_t>s.low, <int32_t>s.high
    return out


cdef int quantized_conv2d_i8(const Call* c) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef int status = gemm_conv(c, 1)
    if status != QG_NOT_RUN:
        return status
    return parallel_for(s.threads, s.batch * s.out_channels, conv_i8, <void*>c)
cdef int quantized_conv2d_u8(const Call* c) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef int status = gemm_conv(c, 0)
    if status != QG_NOT_RUN:
        return status
    return parallel_for(s.threads, s.batch * s.out_channels, conv_u8, <void*>c)


# -- quantized_add: the ints go on after QAdd with ndim sizes, then a's and b's element strides
# (0 where broadcast); the output is contiguous. The units are the rows of the innermost dim.
# Rows where a and b share a dtype and are both read contiguously take the vectorised loop of
# quantized_add_rows.pxi (the same integers).
include "quantized_add_rows.pxi"


cdef inline int add_rows(const Call* c, Py_ssize_t lo, Py_ssize_t hi, const xint* a,
                         Py_ssize_t b_code) noexcept nogil:
    cdef const QAdd* s = <const QAdd*>c.ints
    cdef const Py_ssize_t* shape = c.ints + sizeof(QAdd) // sizeof(Py_ssize_t)
    cdef Py_ssize_t ndim = s.ndim, inner = shape[ndim - 1], r, i
    cdef Py_ssize_t sa = shape[2 * ndim - 1], sb = shape[3 * ndim - 1]
    cdef float ma = <float>c.floats[0], mb = <float>c.floats[1], fa, fb
    cdef int32_t za = <int32_t>s.a_zero, zb = <int32_t>s.b_zero
    cdef double q
    cdef Odometer it
    cdef bint a_int8 = xint is int8_t
    cdef bint vector = sa == 1 and sb == 1 and b_code == (CODE_INT8 if a_int8 else CODE_UINT8)
    odometer_init(&it, <int>ndim, shape, shape + ndim, 2)
    odometer_seek(&it, lo)
    for r in range(lo, hi):
        if vector:
            mg_qadd_row(a + it.offset[0], c.bufs[1] + it.offset[1], c.bufs[2] + r * inner,
                        a_int8, s.out_code == CODE_INT8, inner, za, zb, ma, mb,
                        <float>(s.low - s.out_zero), <float>(s.high - s.out_zero),
                        <int>s.out_zero)
            odometer_next(&it)
            continue
        for i in range(inner):
            fa = <float>(<int32_t>a[it.offset[0] + i * sa] - za) * ma
            fb = <float>(stored(c.bufs[1], it.offset[1] + i * sb, b_code) - zb) * mb
            q = <double>rintf(fa + fb) + s.out_zero
            q = s.low if q < s.low else (s.high if q > s.high else q)
            if s.out_code == CODE_INT8:
                (<int8_t*>c.bufs[2])[r * inner + i] = <int8_t>q
            else:
                (<uint8_t*>c.bufs[2])[r * inner + i] = <uint8_t>q
        odometer_next(&it)
    return KERNEL_OK


cdef inline Py_ssize_t b_code_of(const Call* c) noexcept nogil:
    # b's dtype: the last int of the block, after the strides
    cdef const QAdd* s = <const QAdd*>c.ints
    return (c.ints + sizeof(QAdd) // sizeof(Py_ssize_t))[3 * s.ndim]


cdef int add_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const Call* call = <const Call*>c
    return add_rows(call, lo, hi, <const int8_t*>call.bufs[0], b_code_of(call))
cdef int add_u8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    cdef const Call* call = <const Call*>c
    return add_rows(call, lo, hi, <const uint8_t*>call.bufs[0], b_code_of(call))


cdef inline Py_ssize_t add_rows_total(const Call* c) noexcept nogil:
    cdef const QAdd* s = <const QAdd*>c.ints
    cdef const Py_ssize_t* shape = c.ints + sizeof(QAdd) // sizeof(Py_ssize_t)
    cdef Py_ssize_t rows = 1, d
    for d in range(s.ndim - 1):
        rows *= shape[d]
    return rows


cdef int quantized_add_i8(const Call* c) noexcept nogil:
    if not dims_ok((<const QAdd*>c.ints).ndim, 1):
        return KERNEL_BAD_VALUE
    return parallel_for((<const QAdd*>c.ints).threads, add_rows_total(c), add_i8, <void*>c)
cdef int quantized_add_u8(const Call* c) noexcept nogil:
    if not dims_ok((<const QAdd*>c.ints).ndim, 1):
        return KERNEL_BAD_VALUE
    return parallel_for((<const QAdd*>c.ints).threads, add_rows_total(c), add_u8, <void*>c)


KERNELS = {
    "quantized_conv2d_i8": kernel_address(quantized_conv2d_i8),
    "quantized_conv2d_u8": kernel_address(quantized_conv2d_u8),
    "quantized_add_i8": kernel_address(quantized_add_i8),
    "quantized_add_u8": kernel_address(quantized_add_u8),
    "quantized_conv2d_packed_i8": kernel_address(quantized_conv2d_packed_i8),
    "quantized_conv2d_packed_u8": kernel_address(quantized_conv2d_packed_u8),
}
