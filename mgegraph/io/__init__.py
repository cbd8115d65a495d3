"""Saving and loading: the model file (``save``/``load``) and the ``Predictor`` a model loads
as, which ``mgegraph.runtime`` names for a deployment."""
from ..ir.errors import ModelFormatError
from .container import Limits
from .model_file import LoadedModel, read, save
from .predictor import Predictor, load, load_predictor

__all__ = ["Limits", "LoadedModel", "ModelFormatError", "Predictor", "load", "load_predictor",
           "read", "save"]
