"""MegEngine's ``megengine.module.sliding_window`` path: the sliding-window layers."""
from ..nn.sliding_window import SlidingWindow, SlidingWindowTranspose  # noqa: F401
