"""Quantization-aware training's modules (MegEngine's ``megengine.module.qat``): each computes as
its float module of ``mgegraph.module`` with its weight and output observed and fake-quantized;
``quantization.quantize_qat`` makes them from a float model and ``quantization.quantize`` turns
them into ``module.quantized``'s int8 layers."""
from .batch_matmul_activation import BatchMatMulActivation
from .conv import Conv2d, ConvRelu2d, ConvTranspose2d, ConvTransposeRelu2d
from .conv_bn import ConvBn2d, ConvBnRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d
from .elemwise import Concat, Elemwise
from .linear import Linear, LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .module import QATModule
from .quant_dequant import DequantStub, QuantStub

__all__ = ["BatchMatMulActivation", "Concat", "Conv2d", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d",
           "ConvTranspose2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
           "ConvTransposeRelu2d", "DequantStub", "Elemwise", "Linear", "LinearBn1d",
           "LinearBnRelu1d", "LinearRelu", "QATModule", "QuantStub"]
