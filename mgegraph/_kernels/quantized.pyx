# The int8 compute ops (mgegraph/ops/quantized.py): quantized_conv2d and quantized_linear (one
# kernel: a linear layer is a 1x1 convolution of (rows, in, 1, 1)), quantized_conv_transpose2d
# (the convolution's block), quantized_batch_matmul and quantized_add.
#
# Parameter layout: the ints are the structs below, whose field names this module exports
# (QCONV_FIELDS, QBMM_FIELDS, QADD_FIELDS) for the lowering, mgegraph/_kernels/lowering/
# quantized.py, to pack by name. The convolution's floats are each output channel's
# requantisation multiplier, then each one's weight zero point (the batched matmul's: each
# row's); quantized_add's are its two multipliers. Buffers: x, w, the
# bias when there is one, then the output.
#
# Design: the convolution and the linear layer run on the int8 GEMM of qgemm.pyx (AMX, VNNI,
# AVX2 or portable tiles, the requantisation fused at the tile's store; the direct depthwise
# kernel for groups == channels == out channels), whose integers are exactly ops/quantized.py's:
# the accumulator is the bias plus (w - zw) * (x - zx) over the window (a padded position holds
# the zero point, so adds nothing), wrapping in int32 as every int32 accumulation does (outside
# the ops' contract, which refuses windows whose sums could leave it), then the float32
# accumulator times the float32 multiplier (a float product: no double rounding), rounded half to
# even, plus the output zero point, saturated to [low, high], relu having raised low to the zero
# point. Where its scratch memory cannot be had the kernel stops with KERNEL_OUT_OF_MEMORY (a
# KernelMemoryError, also a MemoryError): a second, portable set of loops for that case alone
# would be code no run reaches. The transposed convolution is the GEMM of the transposed weight
# by x's channel rows, then col2im (qgemm.pyx's conv_transpose_run, qconv.h); the batched matmul
# is one GEMM per batch (b's (depth, cols) matrix is the B of a 1x1 convolution read in place),
# its weights packed once when a has no batch. quantized_add is a loop here, vectorised where
# its operands allow.

from libc.math cimport rintf
from libc.stdint cimport int8_t, int32_t, uint8_t
from libc.stdlib cimport free, malloc

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_OK, KERNEL_OUT_OF_MEMORY, kernel_address
from .nditer cimport MAX_DIMS, Odometer, dims_ok, odometer_init, odometer_next, odometer_seek
from .params cimport fields_of
from .parallel cimport parallel_for
from .qgemm cimport (QG_OUT_INT8, QG_OUT_INT32, QG_OUT_UINT8, QOutput, QWeights,
                     conv_run, conv_transpose_packed_run, conv_transpose_run, depthwise_run,
                     linear_run, pack_weights, packed_size, qg_conv, weights_view)

ctypedef struct QConv:
    Py_ssize_t batch, channels, height, width, out_channels, kernel_h, kernel_w, out_h, out_w
    Py_ssize_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups
    Py_ssize_t w_code, out_code, x_zero, out_zero, low, high, has_bias, threads

ctypedef struct QBmm:
    Py_ssize_t batch, rows, depth, cols, a_batched, b_batched, a_code, out_code, b_zero
    Py_ssize_t out_zero, low, high, has_bias, threads

ctypedef struct QAdd:
    Py_ssize_t a_zero, b_zero, out_zero, low, high, out_code, threads, ndim

cdef QConv _c
cdef QAdd _a
cdef QBmm _b
QCONV_FIELDS = fields_of(_c, sizeof(QConv))
QBMM_FIELDS = fields_of(_b, sizeof(QBmm))
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


cdef bint channel_tables(const Call* c, Py_ssize_t oc, int32_t** zw,
                         float** mult) noexcept nogil:
    # each output channel's multiplier and weight zero point, as the floats hold them (the
    # double holds the float32 exactly); False where the memory cannot be had (the caller frees)
    cdef Py_ssize_t o
    zw[0] = <int32_t*>malloc(max(oc, 1) * sizeof(int32_t))
    mult[0] = <float*>malloc(max(oc, 1) * sizeof(float))
    if zw[0] == NULL or mult[0] == NULL:
        return False
    for o in range(oc):
        mult[0][o] = <float>c.floats[o]
        zw[0][o] = <int32_t>c.floats[oc + o]
    return True


cdef inline int output_kind(Py_ssize_t code) noexcept nogil:
    return (QG_OUT_INT32 if code == CODE_INT32 else
            QG_OUT_INT8 if code == CODE_INT8 else QG_OUT_UINT8)


# -- the int8 GEMM of qgemm.pyx for a convolution or a linear layer (its 1x1 planes: one GEMM
# over the rows), the direct depthwise kernel for groups == channels == out channels
cdef int gemm_conv(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels
    cdef Py_ssize_t k = s.channels // s.groups * s.kernel_h * s.kernel_w
    cdef const int32_t* bias = <const int32_t*>c.bufs[2] if s.has_bias else NULL
    cdef int32_t* zw = NULL
    cdef float* mult = NULL
    cdef int status = KERNEL_OUT_OF_MEMORY
    cdef qg_conv g
    cdef QOutput out
    if channel_tables(c, oc, &zw, &mult):
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
        return KERNEL_OUT_OF_MEMORY
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
cdef float* multipliers(const Call* c, Py_ssize_t oc) noexcept nogil:
    # the packed kernels' floats: each output channel's multiplier, as float32 (the doubles hold
    # them exactly); NULL where the memory cannot be had
    cdef float* mult = <float*>malloc(max(oc, 1) * sizeof(float))
    cdef Py_ssize_t o
    if mult != NULL:
        for o in range(oc):
            mult[o] = <float>c.floats[o]
    return mult


cdef int conv_packed(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels
    cdef Py_ssize_t k = s.channels // s.groups * s.kernel_h * s.kernel_w
    cdef float* mult = multipliers(c, oc)
    cdef QWeights pw
    cdef qg_conv g = geometry(s)
    cdef QOutput out = output_of(c)
    cdef int status
    if mult == NULL:
        return KERNEL_OUT_OF_MEMORY
    weights_view(&pw, c.bufs[1], oc, k, s.groups, NULL if s.out_code == CODE_INT32 else mult)
    if g.h == g.w == g.kh == g.kw == 1 and s.groups == 1:
        status = linear_run(&pw, <const uint8_t*>c.bufs[0], x_signed, s.batch, &out, s.threads)
    else:
        status = conv_run(&pw, <const uint8_t*>c.bufs[0], x_signed, <int32_t>s.x_zero, s.batch,
                          &g, &out, s.threads)
    free(mult)
    return status


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
    out.kind = output_kind(s.out_code)
    out.zy, out.lo, out.hi = <int32_t>s.out_zero, <int32_t>s.low, <int32_t>s.high
    return out


cdef int quantized_conv2d_i8(const Call* c) noexcept nogil:
    return gemm_conv(c, 1)
cdef int quantized_conv2d_u8(const Call* c) noexcept nogil:
    return gemm_conv(c, 0)


# -- quantized_conv_transpose2d: the convolution's block (height, width the input's; out_h,
# out_w the output's), its floats and buffers
cdef int conv_transpose(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels
    cdef int32_t* zw = NULL
    cdef float* mult = NULL
    cdef int status = KERNEL_OUT_OF_MEMORY
    cdef qg_conv g = geometry(s)
    cdef QOutput out = output_of(c)
    if channel_tables(c, oc, &zw, &mult):
        status = conv_transpose_run(<const uint8_t*>c.bufs[0], x_signed, <int32_t>s.x_zero,
                                    <const uint8_t*>c.bufs[1], s.w_code == CODE_UINT8, zw,
                                    <const int32_t*>c.bufs[2] if s.has_bias else NULL,
                                    NULL if s.out_code == CODE_INT32 else mult, s.batch,
                                    s.groups, oc // s.groups, &g, &out, s.threads)
    free(zw)
    free(mult)
    return status


cdef int quantized_conv_transpose2d_i8(const Call* c) noexcept nogil:
    return conv_transpose(c, 1)
cdef int quantized_conv_transpose2d_u8(const Call* c) noexcept nogil:
    return conv_transpose(c, 0)


# -- quantized_conv_transpose2d_packed (ops/quantized_pack.py), kernel quantized_deconv2d_packed
# (MegEngine's "deconv": a name that fits the C runtime's 31 bytes): the transposed weight's GEMM
# rows packed once by quantized_pack_transposed_weight (bufs[1]); bufs x, packed, [bias,] y; the
# floats are the multipliers alone
cdef int conv_transpose_packed(const Call* c, int x_signed) noexcept nogil:
    cdef const QConv* s = <const QConv*>c.ints
    cdef Py_ssize_t oc = s.out_channels
    cdef float* mult = multipliers(c, oc)
    cdef QWeights pw
    cdef qg_conv g = geometry(s)
    cdef QOutput out = output_of(c)
    cdef int status
    if mult == NULL:
        return KERNEL_OUT_OF_MEMORY
    weights_view(&pw, c.bufs[1], oc * s.kernel_h * s.kernel_w, g.c, s.groups, NULL)
    status = conv_transpose_packed_run(&pw, <const uint8_t*>c.bufs[0], x_signed,
                                       <int32_t>s.x_zero,
                                       <const int32_t*>c.bufs[2] if s.has_bias else NULL,
                                       NULL if s.out_code == CODE_INT32 else mult, s.batch, oc,
                                       &g, &out, s.threads)
    free(mult)
    return status


cdef int quantized_deconv2d_packed_i8(const Call* c) noexcept nogil:
    return conv_transpose_packed(c, 1)
cdef int quantized_deconv2d_packed_u8(const Call* c) noexcept nogil:
    return conv_transpose_packed(c, 0)


# -- quantized_batch_matmul: a (batch or 1, rows, depth) @ b (batch or 1, depth, cols), bufs a,
# b, [bias,] y; floats each row's multiplier, then each row's zero point of a
cdef int batch_matmul(const Call* c, int b_signed) noexcept nogil:
    cdef const QBmm* s = <const QBmm*>c.ints
    cdef Py_ssize_t n = s.rows, k = s.depth, cols = s.cols, bi
    cdef int32_t* zw = NULL
    cdef float* mult = NULL
    cdef char* packed = <char*>malloc(packed_size(n, k, 1))
    cdef const int32_t* bias = <const int32_t*>c.bufs[2] if s.has_bias else NULL
    cdef int32_t zb = <int32_t>s.b_zero
    cdef int status = KERNEL_OUT_OF_MEMORY
    cdef QWeights pw
    cdef qg_conv g  # b's (depth, cols) matrix: the channel rows of a 1x1 convolution
    cdef QOutput out
    if channel_tables(c, n, &zw, &mult) and packed != NULL:
        g.c, g.h, g.w, g.oh, g.ow = k, 1, cols, 1, cols
        g.kh = g.kw = g.sh = g.sw = g.dh = g.dw = 1
        g.ph = g.pw = 0
        out.kind = output_kind(s.out_code)
        out.zy, out.lo, out.hi = <int32_t>s.out_zero, <int32_t>s.low, <int32_t>s.high
        status = KERNEL_OK
        for bi in range(s.batch):
            if bi == 0 or s.a_batched:
                pack_weights(packed, <const uint8_t*>c.bufs[0] + bi * s.a_batched * n * k,
                             s.a_code == CODE_UINT8, n, k, 1, zw, zb + 128 if b_signed else zb,
                             bias)
                weights_view(&pw, packed, n, k, 1, NULL if s.out_code == CODE_INT32 else mult)
            out.y = c.bufs[2 + s.has_bias] + bi * n * cols * (4 if s.out_code == CODE_INT32
                                                               else 1)
            status = conv_run(&pw, <const uint8_t*>c.bufs[1] + bi * s.b_batched * k * cols,
                              b_signed, zb, 1, &g, &out, s.threads)
            if status != KERNEL_OK:
                break
    free(zw)
    free(mult)
    free(packed)
    return status


cdef int quantized_batch_matmul_i8(const Call* c) noexcept nogil:
    return batch_matmul(c, 1)
cdef int quantized_batch_matmul_u8(const Call* c) noexcept nogil:
    return batch_matmul(c, 0)


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
    "quantized_conv_transpose2d_i8": kernel_address(quantized_conv_transpose2d_i8),
    "quantized_conv_transpose2d_u8": kernel_address(quantized_conv_transpose2d_u8),
    "quantized_batch_matmul_i8": kernel_address(quantized_batch_matmul_i8),
    "quantized_batch_matmul_u8": kernel_address(quantized_batch_matmul_u8),
    "quantized_add_i8": kernel_address(quantized_add_i8),
    "quantized_add_u8": kernel_address(quantized_add_u8),
    "quantized_conv2d_packed_i8": kernel_address(quantized_conv2d_packed_i8),
    "quantized_conv2d_packed_u8": kernel_address(quantized_conv2d_packed_u8),
    "quantized_deconv2d_packed_i8": kernel_address(quantized_deconv2d_packed_i8),
    "quantized_deconv2d_packed_u8": kernel_address(quantized_deconv2d_packed_u8),
}
