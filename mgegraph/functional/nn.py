"""``mgegraph.functional.nn``: the neural-network functions under MegEngine's
``megengine.functional.nn`` names (losses, activations, convolutions, pooling, normalisation),
the same functions as at the top of ``mgegraph.functional``.

>>> import mgegraph.functional as F
>>> loss = F.nn.cross_entropy(logits, labels)
"""
from ..ops.conv import *
from ..ops.conv import __all__ as _conv_all
from ..ops.elementwise import (  # noqa: F401
                         gelu,
                         hsigmoid,
                         hswish,
                         leaky_relu,
                         relu,
                         relu6,
                         sigmoid,
                         silu,
                         softplus,
                         tanh,
)
from ..ops.matmul import linear  # noqa: F401
from ..ops.nn import *
from ..ops.nn import __all__ as _nn_all
from .losses import binary_cross_entropy_with_logits, l1_loss, mse_loss, nll_loss  # noqa: F401
from .vision import interpolate, pixel_shuffle, pixel_unshuffle  # noqa: F401

# MegEngine's names for two losses
square_loss = mse_loss
binary_cross_entropy = binary_cross_entropy_with_logits

__all__ = [name for name in sorted(set(_conv_all) | set(_nn_all) | {
    "binary_cross_entropy_with_logits", "binary_cross_entropy", "l1_loss", "mse_loss",
    "square_loss", "nll_loss", "gelu", "hsigmoid", "hswish", "leaky_relu", "relu", "relu6",
    "sigmoid", "silu", "softplus", "tanh", "linear"} | {
    "interpolate", "pixel_shuffle", "pixel_unshuffle"})]
