"""MegEngine's ``megengine.module.sequential`` path: the sequential container."""
from ..nn.layers import Sequential  # noqa: F401
