"""The int8 layers (MegEngine's ``megengine.module.quantized``), made from trained QAT modules by
``quantization.quantize``: int8 weights and activations, int32 accumulation, each output
requantised with the scale its QAT module's activation observer found. The transposed
convolutions and ``BatchMatMulActivation`` have no int8 kernel: they compute in float32 between
a dequantize and a quantize (``conv_transpose.py``, ``batch_matmul_activation.py``)."""
from .batch_matmul_activation import BatchMatMulActivation
from .conv import Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d
from .conv_transpose import (
                             ConvTranspose2d,
                             ConvTransposeBn2d,
                             ConvTransposeBnRelu2d,
                             ConvTransposeRelu2d,
)
from .elemwise import Concat, DequantStub, Elemwise, QuantStub
from .linear import Linear, LinearBn1d, LinearBnRelu1d, LinearRelu
from .module import QuantizedModule

__all__ = ["BatchMatMulActivation", "Concat", "Conv2d", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d",
           "ConvTranspose2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
           "ConvTransposeRelu2d", "DequantStub", "Elemwise", "Linear", "LinearBn1d",
           "LinearBnRelu1d", "LinearRelu", "QuantStub", "QuantizedModule"]
