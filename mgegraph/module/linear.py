"""MegEngine's ``megengine.module.linear`` path: the linear layer."""
from ..nn.layers import Linear  # noqa: F401
