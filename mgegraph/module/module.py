"""MegEngine's ``megengine.module.module`` path: the base class."""
from ..nn.module import Module  # noqa: F401
