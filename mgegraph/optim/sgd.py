"""SGD with momentum, Nesterov momentum and L2 weight decay (MegEngine's and PyTorch's rule)."""
from __future__ import annotations

from ..ir.errors import GraphError
from .optimizer import Optimizer, assign_rounded, check_number, required


class SGD(Optimizer):
    """``buf = momentum * buf + (g + weight_decay * w)``; ``w -= lr * buf`` (Nesterov:
    ``lr * (g + momentum * buf)``). ``momentum`` and ``weight_decay`` are per group.

    >>> opt = SGD(net.parameters(), lr=0.1, momentum=0.9)
    """

    SCALARS = ("lr", "momentum", "weight_decay")

    def __init__(self, params, lr: float = required, momentum: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0):
        if nesterov and check_number("SGD", "momentum", momentum) <= 0:
            raise GraphError("SGD: nesterov needs momentum > 0")
        self.nesterov = bool(nesterov)
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    def _check_group(self, group, index):
        super()._check_group(group, index)
        for key in ("momentum", "weight_decay"):
            check_number(self._owner(index), key, group[key])

    def _structure(self, group):
        return {"momentum": group["momentum"] != 0, "weight_decay": group["weight_decay"] != 0}

    def _states(self, group):
        return ("momentum_buffer",) if group["momentum"] != 0 else ()

    def _scalar_values(self, group):
        return {key: group[key] for key in self.SCALARS}

    def _update(self, graph, index, p, w, g):
        structure = self._built[index]
        if structure["weight_decay"]:
            g = g + w * self._scalar(graph, index, "weight_decay")
        if structure["momentum"]:
            momentum = self._scalar(graph, index, "momentum")
            buf = graph.bind(self._state(p, "momentum_buffer"))
            new_buf = buf * momentum + g
            assign_rounded(graph, buf, new_buf)
            g = g + new_buf * momentum if self.nesterov else new_buf
        return w - g * self._scalar(graph, index, "lr")
