# The fast int8 convolution and linear layer (qgemm.pyx): weights packed once into QWeights,
# then run on any number of inputs. quantized.pyx's fast paths cimport these.
#
#     cdef QWeights pw
#     if pack_weights(&pw, w, w_unsigned, oc, k, groups, zw, zx, bias, mult) == KERNEL_OK:
#         status = conv_run(&pw, x, x_signed, zx, images, &geometry, &out, threads)
#     free_weights(&pw)

from libc.stdint cimport int8_t, int32_t, uint8_t


cdef extern from "qconv.h":
    ctypedef struct qg_conv:
        Py_ssize_t c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow
    int QG_OUT_INT32, QG_OUT_INT8, QG_OUT_UINT8


# the packed weights of a convolution (groups of m output channels) or a linear layer (1 group)
ctypedef struct QWeights:
    int8_t* a             # each group's packed A, one after the other
    int32_t* row_const    # per output channel: bias - zx' rowsum + K zx' zw'
    int32_t* zw           # per output channel, shifted to int8; NULL when all are 0
    const float* mult     # per output channel (not owned); NULL for an int32 result
    Py_ssize_t groups, m, k, kg, group_bytes
    int exact             # every accumulator provably inside int32 (else: use another path)
    int w_unsigned

# where and how the result goes: storage kind (QG_OUT_*), zero point, range narrowed by relu
ctypedef struct QOutput:
    void* y
    int kind
    int32_t zy, lo, hi

cdef int pack_weights(QWeights* pw, const uint8_t* w, int w_unsigned, Py_ssize_t oc,
                      Py_ssize_t k, Py_ssize_t groups, const int32_t* zw, int32_t zx_shifted,
                      const int32_t* bias, const float* mult) noexcept nogil
cdef void free_weights(QWeights* pw) noexcept nogil
cdef int conv_run(const QWeights* pw, const uint8_t* x, int x_signed, int32_t zx,
                  Py_ssize_t images, const qg_conv* g, const QOutput* out,
                  Py_ssize_t threads) noexcept nogil
cdef int depthwise_run(const uint8_t* x, int x_signed, int32_t zx, const uint8_t* w,
                       int w_unsigned, const int32_t* zw, const int32_t* bias,
                       const float* mult, Py_ssize_t images, const qg_conv* g,
                       const QOutput* out, Py_ssize_t threads) noexcept nogil
cdef int linear_run(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                    const QOutput* out, Py_ssize_t threads) noexcept nogil
