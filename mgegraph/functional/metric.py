"""``megengine.functional.metric``: classification accuracy, composed of topk and a compare.

>>> top1, top5 = F.topk_accuracy(logits, labels, topk=(1, 5))
"""
from __future__ import annotations

import numbers

import numpy as np

from ..ir.errors import OpError, user_location
from ..ops import elementwise as ew
from ..ops.builder import graph_of
from ..ops.movement_api import expand_dims, subscript
from ..ops.reduce import sum as reduce_sum
from ..ops.sorting import topk as _topk

__all__ = ["topk_accuracy"]


def topk_accuracy(logits, target, topk=1):
    """The fraction (float32, 0-d) of rows of ``logits`` (batch, classes) whose ``target`` label
    is among their ``k`` highest scores, for one ``k`` or each of a tuple of them (then a list).

    >>> F.topk_accuracy(logits, labels)   # top-1
    """
    ks = (topk,) if isinstance(topk, numbers.Integral) else tuple(topk)
    x = graph_of(logits, target).lift(logits)
    label = graph_of(x).lift(target)
    _check(x, label, ks)
    _, best = _topk(x, max(ks), descending=True)
    hits = ew.equal(best, ew.astype(expand_dims(label, 1), best.dtype))
    accs = [reduce_sum(ew.astype(subscript(hits, (slice(None), slice(0, k))), np.float32))
            / x.shape[0] for k in ks]
    return accs[0] if isinstance(topk, numbers.Integral) else accs


def _check(x, label, ks) -> None:
    reason = None
    if x.ndim != 2 or label.ndim != 1 or label.shape[0] != x.shape[0]:
        reason = (f"logits must be (batch, classes) and target (batch,), got shapes {x.shape} "
                  f"and {label.shape}")
    elif not ks or any(not isinstance(k, numbers.Integral) or not 1 <= k <= x.shape[1]
                       for k in ks):
        reason = f"topk must be ints from 1 to the {x.shape[1]} classes, got {ks}"
    elif np.dtype(label.dtype).kind not in "iu":
        reason = f"target must hold integer labels, got {label.dtype}"
    if reason:
        raise OpError("topk_accuracy", (x.type, label.type), reason, user_location())
