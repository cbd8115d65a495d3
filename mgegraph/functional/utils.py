"""``megengine.functional.utils``, a path MegEngine keeps for two of its functions: the public
one of each lives in ``F.metric`` and ``F.tensor``."""
from .metric import topk_accuracy
from .tensor import copy

__all__ = ["copy", "topk_accuracy"]
