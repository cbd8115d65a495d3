"""Errors that point at the user's code, not at mgegraph's internals."""
from __future__ import annotations

import functools
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The demo ships inside the package but is a user's program: its lines are the ones to name
# (`mgegraph demo` would otherwise place every node at runpy's frame)
_USER_CODE = {os.path.join(_PACKAGE_DIR, "demo", "__init__.py")}


@functools.lru_cache(maxsize=4096)  # every node asks, over a handful of files
def _inside_package(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE_DIR + os.sep) and path not in _USER_CODE


def user_location() -> str:
    """file:line of the innermost caller outside the mgegraph package."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _inside_package(filename):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return "<unknown>"


class GraphError(ValueError):
    """A graph could not be built: bad shapes, dtypes, attributes or a foreign Var."""


class OpError(GraphError, RuntimeError):
    """An op refused its inputs; the message names the op, the input types and the user's line.
    Also a RuntimeError, as MegEngine's error for an op that refuses its inputs is (a
    ``ValueError`` handler catches it as before)."""

    def __init__(self, op: str, in_types, reason: str, location: str):
        self.op, self.in_types, self.reason, self.location = op, tuple(in_types), reason, location
        types = ", ".join(str(t) for t in self.in_types) or "no inputs"
        super().__init__(f"{op}({types}): {reason} (node made at {location})")


class TraceError(GraphError, RuntimeError):
    """What a traced function does that its plan cannot, or a ``dump`` it cannot write
    (MegEngine's ``jit.TraceError``; a RuntimeError too, as MegEngine's refusals of a trace's
    run or dump are)."""


class FeedError(ValueError):
    """plan.run got feeds that do not match the plan's inputs."""


class KernelError(RuntimeError):
    """A kernel failed at run time (for example an index out of range)."""


class KernelMemoryError(KernelError, MemoryError):
    """A kernel could not allocate its scratch memory; also a MemoryError."""


class NumericsError(KernelError):
    """A plan compiled with ``check_numerics=True`` produced a NaN or an infinity: the message
    names the first instruction that did (index, op, output slot, the user's line) and any feed
    that was already non-finite."""


class DispatchError(LookupError):
    """No kernel is registered for an (op, device, dtype)."""


class ModelFormatError(GraphError):
    """A model file (``mg.load``, ``mg.runtime.load``) is not one mgegraph wrote or can run:
    the message names what is wrong (a member, a node, an attribute, a limit); nothing from the
    file ran."""


class ProfileError(ValueError):
    """``mg.profile`` or one of its reports got an argument it cannot use (a negative warmup,
    an unknown ``sort_by``); the message names the argument and what it takes."""
