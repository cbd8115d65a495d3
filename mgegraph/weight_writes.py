"""The weight-write registry: a count per array of the writes to it, so that work done once
from weights (a plan's prologue) reruns only after one of them changed.

"Written" is a count per array (its ``.base`` root, so views of one array share it) that every
writer of a shared weight bumps with ``written(array)``:

- a plan run that assigns a shared param (``CpuExecutable.run``: training steps, eager
  ``opt.step()``'s update plan, a prologue itself);
- an eager assign landing (``eager.dispatch._write``: ``opt.step()`` under a trace, a lazy block
  or a GradManager's recording);
- ``Parameter.value = array`` on a bound parameter and ``Module.load_state_dict``.

A write straight into the array with NumPy (``p.value[...] = 0``, ``np.copyto(p.value, a)``)
is not seen: call ``mgegraph.weight_writes.written(p.value)`` after one (or set
``p.value = a``, which does). Checking the bytes instead would cost a pass over every weight
per run, which is what the prologue is there to save.

Before such a run writes, ``before_writes()`` lets eager mode's lazy blocks run what they left
pending (it reads the weights in place, as they were when it was recorded).

Design: this module imports nothing of mgegraph, so the writers (eager mode, nn, optim, the
backends) and the readers (``planner/passes/prologue.py``, the executables) all reach it from
below, whatever their layer.
"""
from __future__ import annotations

import weakref

import numpy as np

_COUNTS: dict[int, int] = {}   # id of a root array -> writes; the entry dies with the array
_EPOCH = [0]                    # writes of any array: the prologue's quick check


def _root(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def written(array: np.ndarray) -> None:
    """Say that ``array`` (or the array it is a view of) was written: prologues that read it
    rerun before their plan's next run."""
    root = _root(array)
    key = id(root)
    if key not in _COUNTS:
        try:  # the count goes with the array: a later array with its id starts afresh
            weakref.finalize(root, _COUNTS.pop, key, None)
        except TypeError:  # not weakly referenceable: the count stays (a rerun too many)
            pass
        _COUNTS[key] = 0
    _COUNTS[key] += 1
    _EPOCH[0] += 1


# called before a shared weight is written by a plan's run: eager mode's lazy blocks install
# theirs (run what is pending, which reads the weights as they were recorded)
_BEFORE_WRITES: list = []


def on_before_writes(hook) -> None:
    """Call ``hook()`` before every plan run that writes shared weights."""
    _BEFORE_WRITES.append(hook)


def before_writes() -> None:
    """Said by a plan run before it writes shared weights (see ``on_before_writes``)."""
    for hook in _BEFORE_WRITES:
        hook()


def epoch() -> int:
    """How many writes ``written`` has seen, of any array."""
    return _EPOCH[0]


def versions(arrays) -> tuple[int, ...]:
    """The write count of each of ``arrays``."""
    return tuple(_COUNTS.get(id(_root(a)), 0) for a in arrays)
