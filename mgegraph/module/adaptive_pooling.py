"""MegEngine's ``megengine.module.adaptive_pooling`` path: the adaptive poolings."""
from ..nn.layers import AdaptiveAvgPool2d  # noqa: F401
from ..nn.pooling import AdaptiveMaxPool2d  # noqa: F401
