"""``mgegraph.module``: MegEngine's name for ``mgegraph.nn`` (the same classes), with MegEngine's
submodule paths (``module.init``, ``module.normalization``, ``module.batchnorm``, ...), each
naming the ``nn`` classes MegEngine keeps there."""
from ..nn import *
from ..nn import __all__, init, losses  # noqa: F401
