# quantize and dequantize (mgegraph/ops/quantize.py): between real numbers and the integers of a
# quantized type, q standing for scale * (q - zero_point).
#
# Parameter layout: the ints are the Quant struct below, whose field names this module exports
# (QUANT_FIELDS) for the lowering, mgegraph/_kernels/lowering/quantize.py, to pack by name; the
# floats are the scales, then the zero points, one of each per channel. Buffers: the input, then
# the output. The value is (outer, channels, inner) with the per-channel axis in the middle
# (channels 1 per tensor); `code` names the integer dtype (0 int8, 1 uint8, 2 int32) and, for
# dequantize, the float one (0 float32, 1 float64).
#
# Design: quantize divides x by the scale in x's own dtype (the division ONNX's QuantizeLinear
# specifies, as ONNX's reference and ONNX Runtime compute it: a float32 x by the scale rounded to
# float32), rounds to nearest with ties to even (rint in the default rounding mode), adds the
# zero point and saturates, so its integers are NumPy's
# np.clip(np.rint(x / x.dtype.type(scale)) + zp, lo, hi). dequantize likewise multiplies in its
# result's dtype: float32(q - zp) * float32(scale), one rounding, as ONNX Runtime. A NaN has no
# integer: the kernel stops with KERNEL_NOT_A_NUMBER. The units of work are the elements; threads
# (parallel.pyx) take contiguous ranges of them, each element computed as on one thread.

from libc.math cimport rint
from libc.stdint cimport int8_t, int32_t, uint8_t
from cython cimport floating

from .abi cimport Call, KERNEL_NOT_A_NUMBER, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct Quant:
    Py_ssize_t outer, channels, inner, code, threads

cdef Quant _q
QUANT_FIELDS = fields_of(_q, sizeof(Quant))

cdef enum:
    CODE_INT8 = 0
    CODE_UINT8 = 1
    CODE_INT32 = 2


cdef inline double saturated(double r, double lo, double hi) noexcept nogil:
    return lo if r < lo else (hi if r > hi else r)


cdef inline int quantize_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                              floating* tag) noexcept nogil:
    cdef const Quant* s = <const Quant*>c.ints
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef Py_ssize_t i = lo, j, end, ch
    cdef double scale, zp, v, low, high
    if s.code == CODE_INT8:
        low, high = -128.0, 127.0
    elif s.code == CODE_UINT8:
        low, high = 0.0, 255.0
    else:
        low, high = -2147483648.0, 2147483647.0
    while i < hi:
        ch = (i // s.inner) % s.channels
        end = min(hi, (i // s.inner + 1) * s.inner)
        scale, zp = c.floats[ch], c.floats[s.channels + ch]
        for j in range(i, end):
            v = <double>(x[j] / <floating>scale)
            if v != v:
                return KERNEL_NOT_A_NUMBER
            v = saturated(rint(v) + zp, low, high)
            if s.code == CODE_INT8:
                (<int8_t*>c.bufs[1])[j] = <int8_t>v
            elif s.code == CODE_UINT8:
                (<uint8_t*>c.bufs[1])[j] = <uint8_t>v
            else:
                (<int32_t*>c.bufs[1])[j] = <int32_t>v
        i = end
    return KERNEL_OK


cdef inline double stored(int code, const char* q, Py_ssize_t j) noexcept nogil:
    if code == CODE_INT8:
        return (<const int8_t*>q)[j]
    if code == CODE_UINT8:
        return (<const uint8_t*>q)[j]
    return (<const int32_t*>q)[j]


cdef inline int dequantize_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                                int code) noexcept nogil:
    # code: the integer dtype; s.code: the float one
    cdef const Quant* s = <const Quant*>c.ints
    cdef Py_ssize_t i = lo, j, end, ch
    cdef double scale, zp
    while i < hi:
        ch = (i // s.inner) % s.channels
        end = min(hi, (i // s.inner + 1) * s.inner)
        scale, zp = c.floats[ch], c.floats[s.channels + ch]
        for j in range(i, end):
            if s.code == 0:
                (<float*>c.bufs[1])[j] = (<float>(stored(code, c.bufs[0], j) - zp)
                                          * <float>scale)
            else:
                (<double*>c.bufs[1])[j] = (stored(code, c.bufs[0], j) - zp) * scale
        i = end
    return KERNEL_OK


cdef int q_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return quantize_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int q_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return quantize_part(<const Call*>c, lo, hi, <double*>NULL)
cdef int dq_i8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return dequantize_part(<const Call*>c, lo, hi, CODE_INT8)
cdef int dq_u8(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return dequantize_part(<const Call*>c, lo, hi, CODE_UINT8)
cdef int dq_i32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return dequantize_part(<const Call*>c, lo, hi, CODE_INT32)


cdef inline Py_ssize_t elements(const Call* c) noexcept nogil:
    cdef const Quant* s = <const Quant*>c.ints
    return s.outer * s.channels * s.inner


cdef int quantize_f32(const Call* c) noexcept nogil:
    return parallel_for((<const Quant*>c.ints).threads, elements(c), q_f32, <void*>c)
cdef int quantize_f64(const Call* c) noexcept nogil:
    return parallel_for((<const Quant*>c.ints).threads, elements(c), q_f64, <void*>c)
cdef int dequantize_i8(const Call* c) noexcept nogil:
    return parallel_for((<const Quant*>c.ints).threads, elements(c), dq_i8, <void*>c)
cdef int dequantize_u8(const Call* c) noexcept nogil:
    return parallel_for((<const Quant*>c.ints).threads, elements(c), dq_u8, <void*>c)
cdef int dequantize_i32(const Call* c) noexcept nogil:
    return parallel_for((<const Quant*>c.ints).threads, elements(c), dq_i32, <void*>c)

KERNELS = {
    "quantize_f32": kernel_address(quantize_f32),
    "quantize_f64": kernel_address(quantize_f64),
    "dequantize_i8": kernel_address(dequantize_i8),
    "dequantize_u8": kernel_address(dequantize_u8),
    "dequantize_i32": kernel_address(dequantize_i32),
}
