"""Modules, layers, initialisations and losses."""
from . import init
from .activation import (
                         CELU,
                         ELU,
                         SELU,
                         Hardshrink,
                         Hardsigmoid,
                         Hardswish,
                         Hardtanh,
                         Identity,
                         LeakyReLU,
                         LogSigmoid,
                         LogSoftmax,
                         Mish,
                         PReLU,
                         ReLU6,
                         SiLU,
                         Softmax,
                         Softplus,
                         Softshrink,
                         Softsign,
)
from .conv import Conv1d, Conv3d, ConvTranspose1d, ConvTranspose2d
from .layers import (
                         GELU,
                         AdaptiveAvgPool2d,
                         AvgPool2d,
                         Conv2d,
                         Dropout,
                         Embedding,
                         Flatten,
                         LayerNorm,
                         Linear,
                         MaxPool2d,
                         ReLU,
                         Sequential,
                         Sigmoid,
                         Tanh,
)
from .losses import binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss, nll_loss
from .module import Buffer, Module, Parameter
from .pooling import (
                         AdaptiveMaxPool2d,
                         AvgPool1d,
                         GlobalAvgPool2d,
                         GlobalMaxPool2d,
                         LPPool1d,
                         LPPool2d,
                         MaxPool1d,
                         MaxUnpool2d,
)

__all__ = [
                         "GELU",
                         "AdaptiveAvgPool2d",
                         "AvgPool2d",
                         "BatchNorm2d",
                         "Buffer",
                         "Conv2d",
                         "Dropout",
                         "Embedding",
                         "Flatten",
                         "LayerNorm",
                         "Linear",
                         "MaxPool2d",
                         "Module",
                         "Parameter",
                         "ReLU",
                         "Sequential",
                         "Sigmoid",
                         "Tanh",
                         "binary_cross_entropy_with_logits",
                         "cross_entropy",
                         "init",
                         "l1_loss",
                         "mse_loss",
                         "nll_loss",
]
__all__ += ["AdaptiveMaxPool2d", "AvgPool1d", "GlobalAvgPool2d", "GlobalMaxPool2d", "LPPool1d",
            "LPPool2d", "MaxPool1d", "MaxUnpool2d"]
# the activation modules
__all__ += ["CELU", "ELU", "SELU", "Hardshrink", "Hardsigmoid", "Hardswish", "Hardtanh",
            "Identity", "LeakyReLU", "LogSigmoid", "LogSoftmax", "Mish", "PReLU", "ReLU6", "SiLU",
            "Softmax", "Softplus", "Softshrink", "Softsign"]
__all__ += ["Conv1d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d"]

# normalisation layers (nn/norm.py); BatchNorm2d lived in layers.py before
from .norm import (BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm,  # noqa: I001
                   InstanceNorm2d, LocalResponseNorm)

__all__ += ["BatchNorm1d", "GroupNorm", "InstanceNorm", "InstanceNorm2d", "LocalResponseNorm"]
