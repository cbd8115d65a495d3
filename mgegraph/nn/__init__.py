"""Modules, layers, initialisations and losses."""
from . import init
from .activation import (CELU, ELU, SELU, Hardshrink, Hardsigmoid, Hardswish, Hardtanh, Identity,
                         LeakyReLU, LogSigmoid, LogSoftmax, Mish, PReLU, ReLU6, SiLU, Softmax,
                         Softplus, Softshrink, Softsign)
from .conv import Conv1d, Conv3d, ConvTranspose1d, ConvTranspose2d
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, BatchNorm2d, Conv2d, Dropout,
                     Embedding, Flatten, LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid,
                     Tanh)
from .losses import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     nll_loss)
from .module import Buffer, Module, Parameter
from .pooling import (AdaptiveMaxPool2d, AvgPool1d, GlobalAvgPool2d, GlobalMaxPool2d, LPPool1d,
                      LPPool2d, MaxPool1d, MaxUnpool2d)

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "Linear", "Conv2d", "BatchNorm2d",
           "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "Sigmoid", "Tanh", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "init", "cross_entropy", "nll_loss",
           "mse_loss", "l1_loss", "binary_cross_entropy_with_logits"]
__all__ += ["AdaptiveMaxPool2d", "AvgPool1d", "GlobalAvgPool2d", "GlobalMaxPool2d", "LPPool1d",
            "LPPool2d", "MaxPool1d", "MaxUnpool2d"]
# the activation modules
__all__ += ["CELU", "ELU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh",
            "Identity", "LeakyReLU", "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU6", "SiLU",
            "Softmax", "Softplus", "Softshrink", "Softsign"]
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"]
