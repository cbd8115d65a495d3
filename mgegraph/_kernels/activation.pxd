# The activations of a GEMM's or convolution's epilogue (activation.h's codes, as
# kernel_abi.matmul.ACTIVATION_CODES): each the elementwise op's own scalar function (ew_ops.pxd),
# so a fused plan gives bitwise what the op after the GEMM would.
from cython cimport floating

from .ew_ops cimport ew_clip, ew_relu


cdef extern from "activation.h":
    enum:
        ACT_NONE, ACT_RELU, ACT_RELU6


cdef inline floating activate(floating v, Py_ssize_t act) noexcept nogil:
    if act == ACT_RELU:
        return ew_relu(v)
    if act == ACT_RELU6:
        return ew_clip(v, <floating>0, <floating>6)
    return v
