"""Every op family registers its OpDefs on import; this package imports them all."""
from . import conv, deform, elementwise, fused, matmul, movement, nn, norm, reduce, resize, vision  # noqa: F401
from . import sorting as _sorting  # noqa: F401  (sort, topk, cumsum, cumprod)
from .registry import OpDef, all_ops, get_op, register  # noqa: F401

# isort: split
# scaled dot-product attention and its backward
from . import attention  # noqa: F401
# MegEngine's matinv (kernels _kernels/matinv.pyx, csrc_cuda/matinv.cu) and sliding windows
# (kernels _kernels/sliding_window.pyx, csrc_cuda/sliding_window.cu)
from . import linalg_inv, sliding_window  # noqa: F401
# local_conv2d, region_restricted_conv (kernels _kernels/local_conv.pyx, csrc_cuda/local_conv.cu)
from . import local_conv  # noqa: F401
# quantize and dequantize: between real numbers and quantized integers
from . import quantize as _quantize  # noqa: F401
# random draws: uniform, gamma, poisson (kernels _kernels/rng.pyx, csrc_cuda/rng.cu)
from . import random as _random  # noqa: F401
# the embedding lookup with padding_idx (the rest of ops/sequence.py is compositions)
from . import sequence  # noqa: F401
