"""Quantization-aware training's modules (MegEngine's ``megengine.module.qat``): each computes as
its float module of ``mgegraph.module`` with its weight and output observed and fake-quantized;
``quantization.quantize_qat`` makes them from a float model and ``quantization.quantize`` turns
them into ``module.quantized``'s int8 layers."""
from .conv import Conv2d, ConvRelu2d
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .elemwise import Concat, Elemwise
from .linear import Linear
from .module import QATModule
from .quant_dequant import DequantStub, QuantStub

__all__ = ["Concat", "Conv2d", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d", "DequantStub",
           "Elemwise", "Linear", "QATModule", "QuantStub"]
