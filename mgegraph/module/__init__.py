"""``mgegraph.module``: MegEngine's name for ``mgegraph.nn`` (the same classes), with MegEngine's
submodule paths (``module.init``, ``module.normalization``, ``module.batchnorm``, ...), each
naming the ``nn`` classes MegEngine keeps there."""
from ..nn import *
from ..nn import __all__, init, losses  # noqa: F401

# MegEngine's quantisable float modules (module/conv_bn.py, conv_transpose_bn.py, linear_bn.py,
# linear.py, batch_matmul_activation.py, quant_dequant.py, concat.py); their QAT and int8 forms
# are the subpackages module.qat and module.quantized
from .batch_matmul_activation import BatchMatMulActivation
from .concat import Concat
from .conv_bn import ConvBn2d, ConvBnRelu2d, ConvRelu2d
from .conv_transpose_bn import ConvTransposeBn2d, ConvTransposeBnRelu2d, ConvTransposeRelu2d
from .linear import LinearRelu
from .linear_bn import LinearBn1d, LinearBnRelu1d
from .quant_dequant import DequantStub, QuantStub

__all__ = __all__ + ["BatchMatMulActivation", "Concat", "ConvBn2d", "ConvBnRelu2d",
                     "ConvRelu2d", "ConvTransposeBn2d", "ConvTransposeBnRelu2d",
                     "ConvTransposeRelu2d", "DequantStub", "LinearBn1d", "LinearBnRelu1d",
                     "LinearRelu", "QuantStub"]
