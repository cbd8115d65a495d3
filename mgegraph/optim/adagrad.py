"""Adagrad and Adadelta, MegEngine's adaptive-rate optimisers, with MegEngine's arithmetic."""
from __future__ import annotations

from .. import functional as F
from .optimizer import Optimizer, assign_rounded, check_number


class Adagrad(Optimizer):
    """Adagrad (Duchi et al.): ``s += g * g``; ``w -= lr / (1 + (t - 1) * lr_decay) * g /
    sqrt(s + eps)``, ``g`` with L2 weight decay. The numbers are per group.

    >>> opt = Adagrad(net.parameters(), lr=1e-2, lr_decay=0.01)
    """

    SCALARS = ("lr", "eps", "weight_decay")
    COUNTS_STEPS = True

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, eps: float = 1e-10,
                 weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "lr_decay": lr_decay, "eps": eps,
                                  "weight_decay": weight_decay})

    def _check_group(self, group, index):
        super()._check_group(group, index)
        for key in ("lr_decay", "eps", "weight_decay"):
            check_number(self._owner(index), key, group[key])

    def _structure(self, group):
        return {"weight_decay": group["weight_decay"] != 0}

    def _states(self, group):
        return ("square_avg",)

    def _scalar_values(self, group):
        decayed = group["lr"] / (1 + (self.step_count - 1) * group["lr_decay"])
        return {"lr": decayed, "eps": group["eps"], "weight_decay": group["weight_decay"]}

    def _update(self, graph, index, p, w, g):
        if self._built[index]["weight_decay"]:
            g = g + w * self._scalar(graph, index, "weight_decay")
        s = graph.bind(self._state(p, "square_avg"))
        new_s = s + g * g
        assign_rounded(graph, s, new_s)
        delta = g / F.sqrt(new_s + self._scalar(graph, index, "eps"))
        return w - delta * self._scalar(graph, index, "lr")


class Adadelta(Optimizer):
    """Adadelta (Zeiler): ``s = rho * s + (1 - rho) * g * g``; ``d = sqrt(a + eps) /
    sqrt(s + eps) * g``; ``w -= lr * d``; ``a = rho * a + (1 - rho) * d * d``, ``g`` with L2
    weight decay. The numbers are per group.

    >>> opt = Adadelta(net.parameters(), lr=1.0, rho=0.9)
    """

    SCALARS = ("lr", "rho", "one_minus_rho", "eps", "weight_decay")
    COUNTS_STEPS = True

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                 weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "rho": rho, "eps": eps,
                                  "weight_decay": weight_decay})

    def _check_group(self, group, index):
        super()._check_group(group, index)
        check_number(self._owner(index), "rho", group["rho"], 0.0, 1.0)
        for key in ("eps", "weight_decay"):
            check_number(self._owner(index), key, group[key])

    def _structure(self, group):
        return {"weight_decay": group["weight_decay"] != 0}

    def _states(self, group):
        return ("square_avg", "acc_delta")

    def _scalar_values(self, group):
        return {"lr": group["lr"], "rho": group["rho"], "one_minus_rho": 1 - group["rho"],
                "eps": group["eps"], "weight_decay": group["weight_decay"]}

    def _update(self, graph, index, p, w, g):
        def scalar(key):
            return self._scalar(graph, index, key)
        if self._built[index]["weight_decay"]:
            g = g + w * scalar("weight_decay")
        s = graph.bind(self._state(p, "square_avg"))
        a = graph.bind(self._state(p, "acc_delta"))
        new_s = s * scalar("rho") + g * g * scalar("one_minus_rho")
        delta = F.sqrt(a + scalar("eps")) / F.sqrt(new_s + scalar("eps")) * g
        assign_rounded(graph, s, new_s)
        assign_rounded(graph, a, a * scalar("rho") + delta * delta * scalar("one_minus_rho"))
        return w - delta * scalar("lr")
