"""Losses as functions of graph values; each takes ``reduction`` in ("mean", "sum", "none")."""
from __future__ import annotations

from .. import functional as F


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return F.mean(loss)
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def cross_entropy(pred, label, axis: int = 1, label_smooth: float = 0.0, reduction="mean"):
    """Softmax cross-entropy of logits ``pred`` with integer class labels."""
    return F.cross_entropy(pred, label, axis=axis, label_smooth=label_smooth, reduction=reduction)


def nll_loss(log_probs, label, reduction="mean"):
    """Negative log-likelihood of log-probabilities (N, C) at integer labels (N,)."""
    picked = F.gather(log_probs, 1, F.expand_dims(label, 1))
    return _reduce(-F.reshape(picked, label.shape), reduction)


def mse_loss(pred, target, reduction="mean"):
    return _reduce(F.square(pred - target), reduction)


def l1_loss(pred, target, reduction="mean"):
    return _reduce(F.abs(pred - target), reduction)


def binary_cross_entropy_with_logits(logits, target, reduction="mean"):
    """max(x, 0) - x * t + log(1 + exp(-|x|)), stable for any logit."""
    return _reduce(F.relu(logits) - logits * target + F.log1p(F.exp(-F.abs(logits))), reduction)
