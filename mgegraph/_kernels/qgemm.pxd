# The fast int8 convolution and linear layer (qgemm.pyx): weights packed once into a byte
# buffer (a constant of the plan, or scratch), then run on any number of inputs. quantized.pyx's
# fast paths cimport these.
#
#     pack_weights(packed, w, w_unsigned, oc, k, groups, zw, zx_shifted, bias)  # packed_size
#     weights_view(&pw, packed, oc, k, groups, mult)
#     status = conv_run(&pw, x, x_signed, zx, images, &geometry, &out, threads)
#     status = conv_transpose_run(x, ..., w, ..., images, groups, opg, &geometry, &out, threads)
#     status = conv_transpose_packed_run(&pw, x, ..., images, oc, &geometry, &out, threads)
#
# A run whose scratch memory cannot be allocated returns KERNEL_OUT_OF_MEMORY (abi.pxd).

from libc.stdint cimport int8_t, int32_t, uint8_t


cdef extern from "qconv.h":
    ctypedef struct qg_conv:
        Py_ssize_t c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow
    int QG_OUT_INT32, QG_OUT_INT8, QG_OUT_UINT8


# a view of packed weights (pack_weights) of a convolution (groups of m output channels) or a
# linear layer (1 group)
ctypedef struct QWeights:
    int8_t* a             # each group's packed A, one after the other
    int32_t* row_const    # per output channel: bias - zx' rowsum + K zx' zw'
    int32_t* zw           # per output channel, shifted to int8; NULL when all are 0
    const float* mult     # per output channel; NULL for an int32 result
    Py_ssize_t groups, m, k, kg, group_bytes
    int pairs_fit         # the packed A carries QG_PAIRS_FIT (qgemm.h's qg_pairs_fit)

# where and how the result goes: storage kind (QG_OUT_*), zero point, range narrowed by relu
ctypedef struct QOutput:
    void* y
    int kind
    int32_t zy, lo, hi

cdef Py_ssize_t packed_size(Py_ssize_t oc, Py_ssize_t k, Py_ssize_t groups) noexcept nogil
cdef void pack_weights(char* packed, const uint8_t* w, int w_unsigned, Py_ssize_t oc,
                       Py_ssize_t k, Py_ssize_t groups, const int32_t* zw, int32_t zx_shifted,
                       const int32_t* bias) noexcept nogil
cdef void weights_view(QWeights* pw, const char* packed, Py_ssize_t oc, Py_ssize_t k,
                       Py_ssize_t groups, const float* mult) noexcept nogil
cdef int conv_run(const QWeights* pw, const uint8_t* x, int x_signed, int32_t zx,
                  Py_ssize_t images, const qg_conv* g, const QOutput* out,
                  Py_ssize_t threads) noexcept nogil
cdef int depthwise_run(const uint8_t* x, int x_signed, int32_t zx, const uint8_t* w,
                       int w_unsigned, const int32_t* zw, const int32_t* bias,
                       const float* mult, Py_ssize_t images, const qg_conv* g,
                       const QOutput* out, Py_ssize_t threads) noexcept nogil
cdef int linear_run(const QWeights* pw, const uint8_t* x, int x_signed, Py_ssize_t rows,
                    const QOutput* out, Py_ssize_t threads) noexcept nogil
cdef int conv_transpose_run(const uint8_t* x, int x_signed, int32_t zx, const uint8_t* w,
                            int w_unsigned, const int32_t* zw, const int32_t* bias,
                            const float* mult, Py_ssize_t images, Py_ssize_t groups,
                            Py_ssize_t opg, const qg_conv* g, const QOutput* out,
                            Py_ssize_t threads) noexcept nogil
cdef int conv_transpose_packed_run(const QWeights* pw, const uint8_t* x, int x_signed,
                                   int32_t zx, const int32_t* bias, const float* mult,
                                   Py_ssize_t images, Py_ssize_t oc, const qg_conv* g,
                                   const QOutput* out, Py_ssize_t threads) noexcept nogil
