"""MegEngine's ``megengine.module.pooling`` path: the 2-d poolings."""
from ..nn.layers import AvgPool2d, MaxPool2d  # noqa: F401
