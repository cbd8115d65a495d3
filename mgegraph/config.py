"""MegEngine's ``megengine.config``: the process-wide settings MegEngine scripts read and set.

``mg.config.async_level = 0`` and the others are accepted, checked and read back as
MegEngine's are; none changes what mgegraph computes, each for a reason it says:

- ``async_level`` (0, 1 or 2; MegEngine's default 2): how late MegEngine may raise an op's
  error. mgegraph runs each eager op when it is called and raises there, which is level 0's
  behaviour at every level.
- ``deterministic_kernel`` (bool): MegEngine then picks only reproducible algorithms.
  mgegraph's CPU kernels give the same bits run to run on a given thread count already.
- ``benchmark_kernel`` (bool): MegEngine's fast-run, timing algorithms on first use. mgegraph
  measures when a plan is compiled with ``mg.compile(..., tune="measure")`` (``tuning.py``);
  eager ops run the rules' choice.
- ``disable_memory_forwarding`` (bool): whether MegEngine may share storage between tensors.
  mgegraph's eager views share bytes, but no tensor's value ever changes, so sharing is
  invisible.

Design: the settings are one frozen ``Settings`` value, replaced whole by each assignment, and
the module's class gives them as attributes (Python's documented way to give a module
properties), so ``config.async_level = 3`` is refused as MegEngine refuses it.

>>> import mgegraph.config as config
>>> config.async_level = 0; config.async_level
0
"""
from __future__ import annotations

import dataclasses
import sys
import types

__all__ = ["Settings", "current"]  # and each field of Settings, an attribute of the module


@dataclasses.dataclass(frozen=True)
class Settings:
    async_level: int = 2
    deterministic_kernel: bool = False
    benchmark_kernel: bool = False
    disable_memory_forwarding: bool = False

    def __post_init__(self):
        if type(self.async_level) is not int or not 0 <= self.async_level <= 2:
            raise ValueError(f"config.async_level must be 0, 1 or 2, got {self.async_level!r}")
        for field in ("deterministic_kernel", "benchmark_kernel", "disable_memory_forwarding"):
            value = getattr(self, field)
            if not isinstance(value, (bool, int)):
                raise TypeError(f"config.{field} must be a bool, got {value!r}")
            object.__setattr__(self, field, bool(value))


_current = Settings()


def current() -> Settings:
    """The settings now."""
    return _current


class _ConfigModule(types.ModuleType):
    """This module, with each field of ``Settings`` as an attribute to read and set."""

    def __getattr__(self, name):
        if name in _FIELDS:
            return getattr(_current, name)
        raise AttributeError(f"module 'mgegraph.config' has no attribute {name!r}")

    def __setattr__(self, name, value):
        global _current
        if name in _FIELDS:
            _current = dataclasses.replace(_current, **{name: value})
        else:
            super().__setattr__(name, value)


_FIELDS = frozenset(f.name for f in dataclasses.fields(Settings))
sys.modules[__name__].__class__ = _ConfigModule
