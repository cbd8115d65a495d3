"""Modules, layers, initialisations and losses."""
from . import init
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, Dropout,
                     Embedding, Flatten, LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid,
                     Tanh)
from .losses import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     nll_loss)
from .module import Buffer, Module, Parameter
from .resample import (ConstantPad2d, PixelShuffle, PixelUnshuffle, ReflectionPad2d,
                       ReplicationPad2d, Upsample, ZeroPad2d)

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "Linear", "Conv2d", "BatchNorm2d",
           "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "Sigmoid", "Tanh", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "init", "cross_entropy", "nll_loss",
           "mse_loss", "l1_loss", "binary_cross_entropy_with_logits"]
__all__ += ["ConstantPad2d", "PixelShuffle", "PixelUnshuffle", "ReflectionPad2d",
            "ReplicationPad2d", "Upsample", "ZeroPad2d"]
