"""Every op family registers its OpDefs on import; this package imports them all."""
from . import conv, deform, elementwise, fused, matmul, movement, nn, norm, reduce, resize, vision  # noqa: F401
from .registry import OpDef, all_ops, get_op, register  # noqa: F401
# sorting and scans: sort, topk, cumsum, cumprod (ops/sorting.py)
from . import sorting  # noqa: F401, E402
