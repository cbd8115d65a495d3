"""Learning-rate schedules: each ``step()`` sets the optimiser's lr for the next training step."""
from __future__ import annotations

import math

from ..ir.errors import GraphError
from .optimizer import check_number


def _check_steps(owner: str, what: str, value, low: int = 1) -> None:
    if isinstance(value, bool) or not hasattr(type(value), "__index__") or value < low:
        raise GraphError(f"{owner}: {what} must be an int >= {low}, got {value!r}")


class LRScheduler:
    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.epoch = 0

    def step(self) -> float:
        lr = self.lr_at(self.epoch + 1)
        try:
            self.optimizer.lr = lr
        except GraphError as exc:
            raise GraphError(f"{type(self).__name__} at step {self.epoch + 1}: {exc}") from None
        self.epoch += 1
        return self.optimizer.lr

    def lr_at(self, epoch: int) -> float:
        raise NotImplementedError


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1):
        super().__init__(optimizer)
        _check_steps("StepLR", "step_size", step_size)
        self.step_size, self.gamma = step_size, check_number("StepLR", "gamma", gamma)

    def lr_at(self, epoch):
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Cosine decay from the base lr to ``eta_min`` over ``T_max`` steps."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0):
        super().__init__(optimizer)
        _check_steps("CosineAnnealingLR", "T_max", T_max)
        self.T_max, self.eta_min = T_max, check_number("CosineAnnealingLR", "eta_min", eta_min)

    def lr_at(self, epoch):
        t = min(epoch, self.T_max)
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * t / self.T_max)) / 2


class LinearWarmup(LRScheduler):
    """Ramp linearly from ``start_factor`` x lr to lr over ``warmup_steps``, then hand over to
    ``after`` (another schedule of the same optimiser) if given."""

    def __init__(self, optimizer, warmup_steps: int, start_factor: float = 0.0, after=None):
        super().__init__(optimizer)
        _check_steps("LinearWarmup", "warmup_steps", warmup_steps, low=0)
        start_factor = check_number("LinearWarmup", "start_factor", start_factor)
        self.warmup_steps, self.start_factor, self.after = warmup_steps, start_factor, after
        optimizer.lr = self.lr_at(0)

    def lr_at(self, epoch):
        if epoch < self.warmup_steps:
            f = self.start_factor + (1 - self.start_factor) * epoch / self.warmup_steps
            return self.base_lr * f
        if self.after is not None:
            return self.after.lr_at(epoch - self.warmup_steps)
        return self.base_lr
