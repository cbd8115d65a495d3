"""Adam and AdamW (MegEngine's names, defaults and arithmetic up to rounding)."""
from __future__ import annotations

import math

from .. import functional as F
from ..ir.errors import GraphError
from .optimizer import Optimizer, assign_rounded, check_number


class Adam(Optimizer):
    """Adam (Kingma and Ba) with L2 weight decay (``g + weight_decay * w``); ``decoupled=True``
    is AdamW. ``betas``, ``eps`` and ``weight_decay`` are per group.

    >>> opt = Adam(net.parameters(), lr=1e-3, betas=(0.9, 0.999))
    """

    SCALARS = ("lr", "beta1", "beta2", "one_minus_beta1", "one_minus_beta2", "step_size",
               "inv_sqrt_bc2", "eps", "weight_decay", "decay")
    COUNTS_STEPS = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled: bool = False):
        self.decoupled = bool(decoupled)
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay})

    def _check_group(self, group, index):
        super()._check_group(group, index)
        owner = self._owner(index)
        try:
            b1, b2 = group["betas"]
        except (TypeError, ValueError):
            raise GraphError(f"{owner}: betas must be a pair of numbers, got "
                             f"{group['betas']!r}") from None
        check_number(owner, "betas[0]", b1, 0.0, 1.0, open_high=True)
        check_number(owner, "betas[1]", b2, 0.0, 1.0, open_high=True)
        check_number(owner, "eps", group["eps"])
        check_number(owner, "weight_decay", group["weight_decay"])

    def _structure(self, group):
        return {"weight_decay": group["weight_decay"] != 0}

    def _states(self, group):
        return ("exp_avg", "exp_avg_sq")

    def _scalar_values(self, group):
        (b1, b2), t, lr = group["betas"], self.step_count, group["lr"]
        return {"lr": lr, "beta1": b1, "beta2": b2, "one_minus_beta1": 1 - b1,
                "one_minus_beta2": 1 - b2, "step_size": lr / (1 - b1 ** t),
                "inv_sqrt_bc2": 1 / math.sqrt(1 - b2 ** t), "eps": group["eps"],
                "weight_decay": group["weight_decay"],
                "decay": 1 - lr * group["weight_decay"]}

    def _update(self, graph, index, p, w, g):
        def scalar(key):
            return self._scalar(graph, index, key)
        if self._built[index]["weight_decay"]:
            if self.decoupled:
                w = w * scalar("decay")
            else:
                g = g + w * scalar("weight_decay")
        m, v = graph.bind(self._state(p, "exp_avg")), graph.bind(self._state(p, "exp_avg_sq"))
        new_m = m * scalar("beta1") + g * scalar("one_minus_beta1")
        new_v = v * scalar("beta2") + g * g * scalar("one_minus_beta2")
        assign_rounded(graph, m, new_m)
        assign_rounded(graph, v, new_v)
        denom = F.sqrt(new_v) * scalar("inv_sqrt_bc2") + scalar("eps")
        return w - new_m / denom * scalar("step_size")


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter), default decay 1e-2:
    ``w -= lr * (adam_step + weight_decay * w)``."""

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2):
        super().__init__(params, lr, betas, eps, weight_decay, decoupled=True)
