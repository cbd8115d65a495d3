"""MegEngine's ``megengine.module.identity`` path: the identity."""
from ..nn.activation import Identity  # noqa: F401
