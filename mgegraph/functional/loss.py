"""``megengine.functional.loss``'s names (the losses are defined in ``functional/losses.py``).

>>> loss = F.loss.square_loss(pred, label)
"""
from ..ops.nn import cross_entropy
from .losses import binary_cross_entropy, hinge_loss, l1_loss, square_loss

__all__ = ["binary_cross_entropy", "cross_entropy", "hinge_loss", "l1_loss", "square_loss"]
