"""``mgegraph.optimizer``: MegEngine's name for ``mgegraph.optim`` (the same classes)."""
from .optim import *
from .optim import __all__, lr_scheduler  # noqa: F401
