"""MegEngine's module path ``megengine.tensor``: ``Tensor`` (``tensor`` is the same class) and
``Parameter``, as ``from megengine.tensor import Tensor`` imports them.

The names load eager mode and nn on first use, as the package's own ``mg.Tensor`` does, so
``import mgegraph`` (which imports this module) still loads neither.
"""
import importlib

# name -> the module that defines it
_HOMES = {"Tensor": "mgegraph.eager.tensor", "tensor": "mgegraph.eager.tensor",
          "Parameter": "mgegraph.nn.module"}
__all__ = ["Parameter", "Tensor", "tensor"]  # noqa: F822  (given by __getattr__)


def __getattr__(name):
    try:
        home = _HOMES[name]
    except KeyError:
        raise AttributeError(f"module 'mgegraph.tensor' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)  # lazy: startup cost (eager, nn)
    globals()[name] = value  # the next lookup is an ordinary one
    return value
