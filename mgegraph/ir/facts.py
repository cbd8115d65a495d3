"""The facts shape rules discover about named dimensions while a node is made.

An op's shape rule is a pure function of its input types and attributes. When it meets two
named sizes that must agree (``batch`` of one input against ``n`` of another) it cannot know
whether they will; it calls ``require_equal`` (or ``require_at_least``), and the fact goes to
the ``Constraints`` of the graph the node is being added to, with the op's name and the user's
line. ``Graph.add_node`` opens that record around the rule (``recording``); the specialised
plan checks every fact when the fed shapes bind the names (a ``FeedError`` naming the fact,
the op and the line). A rule called outside a graph (a test, the planner's type check of a
graph whose shapes are numbers) records nothing: with numbers a fact is decided on the spot.
"""
from __future__ import annotations

import contextlib
import threading

from .dims import Constraints, Dim

_STATE = threading.local()  # two threads may build two graphs at once


@contextlib.contextmanager
def recording(constraints: Constraints, op: str, location: str):
    """Send the facts rules find to ``constraints``, as found by ``op`` at ``location``."""
    previous = getattr(_STATE, "current", None)
    _STATE.current = (constraints, op, location)
    try:
        yield
    finally:
        _STATE.current = previous


def require_equal(a, b, what: str) -> None:
    """``a == b`` must hold: decided now for numbers (a ValueError naming ``what``), recorded
    for names."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        if a != b:
            raise ValueError(f"{what}: {a} and {b} differ")
        return
    constraints, op, location = _current(what)
    constraints.equal(a, b, op=op, location=location)


def require_at_least(dim, low, what: str) -> None:
    """``dim >= low`` must hold: decided now where the form decides it, else recorded."""
    if not isinstance(dim, Dim) and not isinstance(low, Dim):
        if dim < low:
            raise ValueError(f"{what}: {dim} is less than {low}")
        return
    constraints, op, location = _current(what)
    constraints.at_least(dim, low, op=op, location=location)


def _current(what: str) -> tuple:
    # outside a graph a fact is still checked for being impossible, then dropped
    current = getattr(_STATE, "current", None)
    return current if current is not None else (Constraints(), what, "<no graph>")
