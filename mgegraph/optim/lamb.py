"""LAMB (You et al.): Adam's step scaled per parameter by a trust ratio, MegEngine's rule."""
from __future__ import annotations

import math

from .. import functional as F
from .adam import Adam
from .optimizer import assign_rounded


class LAMB(Adam):
    """``delta = m_hat / (sqrt(v_hat) + eps) + weight_decay * w``; ``w -= lr * r * delta`` with
    the trust ratio ``r = ||w|| / ||delta||`` when ``weight_decay > 0`` or ``always_adapt``
    and both norms are positive, else 1 (MegEngine's LAMB). ``bias_correction=False`` uses
    the raw moments.

    >>> opt = LAMB(net.parameters(), lr=1e-3, weight_decay=0.01)
    """

    SCALARS = Adam.SCALARS + ("inv_bc1",)

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 bias_correction: bool = True, weight_decay: float = 0.0,
                 always_adapt: bool = False):
        self.bias_correction, self.always_adapt = bool(bias_correction), bool(always_adapt)
        super().__init__(params, lr, betas, eps, weight_decay)

    def _scalar_values(self, group):
        values = super()._scalar_values(group)
        (b1, b2), t = group["betas"], self.step_count
        corrected = self.bias_correction
        values["inv_bc1"] = 1 / (1 - b1 ** t) if corrected else 1.0
        values["inv_sqrt_bc2"] = 1 / math.sqrt(1 - b2 ** t) if corrected else 1.0
        return values

    def _structure(self, group):
        return {"weight_decay": group["weight_decay"] != 0}

    def _update(self, graph, index, p, w, g):
        def scalar(key):
            return self._scalar(graph, index, key)
        m, v = graph.bind(self._state(p, "exp_avg")), graph.bind(self._state(p, "exp_avg_sq"))
        new_m = m * scalar("beta1") + g * scalar("one_minus_beta1")
        new_v = v * scalar("beta2") + g * g * scalar("one_minus_beta2")
        assign_rounded(graph, m, new_m)
        assign_rounded(graph, v, new_v)
        denom = F.sqrt(new_v) * scalar("inv_sqrt_bc2") + scalar("eps")
        delta = new_m * scalar("inv_bc1") / denom
        adapt = self.always_adapt
        if self._built[index]["weight_decay"]:
            delta = delta + w * scalar("weight_decay")
            adapt = True  # a positive decay (the group's numbers are checked >= 0)
        if adapt:
            w_norm, d_norm = F.sqrt(F.sum(w * w)), F.sqrt(F.sum(delta * delta))
            usable = F.minimum(w_norm, d_norm) > 0  # both norms positive
            ratio = F.where(usable, w_norm / F.where(usable, d_norm, 1.0), 1.0)
            delta = delta * ratio
        return w - delta * scalar("lr")
