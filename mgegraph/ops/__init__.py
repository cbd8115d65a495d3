"""Every op family registers its OpDefs on import; this package imports them all."""
from . import conv, deform, elementwise, fused, matmul, movement, nn, norm, reduce, resize, vision  # noqa: F401
from . import sorting as _sorting  # noqa: F401  (sort, topk, cumsum, cumprod)
from .registry import OpDef, all_ops, get_op, register  # noqa: F401

# isort: split
from . import (  # noqa: F401  (each family registers its ops)
    attention,  # scaled dot-product attention and its backward
    linalg_inv,  # MegEngine's matinv
    local_conv,  # local_conv2d, region_restricted_conv and their backward
    sequence,  # the embedding lookup with padding_idx (the rest are compositions)
    sliding_window,  # MegEngine's sliding windows and their transpose
)
from . import collective as _collective  # noqa: F401  (all_reduce and its planned pair)
from . import fake_quant as _fake_quant  # noqa: F401  (quantization-aware training's fake_quant)
from . import quantize as _quantize  # noqa: F401  (quantize, dequantize, as_quantized)
from . import quantized as _quantized  # noqa: F401  (the int8 conv2d, linear and add)
from . import quantized_pack as _quantized_pack  # noqa: F401  (int8 ops on packed weights)
from . import random as _random  # noqa: F401  (draws: uniform, gamma, poisson)
