"""MegEngine's ``SlidingWindow`` and ``SlidingWindowTranspose`` layers (no parameters): the
functions of ops/sliding_window.py with their arguments kept."""
from __future__ import annotations

from .. import functional as F
from .module import Module


class SlidingWindow(Module):
    """(N, C, H, W) -> (N, C, OH, OW, WH, WW): the image's sliding windows, zeros outside it.
    ``nn.SlidingWindow(3, padding=1)``"""

    def __init__(self, kernel_size, padding=0, stride=1, dilation=1):
        self.kernel_size, self.padding = kernel_size, padding
        self.stride, self.dilation = stride, dilation

    def forward(self, inp):
        return F.sliding_window(inp, self.kernel_size, self.padding, self.stride, self.dilation)


class SlidingWindowTranspose(Module):
    """(N, C, OH, OW, WH, WW) -> (N, C, *output_size): the windows summed back onto the image.
    ``nn.SlidingWindowTranspose((32, 32), 3, padding=1)``"""

    def __init__(self, output_size, kernel_size, padding=0, stride=1, dilation=1):
        self.output_size, self.kernel_size, self.padding = output_size, kernel_size, padding
        self.stride, self.dilation = stride, dilation

    def forward(self, inp):
        return F.sliding_window_transpose(inp, self.output_size, self.kernel_size, self.padding,
                                          self.stride, self.dilation)
