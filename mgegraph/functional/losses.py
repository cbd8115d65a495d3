"""Losses as functions of graph values (``mgegraph.nn`` and ``F.nn`` give them under their
names); each takes ``reduction`` in ("mean", "sum", "none")."""
from __future__ import annotations

from ..ops.elementwise import abs, clip, exp, log, log1p, relu, square
from ..ops.movement_api import expand_dims, gather, reshape
from ..ops.nn import cross_entropy as _cross_entropy
from ..ops.reduce import mean, sum

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy",
           "hinge_loss", "l1_loss", "mse_loss", "nll_loss", "square_loss"]


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(pred, label, axis: int = 1, label_smooth: float = 0.0, reduction="mean"):
    """Softmax cross-entropy of logits ``pred`` with integer class labels."""
    return _cross_entropy(pred, label, axis=axis, label_smooth=label_smooth, reduction=reduction)


def nll_loss(log_probs, label, reduction="mean"):
    """Negative log-likelihood of log-probabilities (N, C) at integer labels (N,)."""
    picked = gather(log_probs, 1, expand_dims(label, 1))
    return _reduce(-reshape(picked, label.shape), reduction)


def mse_loss(pred, target, reduction="mean"):
    return _reduce(square(pred - target), reduction)


def l1_loss(pred, target, reduction="mean"):
    return _reduce(abs(pred - target), reduction)


def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    """max(x, 0) - x * t + log(1 + exp(-|x|)), stable for any logit."""
    return _reduce(relu(logits) - logits * target + log1p(exp(-abs(logits))), reduction)


square_loss = mse_loss  # MegEngine's name


def binary_cross_entropy(pred, label, with_logits=True, reduction="mean"):
    """MegEngine's binary cross entropy: of logits (``with_logits``, the default), or of
    probabilities, whose logs are clipped below at -100 as PyTorch's ``BCELoss`` does, so a 0 or 1
    costs 100, not an infinity. ``F.nn.binary_cross_entropy(p, y, with_logits=False)``"""
    if with_logits:
        return binary_cross_entropy_with_logits(pred, label, reduction)
    loss = -(label * clip(log(pred), lower=-100.0) + (1 - label) * clip(log(1 - pred), lower=-100.0))
    return _reduce(loss, reduction)


def hinge_loss(pred, label, norm="L1", reduction="mean"):
    """Per row of (N, C) scores and +-1 labels, the sum over C of max(0, 1 - pred * label) (its
    square with ``norm="L2"``); "mean" averages the N rows. ``F.nn.hinge_loss(pred, label)``"""
    if norm not in ("L1", "L2"):
        raise ValueError(f"hinge_loss: norm must be 'L1' or 'L2', got {norm!r}")
    margin = relu(1 - pred * label)
    return _reduce(sum(margin if norm == "L1" else square(margin), axis=1), reduction)
