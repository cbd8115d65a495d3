"""Learning-rate schedules: each ``step()`` sets every parameter group's lr for the next epoch
(or training step), from the group's ``initial_lr``.

As MegEngine's, a schedule applies its epoch 0 when it is made (``current_epoch=-1`` then
``step()``), and ``step()`` moves to the next epoch; ``lr_at(epoch, base_lr)`` is the rule.
"""
from __future__ import annotations

import math
from bisect import bisect_right

from ..ir.errors import GraphError
from .optimizer import Optimizer, check_number


def _check_steps(owner: str, what: str, value, low: int = 1) -> None:
    if isinstance(value, bool) or not hasattr(type(value), "__index__") or value < low:
        raise GraphError(f"{owner}: {what} must be an int >= {low}, got {value!r}")


class LRScheduler:
    """MegEngine's base: ``LRScheduler(optimizer, current_epoch=-1)``; a subclass writes
    ``lr_at(epoch, base_lr)`` (or MegEngine's ``get_lr()``, one lr per group) and names its
    settings in ``STATE`` (what ``state_dict`` keeps besides the epoch).

    >>> sched = MultiStepLR(opt, milestones=[30, 60]); sched.step()
    """

    STATE: tuple[str, ...] = ()

    def __init__(self, optimizer: Optimizer, current_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise GraphError(f"{type(self).__name__} schedules an Optimizer, got "
                             f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self.current_epoch = current_epoch
        for index, group in enumerate(optimizer.param_groups):
            if current_epoch == -1:
                group.setdefault("initial_lr", group["lr"])
            elif "initial_lr" not in group:
                raise GraphError(f"{type(self).__name__}: resuming at epoch {current_epoch} "
                                 f"needs param_groups[{index}]['initial_lr']")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.step()

    @property
    def epoch(self) -> int:
        return self.current_epoch

    @property
    def base_lr(self) -> float:
        """The first group's initial lr; setting it sets every group's."""
        return self.base_lrs[0]

    @base_lr.setter
    def base_lr(self, value: float) -> None:
        self.base_lrs = [value] * len(self.base_lrs)

    def get_lr(self) -> list[float]:
        """The lr of every group at ``current_epoch``."""
        return [self.lr_at(self.current_epoch, base) for base in self.base_lrs]

    def lr_at(self, epoch: int, base_lr: float) -> float:
        raise NotImplementedError

    def step(self, epoch: int | None = None) -> float:
        """Move to ``epoch`` (the next one by default) and set every group's lr; returns the
        first group's. A rate that is not a finite number >= 0 is refused (a GraphError naming
        the schedule and the epoch) and leaves every group as it was."""
        epoch = self.current_epoch + 1 if epoch is None else epoch
        previous, self.current_epoch = self.current_epoch, epoch
        try:
            lrs = [check_number(type(self.optimizer).__name__, "lr", lr) for lr in self.get_lr()]
        except GraphError as exc:
            self.current_epoch = previous
            raise GraphError(f"{type(self).__name__} at step {epoch}: {exc}") from None
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        return self.optimizer.lr

    def state_dict(self) -> dict:
        """The epoch, the initial rates and the settings ``STATE`` names."""
        return {"current_epoch": self.current_epoch, "base_lrs": list(self.base_lrs),
                **{key: getattr(self, key) for key in self.STATE}}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore what ``state_dict`` gave (every key it names must be there)."""
        keys = ("current_epoch", *self.STATE)
        missing = [key for key in keys if key not in state_dict]
        if missing:
            raise GraphError(f"{type(self).__name__}.load_state_dict: no {missing} in the "
                             "state dict")
        for key in keys:
            setattr(self, key, state_dict[key])
        self.base_lrs = list(state_dict.get("base_lrs", self.base_lrs))


class MultiStepLR(LRScheduler):
    """MegEngine's: the lr times ``gamma`` at each of the increasing ``milestones`` passed
    (``base_lr * gamma ** bisect_right(milestones, epoch)``)."""

    STATE = ("milestones", "gamma")

    def __init__(self, optimizer, milestones, gamma: float = 0.1, current_epoch: int = -1):
        milestones = list(milestones)
        if milestones != sorted(milestones):
            raise GraphError(f"MultiStepLR: milestones must increase, got {milestones}")
        self.milestones = milestones
        self.gamma = check_number("MultiStepLR", "gamma", gamma)
        super().__init__(optimizer, current_epoch)

    def lr_at(self, epoch, base_lr):
        return base_lr * self.gamma ** bisect_right(self.milestones, epoch)


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps."""

    STATE = ("step_size", "gamma")

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, current_epoch: int = -1):
        _check_steps("StepLR", "step_size", step_size)
        self.step_size, self.gamma = step_size, check_number("StepLR", "gamma", gamma)
        super().__init__(optimizer, current_epoch)

    def lr_at(self, epoch, base_lr):
        return base_lr * self.gamma ** (epoch // self.step_size)


class CosineAnnealingLR(LRScheduler):
    """Cosine decay from the base lr to ``eta_min`` over ``T_max`` steps."""

    STATE = ("T_max", "eta_min")

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, current_epoch: int = -1):
        _check_steps("CosineAnnealingLR", "T_max", T_max)
        self.T_max = T_max
        self.eta_min = check_number("CosineAnnealingLR", "eta_min", eta_min)
        super().__init__(optimizer, current_epoch)

    def lr_at(self, epoch, base_lr):
        t = min(epoch, self.T_max)
        cosine = (1 + math.cos(math.pi * t / self.T_max)) / 2
        return self.eta_min + (base_lr - self.eta_min) * cosine


class LinearWarmup(LRScheduler):
    """Ramp linearly from ``start_factor`` x lr to lr over ``warmup_steps``, then hand over to
    ``after`` (another schedule of the same optimiser) if given."""

    STATE = ("warmup_steps", "start_factor")

    def __init__(self, optimizer, warmup_steps: int, start_factor: float = 0.0, after=None,
                 current_epoch: int = -1):
        _check_steps("LinearWarmup", "warmup_steps", warmup_steps, low=0)
        self.start_factor = check_number("LinearWarmup", "start_factor", start_factor)
        self.warmup_steps, self.after = warmup_steps, after
        super().__init__(optimizer, current_epoch)

    def lr_at(self, epoch, base_lr):
        if epoch < self.warmup_steps:
            return base_lr * (self.start_factor +
                              (1 - self.start_factor) * epoch / self.warmup_steps)
        if self.after is not None:
            return self.after.lr_at(epoch - self.warmup_steps, base_lr)
        return base_lr
