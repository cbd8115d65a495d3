"""What an ONNX op's converter sees while the importer walks the graph (``Context``): the
mgegraph Graph being built, the opset, the node being converted, and the ways to read the
node's inputs; and the error a converter raises (``NotSupported``), which names the node.

A converter is ``convert(cx, inputs, attrs) -> outputs``: ``inputs`` a list of ``Var``,
``np.ndarray`` (a value known at import), ``ShapeValue`` (a shape known at import as named
dims) or None (a missing optional input), ``attrs`` the
node's attributes as a dict; each output a Var or an array. The converters are the families'
tables (``convert_math``, ``convert_nn``, ``convert_shape``) merged in ``converters``.

Design: a known array turns into a graph value only when a converter needs it as one
(``Context.var``), once per array: a float initializer becomes a param named as in the file, so
``freeze`` and weight sharing work on it, any other array a const.
"""
from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
from onnx import TensorProto

from ..ir.graph import Graph, Var
from ..ir.types import is_float
from . import ImportLimits, OnnxImportError, checks
from .shape_values import ShapeValue, materialize

# the ONNX element types mgegraph has
DTYPES = {TensorProto.FLOAT: np.dtype(np.float32), TensorProto.DOUBLE: np.dtype(np.float64),
          TensorProto.INT32: np.dtype(np.int32), TensorProto.INT64: np.dtype(np.int64),
          TensorProto.BOOL: np.dtype(np.bool_),
          # the small integers (images arrive as uint8)
          TensorProto.UINT8: np.dtype(np.uint8), TensorProto.INT8: np.dtype(np.int8),
          TensorProto.INT16: np.dtype(np.int16),
          # the half types (bfloat16 is ml_dtypes', which onnx's numpy_helper reads it as)
          TensorProto.FLOAT16: np.dtype(np.float16),
          TensorProto.BFLOAT16: np.dtype(ml_dtypes.bfloat16)}


class NotSupported(OnnxImportError):
    """A node uses a feature (an attribute value, a dtype, a runtime shape) the importer does
    not convert; its message names the node."""


class Context:
    """What converters see: the graph, the opset, and the helpers to read inputs; what the
    import is at (``stage``, ``node``) for the errors."""

    def __init__(self, graph: Graph, limits: ImportLimits):
        self.g, self.limits, self.opset = graph, limits, None
        self.domains: dict[str, int] = {}  # the model's other opset domains -> their versions
        self._input_names: dict[int, str] = {}  # var id -> ONNX input name, for needs_constant
        self._consts: dict[int, Var] = {}  # id(array) -> its const/param Var
        self._param_names: dict[int, str] = {}  # id(array) of an initializer -> its name
        self.known_bytes = 0  # of the arrays known at import, against limits.max_known_bytes
        self.stage, self.node = "reading the model", None
        # var id -> the node whose output it is, of a length known only at run time and so
        # padded to a bound (NonMaxSuppression's): a graph output, never another node's input
        self.padded: dict[int, str] = {}
        # the values in scope (ONNX name -> value) and how a subgraph attribute (Scan's body) is
        # converted inline: both set by the importer, which alone walks graphs
        self.env: dict[str, object] = {}
        self.inline: Callable[[object, list], list] | None = None

    def note_initializer(self, name: str, array: np.ndarray) -> None:
        """``array`` is the initializer ``name``: a float one becomes a param of that name."""
        self._param_names[id(array)] = name

    def note_input(self, name: str, var: Var) -> None:
        """``var`` is the graph input ``name``, named when a converter needs its value."""
        self._input_names[var.id] = name

    def var(self, x) -> Var:
        """``x`` as a Var: a known array becomes a param (a float initializer) or a const."""
        if isinstance(x, Var):
            return x
        key = id(x)
        if isinstance(x, ShapeValue) and key not in self._consts:
            self._consts[key] = materialize(x, self.g)
        if key not in self._consts:
            name = self._param_names.get(key)
            if name is not None and is_float(x.dtype) and name not in self.g.params:
                self._consts[key] = self.g.param(name, x)
            else:
                self._consts[key] = self.g.const(x)
        return self._consts[key]

    def known(self, x, what: str) -> np.ndarray:
        """The value of ``x`` at import (a shape, axes, a count): refused if it is computed."""
        if x is None or isinstance(x, np.ndarray):
            return x
        if isinstance(x, ShapeValue):
            raise NotSupported(f"{self.where()}: {what} is {x.items.tolist()}, computed from the "
                               f"named dims {', '.join(x.names())}; mgegraph needs numbers there")
        name = self._input_names.get(x.id)
        if name is not None:
            raise NotSupported(f"{self.where()}: {what} comes from graph input {name!r}, whose "
                               f"value decides a shape; bind it with constants={{{name!r}: ...}}",
                               needs_constant=(name,))
        behind = self._inputs_behind(x)
        if behind:
            listed = ", ".join(map(repr, behind))
            raise NotSupported(f"{self.where()}: {what} is computed from graph input(s) {listed}, "
                               "whose values decide a shape; bind them with constants=",
                               needs_constant=behind)
        raise NotSupported(f"{self.where()}: {what} is computed at run time; mgegraph needs it "
                           "known at import (static shapes)")

    def _inputs_behind(self, var: Var) -> tuple[str, ...]:
        """The graph inputs ``var`` is computed from: bound, they make it known at import (the
        nodes between them and it then fold)."""
        found, seen, todo = [], set(), [var]
        while todo:
            v = todo.pop()
            if v.id in seen:
                continue
            seen.add(v.id)
            if v.id in self._input_names:
                found.append(self._input_names[v.id])
            todo.extend(v.node.inputs)
        return tuple(sorted(found))

    def ints(self, x, what: str):
        v = self.known(x, what)
        if v is None:
            return None
        if v.size > self.limits.max_int_list:
            self.fail(f"{what} has {v.size} values, over the limit of "
                      f"{self.limits.max_int_list} (ImportLimits.max_int_list)")
        return [int(i) for i in np.asarray(v).reshape(-1)]

    def dims(self, x, what: str) -> list:
        """A shape read from ``x``: ints, and Dims where it was computed from named dims."""
        if isinstance(x, ShapeValue):
            if x.ndim != 1:
                self.fail(f"{what} must be 1-D, got shape {list(x.shape)}")
            return list(x.items)
        return self.ints(x, what)

    def axis(self, value, rank: int, what: str = "axis", inclusive: bool = False) -> int:
        return checks.axis(self.where(), value, rank, what, inclusive)

    def axes(self, values, rank: int, what: str = "axes") -> list[int]:
        return checks.axes(self.where(), values, rank, what)

    def refuse_padded(self, ins) -> None:
        """Refuse a node reading an output padded to a bound: it would read the padding."""
        for v in ins:
            if isinstance(v, Var) and v.id in self.padded:
                self.fail(f"it reads the output of {self.padded[v.id]}, whose length is known "
                          "only at run time; mgegraph gives it padded to a bound (-1 rows "
                          "after the kept ones), which only a graph output can be")

    def where(self) -> str:
        return self.stage if self.node is None else checks.node_name(self.node)

    def fail(self, reason: str):
        raise NotSupported(f"{self.where()}: {reason}")


# what a table maps an ONNX op to (see the module docstring)
Converter = Callable[[Context, list, dict], list]


def shape_of(x) -> tuple:
    """The shape of a value, a Var or a known array alike (ints, and Dims of a Var's named
    dims)."""
    return tuple(x.shape)


def dtype_of(code: int, what: str) -> np.dtype:
    """The NumPy dtype of ONNX element type ``code``; one mgegraph has not is refused."""
    if code not in DTYPES:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        have = ", ".join(str(d) for d in DTYPES.values())
        raise NotSupported(f"{what}: dtype {name} is not supported (mgegraph has {have})")
    return DTYPES[code]
