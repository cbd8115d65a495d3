"""MegEngine's ``megengine.module.pixel_shuffle`` path: pixel shuffle."""
from ..nn.resample import PixelShuffle  # noqa: F401
