"""Automatic mixed precision, MegEngine's ``megengine.amp``: ``autocast``, ``GradScaler``, the
module properties ``amp.enabled``, ``low_prec_dtype`` and ``high_prec_dtype``, and the NHWC
format tags of ``convert_format.py``.

Under ``autocast`` the GEMM-like ops (matmul, linear, the convolutions) take their operands in
``low_prec_dtype`` (float16 or bfloat16) and softmax, the norms and the losses take a half input
in ``high_prec_dtype``, batch norm its data low and its parameters high (``mgegraph.ops.autocast``
says which and why); the weights stay in
float32, and a weight's gradient comes back in float32 through its cast. ``GradScaler``
multiplies the loss's gradient by a scale so that small float16 gradients do not flush to zero,
divides the weights' gradients by it again, and drops a step's gradients (the optimiser then
skips those weights) when any of them is not finite, backing the scale off.

>>> scaler = amp.GradScaler()
>>> @amp.autocast()
... def train_step(x, y):
...     with gm:
...         loss = F.cross_entropy(model(x), y)
...         scaler.backward(gm, loss)
...     opt.step().clear_grad()
"""
from __future__ import annotations

import functools
import sys
import types

import numpy as np

from .. import functional as F
from ..eager.grad_manager import GradManager
from ..ir.errors import GraphError, user_location
from ..ops import autocast as _state
from .convert_format import convert_module_format, convert_tensor_format

__all__ = ["GradScaler", "autocast", "convert_module_format", "convert_tensor_format"]


class autocast:
    """Mixed precision for the block or the decorated function, on this thread.

    ``enabled`` switches it; ``low_prec_dtype`` is float16 or bfloat16, ``high_prec_dtype``
    float32 or float64. Blocks nest: each restores what it found."""

    def __init__(self, enabled: bool = True, low_prec_dtype="float16",
                 high_prec_dtype="float32"):
        self.state = _state.make(enabled, low_prec_dtype, high_prec_dtype)
        self._saved: list = []

    def __enter__(self):
        self._saved.append(_state.set_current(self.state))
        return self

    def __exit__(self, *exc) -> None:
        _state.set_current(self._saved.pop())

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with autocast(self.state.enabled, self.state.low, self.state.high):
                return fn(*args, **kwargs)
        return wrapped


def _state_property(field: str, shown):
    def read(_module):
        return shown(getattr(_state.current(), field))

    def write(_module, value):
        state = _state.current()
        values = {"enabled": state.enabled, "low": state.low, "high": state.high, field: value}
        _state.set_current(_state.make(values["enabled"], values["low"], values["high"]))
    return property(read, write)


class _AmpModule(types.ModuleType):
    """MegEngine's module properties ``amp.enabled``, ``amp.low_prec_dtype`` and
    ``amp.high_prec_dtype``: this thread's autocast state, read and set (``amp.enabled = True``
    switches autocast on until it is set False, as ``with autocast():`` does for a block)."""

    enabled = _state_property("enabled", bool)
    low_prec_dtype = _state_property("low", lambda d: d.name)
    high_prec_dtype = _state_property("high", lambda d: d.name)


sys.modules[__name__].__class__ = _AmpModule


class GradScaler:
    """Loss scaling for float16 training in eager mode (MegEngine's arguments and rules).

    ``backward(gm, y)`` runs ``gm.backward`` with ``y``'s gradient multiplied by
    ``scale_factor``, then (``unscale_grad``) divides every attached tensor's ``.grad`` by it,
    dropping them all when any is not finite, and (``update_scale``) updates the scale: times
    ``backoff_factor`` after such a step, times ``growth_factor`` after ``growth_interval``
    finite steps in a row; ``growth_interval=0`` keeps it fixed and never checks."""

    def __init__(self, init_scale: float = 2.0 ** 4, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        for name, value in (("init_scale", init_scale), ("growth_factor", growth_factor),
                            ("backoff_factor", backoff_factor)):
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise GraphError(f"GradScaler: {name} must be a positive finite number, got "
                                 f"{value!r} (at {user_location()})")
        if isinstance(growth_interval, bool) or not isinstance(growth_interval, int) \
                or growth_interval < 0:
            raise GraphError(f"GradScaler: growth_interval must be an int >= 0, got "
                             f"{growth_interval!r} (at {user_location()})")
        self.scale_factor = float(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self._growth_tracker = 0
        self._found_non_finite = False

    def backward(self, gm: GradManager, y=None, dy=None, *, unscale_grad: bool = True,
                 update_scale="if_unscale_grad") -> GradScaler:
        seed = F.full_like(y, self.scale_factor) if dy is None else dy * self.scale_factor
        gm.backward(y, seed)
        if unscale_grad:
            self.unscale(gm.attached_tensors())
            if update_scale:
                self.update()
        return self

    def unscale(self, grad_tensors) -> GradScaler:
        """Divide each tensor's ``.grad`` by the scale; all are dropped (``.grad = None``) when
        any is not finite."""
        tensors = [t for t in grad_tensors if t is not None and t.grad is not None]
        inv_scale = 1.0 / self.scale_factor
        if self.growth_interval and not all(np.isfinite(t.grad.numpy().astype(np.float32)).all()
                                            for t in tensors):
            self._found_non_finite = True
            for t in tensors:
                t.grad = None
            return self
        for t in tensors:
            t.grad = t.grad * inv_scale  # a Python float takes the gradient's dtype
        return self

    def update(self, new_scale: float | None = None) -> GradScaler:
        """Set the scale for the next step (``new_scale``, or by the rule above)."""
        if self.growth_interval == 0:
            return self
        if new_scale is not None:
            self.scale_factor = float(new_scale)
        elif self._found_non_finite:
            self.scale_factor *= self.backoff_factor
            self._growth_tracker = 0
        else:
            self._growth_tracker += 1
            if self._growth_tracker >= self.growth_interval:
                self.scale_factor *= self.growth_factor
                self._growth_tracker = 0
        self._found_non_finite = False
        return self

    def state_dict(self) -> dict:
        return {"scale_factor": self.scale_factor, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        self.scale_factor = float(state["scale_factor"])
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._growth_tracker = int(state["_growth_tracker"])
