"""Saving and loading: the model file (``save``/``load``), read by ``mgegraph.runtime`` too."""
from ..ir.errors import ModelFormatError
from .container import Limits
from .model_file import LoadedModel, load, read, save

__all__ = ["Limits", "LoadedModel", "ModelFormatError", "load", "read", "save"]
