"""The public op functions, named and shaped after ``megengine.functional``.

>>> import mgegraph.functional as F
>>> y = F.softmax(F.relu(x @ w + b), axis=-1)
"""
from .ops import conv, elementwise, matmul, movement, nn, reduce
from .ops.conv import *  # noqa: F401,F403
from .ops.elementwise import *  # noqa: F401,F403
from .ops.matmul import *  # noqa: F401,F403
from .ops.movement import *  # noqa: F401,F403
from .ops.nn import *  # noqa: F401,F403
from .ops.reduce import *  # noqa: F401,F403

__all__ = [name for family in (elementwise, reduce, nn, matmul, conv, movement)
           for name in family.__all__]
