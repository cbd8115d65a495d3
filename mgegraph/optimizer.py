"""``mgegraph.optimizer``: MegEngine's name for ``mgegraph.optim`` (the same classes)."""
from .optim import *  # noqa: F401,F403
from .optim import __all__, lr_scheduler  # noqa: F401
