"""MegEngine's ``megengine.module.dropout`` path: dropout."""
from ..nn.layers import Dropout  # noqa: F401
