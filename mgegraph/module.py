"""``mgegraph.module``: MegEngine's name for ``mgegraph.nn`` (the same classes)."""
from .nn import *
from .nn import __all__, init, losses  # noqa: F401
