# fake_quant (mgegraph/ops/fake_quant.py): quantize and dequantize at once, in floats, for
# quantization-aware training: (clip(rint(x / s) + z, qmin, qmax) - z) * s.
#
# Parameter layout: the ints are the FakeQuant struct below, whose field names this module
# exports (FAKE_QUANT_FIELDS) for the lowering, mgegraph/_kernels/lowering/fake_quant.py, to pack
# by name. Buffers: x, the scales, the zero points (one of each per channel), the output. The
# value is (outer, channels, inner) with the per-channel axis in the middle (channels 1 per
# tensor).
#
# Design: every step is the quantize and dequantize kernels' (_kernels/quantize.pyx), so the
# results equal dequantize(quantize(x)) bit for bit: x divided by the scale in x's dtype, rint
# (halves to even), the zero point added and the result clamped in double (exact: integers), then
# one multiplication in x's dtype of (q - z) by the scale. A NaN stays NaN (the comparisons of the
# clamp are false for it); a scale that is not positive and finite stops the kernel with
# KERNEL_BAD_VALUE. Units of work are the elements; threads (parallel.pyx) take contiguous
# ranges of them, each element computed as on one thread. The CUDA twin is
# csrc_cuda/fake_quant.cu; the gradient is made of elementwise ops (ops/fake_quant.py).

from libc.math cimport isfinite, rint
from cython cimport floating

from .abi cimport Call, KERNEL_BAD_VALUE, KERNEL_OK, kernel_address
from .params cimport fields_of
from .parallel cimport parallel_for

ctypedef struct FakeQuant:
    Py_ssize_t outer, channels, inner, qmin, qmax, threads

cdef FakeQuant _f
FAKE_QUANT_FIELDS = fields_of(_f, sizeof(FakeQuant))


cdef inline int fake_quant_part(const Call* c, Py_ssize_t lo, Py_ssize_t hi,
                                floating* tag) noexcept nogil:
    cdef const FakeQuant* s = <const FakeQuant*>c.ints
    cdef const floating* x = <const floating*>c.bufs[0]
    cdef const floating* scales = <const floating*>c.bufs[1]
    cdef const floating* zps = <const floating*>c.bufs[2]
    cdef floating* y = <floating*>c.bufs[3]
    cdef Py_ssize_t i = lo, j, end, ch
    cdef floating scale
    cdef double zp, v, low = <double>s.qmin, high = <double>s.qmax
    while i < hi:
        ch = (i // s.inner) % s.channels
        end = min(hi, (i // s.inner + 1) * s.inner)
        scale, zp = scales[ch], <double>zps[ch]
        if not (isfinite(scale) and scale > 0):
            return KERNEL_BAD_VALUE
        for j in range(i, end):
            v = rint(<double>(x[j] / scale)) + zp
            v = low if v < low else (high if v > high else v)
            y[j] = <floating>(v - zp) * scale
        i = end
    return KERNEL_OK


cdef int fq_f32(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return fake_quant_part(<const Call*>c, lo, hi, <float*>NULL)
cdef int fq_f64(void* c, int part, Py_ssize_t lo, Py_ssize_t hi) noexcept nogil:
    return fake_quant_part(<const Call*>c, lo, hi, <double*>NULL)


cdef inline Py_ssize_t elements(const Call* c) noexcept nogil:
    cdef const FakeQuant* s = <const FakeQuant*>c.ints
    return s.outer * s.channels * s.inner


cdef int fake_quant_f32(const Call* c) noexcept nogil:
    return parallel_for((<const FakeQuant*>c.ints).threads, elements(c), fq_f32, <void*>c)
cdef int fake_quant_f64(const Call* c) noexcept nogil:
    return parallel_for((<const FakeQuant*>c.ints).threads, elements(c), fq_f64, <void*>c)

KERNELS = {
    "fake_quant_f32": kernel_address(fake_quant_f32),
    "fake_quant_f64": kernel_address(fake_quant_f64),
}
