"""The public op functions, named and shaped after ``megengine.functional``.

>>> import mgegraph.functional as F
>>> y = F.softmax(F.relu(x @ w + b), axis=-1)
"""
import sys as _sys

from ..ir import graph as _graph
from ..ops import conv as _conv
from ..ops import elementwise as _elementwise
from ..ops import matmul as _matmul
from ..ops import movement_api as _movement
from ..ops import nn as _nn
from ..ops import reduce as _reduce
from ..ops.conv import *
from ..ops.elementwise import *
from ..ops.matmul import *
from ..ops.movement_api import *
from ..ops.nn import *
from ..ops.reduce import *
from . import nn  # noqa: F401  (``F.nn``: MegEngine's names for the same functions)

__all__ = [name for family in (_elementwise, _reduce, _nn, _matmul, _conv, _movement)
           for name in family.__all__]

# image functions: ``F.vision`` (MegEngine's module), also at the top as MegEngine has them
from . import vision
from .vision import *

__all__ += vision.__all__

# Var's Python operators (x + y, x @ w, x[1:]) build nodes with these functions.
_graph.install("functional", _sys.modules[__name__])
