"""``mgegraph.functional.nn``: the neural-network functions under MegEngine's
``megengine.functional.nn`` names (losses, activations, convolutions, pooling, normalisation),
the same functions as at the top of ``mgegraph.functional``.

>>> import mgegraph.functional as F
>>> loss = F.nn.cross_entropy(logits, labels)
"""
from ..ops.conv import *
from ..ops.conv import __all__ as _conv_all
from ..ops.conv_api import *
from ..ops.conv_api import __all__ as _conv_api_all
from ..ops.elementwise import (  # noqa: F401
                         celu,
                         elu,
                         gelu,
                         hardshrink,
                         hardsigmoid,
                         hardtanh,
                         hsigmoid,
                         hswish,
                         leaky_relu,
                         logsigmoid,
                         mish,
                         prelu,
                         relu,
                         relu6,
                         selu,
                         sigmoid,
                         silu,
                         softplus,
                         softshrink,
                         softsign,
                         tanh,
                         thresholded_relu,
)
from ..ops.matmul import linear  # noqa: F401
from ..ops.nn import *
from ..ops.nn import __all__ as _nn_all
from ..ops.pooling import *
from ..ops.pooling import __all__ as _pooling_all
from .losses import (  # noqa: F401
                         binary_cross_entropy,
                         binary_cross_entropy_with_logits,
                         hinge_loss,
                         l1_loss,
                         mse_loss,
                         nll_loss,
                         square_loss,
)
from .vision import interpolate, pixel_shuffle, pixel_unshuffle  # noqa: F401

__all__ = [name for name in sorted(set(_conv_all) | set(_conv_api_all) | set(_nn_all)
                                   | set(_pooling_all) | {
    "binary_cross_entropy_with_logits", "binary_cross_entropy", "l1_loss", "mse_loss",
    "square_loss", "nll_loss", "gelu", "hsigmoid", "hswish", "leaky_relu", "relu", "relu6",
    "sigmoid", "silu", "softplus", "tanh", "linear"} | {
    "celu", "elu", "hardshrink", "hardsigmoid", "hardtanh", "logsigmoid", "mish", "prelu",
    "selu", "softshrink", "softsign", "thresholded_relu"} | {
    "interpolate", "pixel_shuffle", "pixel_unshuffle"} | {"hinge_loss"})]


# normalisations (functional/norms.py)
from .norms import (
    group_norm,
    instance_norm,
    local_response_norm,
    mean_variance_normalization,
    normalize,
)

__all__ += ["group_norm", "instance_norm", "local_response_norm", "mean_variance_normalization",
            "normalize"]

# MegEngine's F.nn.deformable_conv2d (functional/vision.py, where correlation lives too)
from .vision import deformable_conv2d

__all__ += ["deformable_conv2d"]

# sequence models (ops/sequence.py), and the embedding lookup with PyTorch's padding_idx
from ..ops.sequence import embedding, indexing_one_hot, rms_norm, rotary_embedding, swiglu

__all__ += ["embedding", "indexing_one_hot", "rms_norm", "rotary_embedding", "swiglu"]

# scaled dot-product attention and multi-head attention (ops/attention_api.py)
from ..ops.attention_api import multi_head_attention, scaled_dot_product_attention

__all__ += ["multi_head_attention", "scaled_dot_product_attention"]
# MegEngine's F.nn names defined elsewhere: pad and one_hot (ops/movement_api.py), logsumexp
# (functional/math.py), the warps (functional/vision.py)
from ..ops.movement_api import one_hot, pad
from .math import logsumexp
from .vision import remap, warp_affine, warp_perspective

__all__ += ["logsumexp", "one_hot", "pad", "remap", "warp_affine", "warp_perspective"]
# MegEngine's F.nn.sliding_window and its transpose (ops/sliding_window.py)
from ..ops.sliding_window import sliding_window, sliding_window_transpose

__all__ += ["sliding_window", "sliding_window_transpose"]
# MegEngine's F.nn.local_conv2d and F.nn.region_restricted_conv (ops/local_conv.py)
from ..ops.local_conv import local_conv2d, region_restricted_conv

__all__ += ["local_conv2d", "region_restricted_conv"]
