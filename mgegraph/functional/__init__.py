"""The public op functions, named and shaped after ``megengine.functional``.

>>> import mgegraph.functional as F
>>> y = F.softmax(F.relu(x @ w + b), axis=-1)
"""
import sys as _sys

from ..ir import graph as _graph
from ..ops import conv as _conv
from ..ops import conv_api as _conv_api
from ..ops import elementwise as _elementwise
from ..ops import matmul as _matmul
from ..ops import movement_api as _movement
from ..ops import nn as _nn
from ..ops import pooling as _pooling
from ..ops import reduce as _reduce
from ..ops.conv import *
from ..ops.conv_api import *
from ..ops.elementwise import *
from ..ops.matmul import *
from ..ops.movement_api import *
from ..ops.nn import *
from ..ops.pooling import *
from ..ops.reduce import *

# ``F.nn``: MegEngine's names for the same functions; ``F.vision``: resizing, sampling, warps,
# detection
from . import nn, vision  # noqa: F401

__all__ = [name for family in (_elementwise, _reduce, _nn, _matmul, _conv, _movement,
                                   _conv_api)
           for name in family.__all__]
__all__ += _pooling.__all__  # pooling made of other ops (Lp, global, 1-D)

# normalisations (functional/norms.py); normalize is MegEngine's F.normalize
from .nn import (group_norm, instance_norm, local_response_norm,  # noqa: I001
                 mean_variance_normalization, normalize)

__all__ += ["group_norm", "instance_norm", "local_response_norm", "mean_variance_normalization",
            "normalize"]

# resizing, also at the top (``F.interpolate``); the rest of ``F.vision`` only there
from .vision import interpolate, pixel_shuffle, pixel_unshuffle

__all__ += ["interpolate", "pixel_shuffle", "pixel_unshuffle"]

# MegEngine's F.deformable_conv2d (a functional.nn name), also at the top
from .vision import deformable_conv2d

__all__ += ["deformable_conv2d"]

# hardmax (a composition over argmax), also ONNX's Hardmax
from ..ops.hardmax import hardmax

__all__ += ["hardmax"]
# sequence models and MegEngine's indexing helpers, compositions (ops/sequence.py)
from ..ops.sequence import embedding, indexing_one_hot, rms_norm, rotary_embedding, scatter, swiglu

__all__ += ["embedding", "indexing_one_hot", "rms_norm", "rotary_embedding", "scatter",
            "swiglu"]

# Var's Python operators (x + y, x @ w, x[1:]) build nodes with these functions.
_graph.install("functional", _sys.modules[__name__])

# sorting and scans (ops/sorting.py): sort, argsort, topk, cumsum, cumprod
from ..ops import sorting as _sorting
from ..ops.sorting import argsort, cumprod, cumsum, sort, topk  # noqa: F401

__all__ += _sorting.__all__
# scaled dot-product and multi-head attention (ops/attention_api.py), also at the top
from ..ops.attention_api import multi_head_attention, scaled_dot_product_attention

__all__ += ["multi_head_attention", "scaled_dot_product_attention"]

# MegEngine's submodule paths (F.tensor, F.math, F.elemwise, F.loss, F.einsum) and the functions
# first defined there
from . import elemwise, loss, math, tensor  # noqa: F401
from .einsum import einsum
from .elemwise import logaddexp, logical_and, logical_not, logical_or, logical_xor
from .math import cross, isinf, isnan, logsumexp, norm, std
from .tensor import cond_take, copy, diag, eye, non_zero
from .vision import remap, warp_affine, warp_perspective

__all__ += ["cond_take", "copy", "cross", "diag", "einsum", "eye", "isinf", "isnan", "logaddexp",
            "logical_and", "logical_not", "logical_or", "logical_xor", "logsumexp", "non_zero",
            "norm", "remap", "std", "warp_affine", "warp_perspective"]
# MegEngine's matinv (ops/linalg_inv.py) and sliding windows (ops/sliding_window.py)
from ..ops.linalg_inv import matinv
from ..ops.sliding_window import sliding_window, sliding_window_transpose

__all__ += ["matinv", "sliding_window", "sliding_window_transpose"]
# MegEngine's local_conv2d and region_restricted_conv (ops/local_conv.py), also in F.nn
from ..ops.local_conv import local_conv2d, region_restricted_conv

__all__ += ["local_conv2d", "region_restricted_conv"]
# MegEngine's F.metric and F.utils paths: topk_accuracy, composed of topk and a compare
from . import metric, utils  # noqa: F401
from .metric import topk_accuracy

__all__ += ["topk_accuracy"]


# MegEngine's F.distributed: the eager collectives of mgegraph.distributed (the eager layer),
# loaded on first use, so importing functional loads neither eager mode nor MPI
def __getattr__(name):
    if name != "distributed":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    module = importlib.import_module("mgegraph.distributed.functional")  # lazy: eager layer
    globals()[name] = module
    return module
