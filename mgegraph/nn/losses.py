"""Losses as functions of graph values; each takes ``reduction`` in ("mean", "sum", "none").
They live with the op functions (``mgegraph/functional/losses.py``), a layer below nn, so that
``F.nn`` names them without loading nn."""
from ..functional.losses import (  # noqa: F401
    binary_cross_entropy_with_logits,
    cross_entropy,
    l1_loss,
    mse_loss,
    nll_loss,
)
