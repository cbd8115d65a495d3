"""``mg.runtime``: run a saved model with NumPy and the compiled kernels only.

Importing it (and loading and running a model) imports no autodiff, ``nn`` or ``optim``: a
deployment needs the ops, the planner and the kernels, nothing of training. The names are
those of the model file's package (``mgegraph.io``), where the predictor lives. A model saved
with a named dimension (``input0: float32[batch, 1, 8, 8]``) takes any conforming shape.

>>> from mgegraph import runtime
>>> predictor = runtime.load("model.mgm"); (y,) = predictor.run({"x": x})
"""
from .io.container import Limits
from .io.predictor import Predictor
from .io.predictor import load_predictor as load
from .ir.errors import ModelFormatError

__all__ = ["Limits", "ModelFormatError", "Predictor", "load"]
