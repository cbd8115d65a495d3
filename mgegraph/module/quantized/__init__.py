"""The int8 layers (MegEngine's ``megengine.module.quantized``), made from trained QAT modules by
``quantization.quantize``: int8 weights and activations, int32 accumulation, each output
requantised with the scale its QAT module's activation observer found."""
from .conv import Conv2d, ConvBn2d, ConvBnRelu2d, ConvRelu2d
from .elemwise import Concat, DequantStub, Elemwise, QuantStub
from .linear import Linear
from .module import QuantizedModule

__all__ = ["Concat", "Conv2d", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d", "DequantStub",
           "Elemwise", "Linear", "QuantStub", "QuantizedModule"]
