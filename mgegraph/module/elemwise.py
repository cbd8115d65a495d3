"""MegEngine's ``megengine.module.elemwise`` path: the elementwise module."""
from ..nn.elemwise import Elemwise  # noqa: F401
