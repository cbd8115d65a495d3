"""``mgegraph.module``: MegEngine's name for ``mgegraph.nn`` (the same classes), with MegEngine's
submodule paths (``module.init``, ``module.normalization``, ``module.batchnorm``, ...), each
naming the ``nn`` classes MegEngine keeps there."""
from ..nn import *
from ..nn import __all__, init, losses  # noqa: F401

# MegEngine's quantisable float modules (module/conv_bn.py, module/quant_dequant.py,
# module/concat.py); their QAT and int8 forms are the subpackages module.qat and module.quantized
from .concat import Concat
from .conv_bn import ConvBn2d, ConvBnRelu2d, ConvRelu2d
from .quant_dequant import DequantStub, QuantStub

__all__ = __all__ + ["Concat", "ConvBn2d", "ConvBnRelu2d", "ConvRelu2d", "DequantStub",
                     "QuantStub"]
