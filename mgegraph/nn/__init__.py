"""Modules, layers, initialisations and losses."""
from . import init
from .layers import (GELU, AdaptiveAvgPool2d, AvgPool2d, Conv2d, Dropout,
                     Embedding, Flatten, LayerNorm, Linear, MaxPool2d, ReLU, Sequential, Sigmoid,
                     Tanh)
from .losses import (binary_cross_entropy_with_logits, cross_entropy, l1_loss, mse_loss,
                     nll_loss)
from .module import Buffer, Module, Parameter

__all__ = ["Module", "Parameter", "Buffer", "Sequential", "Linear", "Conv2d", "BatchNorm2d",
           "LayerNorm", "Embedding", "Dropout", "ReLU", "GELU", "Sigmoid", "Tanh", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Flatten", "init", "cross_entropy", "nll_loss",
           "mse_loss", "l1_loss", "binary_cross_entropy_with_logits"]

# normalisation layers (nn/norm.py); BatchNorm2d lived in layers.py before
from .norm import (BatchNorm1d, BatchNorm2d, GroupNorm, InstanceNorm,  # noqa: I001
                   InstanceNorm2d, LocalResponseNorm)

__all__ += ["BatchNorm1d", "GroupNorm", "InstanceNorm", "InstanceNorm2d", "LocalResponseNorm"]
