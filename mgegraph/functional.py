"""The public op functions, named and shaped after ``megengine.functional``.

>>> import mgegraph.functional as F
>>> y = F.softmax(F.relu(x @ w + b), axis=-1)
"""
from .ops.elementwise import *  # noqa: F401,F403
from .ops.elementwise import __all__ as _elementwise

__all__ = list(_elementwise)
