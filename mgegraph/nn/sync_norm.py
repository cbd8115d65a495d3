"""``SyncBatchNorm``: batch norm whose statistics are those of the whole batch spread over the
processes of a distributed group (MegEngine's ``megengine.module.SyncBatchNorm``).

>>> norm = nn.SyncBatchNorm(64)        # in each process of a data-parallel job
>>> y = norm(x)                         # x: this rank's (N, 64, H, W)

Design: the statistics are two all-reduces of per-channel sums (the ranks' counts ride with
the first), the mean first and then the squared deviations from it: two collectives where one
would do (sums of x and x squared, MegEngine's way), because the one-pass variance loses digits
when the mean is large against the spread, and the result should match ``BatchNorm`` over the
concatenated batch to float tolerance. The normalisation is ordinary eager arithmetic and the
all-reduces are differentiable, so the gradient (input, weight, bias) is the whole batch's
without a rule of its own. In one process, or when normalising with the running statistics,
it is ``BatchNorm``.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..distributed.functional import all_reduce_sum
from ..distributed.group import WORLD, Group, is_distributed
from ..ir.errors import GraphError
from ..ir.types import HALF_DTYPES
from .norm import _BatchNorm


class SyncBatchNorm(_BatchNorm):
    """Batch norm over a 2-, 3- or 4-d input with the statistics of every rank of ``group``
    (default: ``WORLD``, all of them). Trains eagerly across processes; in one process (no
    ``init_process_group``) it is ``BatchNorm`` anywhere, compiled steps included.
    ``nn.SyncBatchNorm(64)``"""

    ndims = (2, 3, 4)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.9,
                 affine: bool = True, track_running_stats: bool = True, freeze: bool = False,
                 group: Group | None = WORLD, param_dim: str = "dim_1c11"):
        if group is not None and not isinstance(group, Group):
            raise GraphError(f"SyncBatchNorm: group={group!r} must be a distributed Group "
                             "(dist.WORLD, dist.new_group([...])) or None")
        super().__init__(num_features, eps, momentum, affine, track_running_stats, freeze,
                         param_dim)
        self.group = WORLD if group is None else group

    def forward(self, x):
        batch_stats = not self.track_running_stats or (self.training and not self.freeze)
        if not batch_stats or not is_distributed() or self.group.size == 1:
            return super().forward(x)
        self._check_input(x)
        if not getattr(x.graph, "eager", False):
            raise GraphError(f"SyncBatchNorm({self.num_features}): across {self.group.size} "
                             "processes it runs on eager tensors (its all-reduces are eager); "
                             "train the step eagerly")
        work = x.astype("float32") if x.dtype in HALF_DTYPES else x
        mean, var, n = self._statistics(work)
        if n == 0:  # every rank's batch is empty: BatchNorm's rule (no statistics, none kept)
            return super().forward(x)
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        y = (work - mean) / F.sqrt(var + self.eps)
        if self.affine:
            weight = self._per_channel(x, self.weight, detached=self.freeze)
            bias = self._per_channel(x, self.bias, detached=self.freeze)
            y = y * F.reshape(weight, shape) + F.reshape(bias, shape)
        if self.training and self.track_running_stats:
            self._update_running(x, mean, var, n)
        return y.astype(x.dtype) if y.dtype != x.dtype else y

    def _statistics(self, x):
        """The whole batch's mean and biased variance, of shape (1, C, 1, ...), and its count."""
        axes = (0,) + tuple(range(2, x.ndim))
        count = F.astype(F.full((1,), x.size // self.num_features), x.dtype)
        total = all_reduce_sum(F.concat([x.sum(axis=axes), count]), self.group)
        n = float(total[self.num_features].item())
        shape = (1, self.num_features) + (1,) * (x.ndim - 2)
        mean = F.reshape(total[:self.num_features], shape) / max(n, 1.0)
        deviations = ((x - mean) ** 2).sum(axis=axes)
        var = F.reshape(all_reduce_sum(deviations, self.group), shape) / max(n, 1.0)
        return mean, var, n

    def _update_running(self, x, mean, var, n: float) -> None:
        """running = momentum * running + (1 - momentum) * batch (the unbiased variance)."""
        g = x.graph
        for running, batch in ((self.running_mean, mean),
                               (self.running_var, var * (n / max(n - 1.0, 1.0)))):
            old = g.lift(running)
            value = F.reshape(batch.detach(), old.shape).astype(np.dtype(old.dtype))
            g.assign(old, old * self.momentum + value * (1 - self.momentum))
