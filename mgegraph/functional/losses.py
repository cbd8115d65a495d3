"""Losses as functions of graph values (``mgegraph.nn`` and ``F.nn`` give them under their
names); each takes ``reduction`` in ("mean", "sum", "none")."""
from __future__ import annotations

from ..ops.elementwise import abs, exp, log1p, relu, square
from ..ops.movement_api import expand_dims, gather, reshape
from ..ops.nn import cross_entropy as _cross_entropy
from ..ops.reduce import mean, sum

__all__ = ["binary_cross_entropy_with_logits", "cross_entropy", "l1_loss", "mse_loss", "nll_loss"]


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
