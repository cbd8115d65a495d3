"""``trace(symbolic_shape=...)``: a recording whose arguments' dimensions are names.

One recording then serves every size of those dimensions: its graph's inputs name them
(``x: f32[batch, 784]``), ``mg.compile`` makes it a ``SymbolicPlan``, and a call at a new
size specialises that plan instead of running the Python again.

Design: the eager run that records computes with numbers (its kernels need them), while the
graph it builds must carry the names. So, during such a recording (``MODE.symbolic_trace``):

- a tensor whose value in the recorded graph has a named dimension is a ``NamedShapeTensor``:
  its ``shape`` and ``size`` are those of its graph value, so ``x.reshape(x.shape[0], -1)`` and
  ``F.flatten(x, 1)`` record ``(batch, -1)``. The function gets its tensor arguments as such
  views of themselves; an op's output changes class when it is recorded and changes back when
  the recording ends (ordinary tensors keep their class, and eager speed, throughout);
- eager dispatch runs each op with the names in its attributes replaced by the recording's
  numbers (``bound_attrs``), and shows the recorders the attributes with the names;
- Python that needs a number (``range(x.shape[0])``, ``if x.shape[0] > 3``, ``np.zeros(
  x.shape)``, ``x.shape[0] / 2.0``) meets ``UndecidedDimError`` (or Python's TypeError for a
  Dim), raised again as ``SymbolicShapeError`` naming the user's line, and mgegraph's own
  line where that is the one (``needing_numbers``). Equality does not raise (``ir.dims``):
  ``x.shape[0] == 1`` is False, "not provably equal", even in a recording at batch 1, so such
  a branch takes its general side.

Which dimensions: ``symbolic_shape=True`` names dimension 0 of every tensor argument (a
Parameter passed as an argument keeps its shape: it is a weight). Arguments whose first sizes
are equal in the call share a name: ``batch``, then ``batch1``, ``batch2``... for other sizes,
in argument order. The names are part of the cache key, so the grouping is too: a later call
whose sizes group otherwise (images of 7 and labels of 5, where both were 32) records again
with its own names, instead of failing to bind. A dict names dimensions explicitly:
``{"x": {0: "batch", 1: "seq"}, "y": {0: "batch"}}`` (argument names as ``traced.plans``
keys spell them: ``args0``, ``batch[0]``); a name used twice must have one size per call.

``compile_module`` and ``compile_train_step`` name their inputs' dimensions by the same rules
(``dynamic=``, over ``input0, input1...``), and say a model's Python that needs a named size
with the same error: a graph's Var shows the names in its shape already.
"""
from __future__ import annotations

import contextlib
import os
import sys
import traceback

import numpy as np

from ..ir import dims
from ..ir.dims import Dim, DimError, UndecidedDimError
from ..ir.errors import GraphError
from ..ir.specialize import substitute_value
from .mode import MODE
from .tensor import Tensor, wrap_view

BATCH = "batch"  # the first name symbolic_shape=True (and compile_module's dynamic=True) gives
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIMS_FILE = os.path.abspath(dims.__file__)  # where UndecidedDimError is raised: not the news
_CONTEXTLIB_FILE = os.path.abspath(contextlib.__file__)


class SymbolicShapeError(UndecidedDimError):
    """Python in a function traced with ``symbolic_shape`` (or a model compiled with
    ``dynamic=``) needs the number of a named dimension (a loop, a branch or an array size on
    ``x.shape[0]``)."""


TRACE = "trace(symbolic_shape=...)"  # how messages name the option (compile_module: dynamic)


def check_spec(spec, what: str = TRACE):
    """The option as given (False, True or ``{argument: {axis: name}}``), checked; ``what``
    names it in messages."""
    if spec is None or isinstance(spec, bool):
        return bool(spec)
    if not isinstance(spec, dict):
        raise GraphError(f"{what}: True (dimension 0 of every tensor argument) or a dict "
                         f"{{argument: {{axis: name}}}}, got {spec!r:.60}")
    checked = {}
    for argument, axes in spec.items():
        if not isinstance(argument, str) or not isinstance(axes, dict) or not axes:
            raise GraphError(f"{what}: each entry is argument name -> {{axis: name}}, got "
                             f"{argument!r:.40}: {axes!r:.60}")
        checked[argument] = {_axis(argument, axis, what): _name(argument, name, what)
                             for axis, name in axes.items()}
    return checked


def _axis(argument: str, axis, what: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise GraphError(f"{what}: {argument}'s axis {axis!r} is not an int")
    return int(axis)


def _name(argument: str, name, what: str) -> str:
    try:
        if not isinstance(name, str):  # (Dim(3) is the constant 3: no name at all)
            raise DimError(name)
        Dim(name)
    except DimError:
        raise GraphError(f"{what}: {argument}'s dimension name {name!r:.70} is not an "
                         "identifier") from None
    return name


def name_dims(spec, arguments: dict, what: str = TRACE) -> tuple[dict, dict]:
    """The named axes of a call's arguments (``{argument: {axis: name}}``) and the names'
    sizes in it (``{name: size}``), for ``spec`` as ``check_spec`` gives it."""
    if not spec:
        return {}, {}
    axes = _first_dims(arguments) if spec is True else _given_dims(spec, arguments, what)
    sizes: dict[str, int] = {}
    for argument, named in axes.items():
        shape = arguments[argument].shape
        for axis, name in named.items():
            if shape[axis] < 1:
                raise GraphError(f"{what}: {argument}'s axis {axis} is named {name}, but its "
                                 f"size is {shape[axis]} (a named size is at least 1)")
            if sizes.setdefault(name, shape[axis]) != shape[axis]:
                raise GraphError(f"{what}: {name} is {sizes[name]} in one argument and "
                                 f"{shape[axis]} in {argument} {tuple(shape)}: a name has "
                                 "one size")
    return axes, sizes


def _is_data(value) -> bool:
    """A tensor argument that may take named dimensions (not a Parameter: a weight)."""
    return isinstance(value, (Tensor, np.ndarray)) and not hasattr(value, "bind_to")


def _first_dims(arguments: dict) -> dict:
    names: dict[int, str] = {}  # size -> its name, in order of first appearance
    axes = {}
    for argument, value in arguments.items():
        if _is_data(value) and value.ndim and value.shape[0] >= 1:
            size = value.shape[0]
            axes[argument] = {0: names.setdefault(size, f"{BATCH}{len(names) or ''}")}
    return axes


def _given_dims(spec: dict, arguments: dict, what: str) -> dict:
    axes = {}
    for argument, named in spec.items():
        value = arguments.get(argument)
        if not _is_data(value):
            tensors = sorted(k for k, v in arguments.items() if _is_data(v))
            raise GraphError(f"{what}: {argument!r} is not a tensor argument here (those are "
                             f"{', '.join(tensors) or 'none'})")
        ndim = value.ndim
        for axis in named:
            if not -ndim <= axis < ndim:
                raise GraphError(f"{what}: {argument} has {ndim} dimensions, so it has no "
                                 f"axis {axis}")
        axes[argument] = {axis % ndim: name for axis, name in named.items()}
    return axes


def named_shape(shape: tuple, axes: dict | None) -> tuple:
    """``shape`` with the sizes at ``axes`` ({axis: name}) replaced by the names."""
    if not axes:
        return tuple(shape)
    return tuple(Dim(axes[i]) if i in axes else size for i, size in enumerate(shape))


class NamedShapeTensor(Tensor):
    """A Tensor recorded by a symbolic-shape trace: while that recording runs on this thread,
    ``shape`` and ``size`` are the ones of its value in the recorded graph (names in them);
    anywhere else, its numbers."""

    __slots__ = ()

    @property
    def shape(self) -> tuple:
        return self._recorded_type().shape

    @property
    def size(self):
        return self._recorded_type().size

    def _recorded_type(self):
        tracer = MODE.symbolic_trace
        var = tracer.vars.get(self.id) if tracer is not None else None
        return self.type if var is None else var.type


def named_view(t: Tensor) -> NamedShapeTensor:
    """A view of ``t``'s array that a symbolic recording's function gets instead of ``t``."""
    view = wrap_view(t._array(), t)
    view.__class__ = NamedShapeTensor
    return view


def bound_attrs(attrs: dict, bindings: dict) -> dict:
    """``attrs`` with the recording's names replaced by their sizes (``attrs`` itself when it
    names none): what the eager kernel of a node recorded with names runs with."""
    bound = {k: substitute_value(v, bindings) for k, v in attrs.items()}
    return attrs if bound == attrs else bound


@contextlib.contextmanager
def needing_numbers(who: str, names, axes: dict):
    """Python in the block that needs the number of one of ``names`` (``range(x.shape[0])``,
    ``if x.shape[0] > 3``, ``n / (n - 1)``) raises ``SymbolicShapeError`` saying so for
    ``who`` (``"trace(symbolic_shape=...): f"``, ``"compile_module(dynamic=...)"``); another
    GraphError (an op refusing a name) gets a note of which ``axes`` were named."""
    if not names:
        yield
        return
    try:
        yield
    except UndecidedDimError as exc:
        raise _needs_number(exc, who, names) from exc
    except TypeError as exc:  # Python's own: a Dim where only an int or a float works
        if "'Dim'" not in str(exc):
            raise
        raise _needs_number(exc, who, names) from exc
    except GraphError as exc:
        named = "; ".join(f"{argument}'s axis {', '.join(map(str, dims))} as "
                          f"{', '.join(dims.values())}" for argument, dims in axes.items())
        exc.add_note(f"{who} named {named}: a dimension that is not a batch can stay a "
                     "number when only the others are named ({argument: {axis: name}})")
        raise


def _needs_number(exc: Exception, who: str, names) -> SymbolicShapeError:
    return SymbolicShapeError(
        f"{who} needs the number of a named dimension ({', '.join(sorted(names))}) at "
        f"{_where(exc)}: {exc}. The graph serves every size of its names, so Python there "
        "cannot loop, branch, size an array or compute a float on one: compute with the "
        "shape itself (x.reshape(x.shape[0], -1), F.flatten(x, 1)), or name fewer dimensions")


def _where(exc: BaseException) -> str:
    """file:line (and text) of the innermost frame of ``exc``'s traceback outside mgegraph (or
    of the user's call into it, when the whole traceback is mgegraph's), and of the innermost
    one inside it below that, past ``ir/dims.py``: the op or the layer that needed the number."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [_ours(f.filename) for f in frames]
    last_user = max((i for i, ours in enumerate(inside) if not ours), default=-1)
    where = _frame_text(frames[last_user]) if last_user >= 0 else _caller()
    below = [f for f in frames[last_user + 1:] if os.path.abspath(f.filename) != _DIMS_FILE]
    return f"{where}, in mgegraph's {_frame_text(below[-1])}" if below else where


def _ours(filename: str) -> bool:
    # contextlib's frames are how the error reached needing_numbers, not the user's code
    path = os.path.abspath(filename)
    return path.startswith(_PACKAGE_DIR + os.sep) or path == _CONTEXTLIB_FILE


def _caller() -> str:
    """file:line of the innermost frame on the stack outside mgegraph (and contextlib)."""
    frame = sys._getframe(1)
    while frame is not None and _ours(frame.f_code.co_filename):
        frame = frame.f_back
    return "<unknown>" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _frame_text(frame) -> str:
    return f"{frame.filename}:{frame.lineno} ({(frame.line or '').strip()})"
