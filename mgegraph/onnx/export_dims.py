"""Named dimensions in an exported ONNX model: the sizes an attribute holds as Dims (a reshape
to ``(batch, -1)``, a fill of shape ``(batch, 10)``) written as ONNX nodes that compute them
from the inputs' shapes, so the model runs in ONNX Runtime at any size of the names.

Design: a name is read where an input binds it, ``Shape(input)`` -> ``Gather`` at the axis
that is the name alone (one ``Shape`` per input, one ``Gather`` per name, shared by every use).
An expression is written through ``ir.dims.fold`` (its terms in the tree of its text form):
sums, products and floor divisions become ``Add``/``Sub``/``Mul``/``Div`` on 1-element int64
tensors. ONNX's integer ``Div`` truncates, which is floor division here because the numerator
of a Dim's floor division has no negative coefficient and the divisor is a positive integer.
"""
from __future__ import annotations

import numpy as np

from ..ir.dims import Dim, bare_name, fold
from . import OnnxExportError


def dim_param(d) -> int | str:
    """A dim of a value's declared type: its number, or the Dim's text as ``dim_param``."""
    return str(d) if isinstance(d, Dim) else int(d)


class DimWriter:
    """Writes shape tensors with named sizes into an exporter's ``_Writer`` ``w``."""

    def __init__(self, w, inputs: dict):
        self.w = w
        self._where: dict[str, tuple[str, int]] = {}  # name -> (input, axis) that binds it
        for name, var in inputs.items():
            for axis, d in enumerate(var.shape):
                if bare_name(d) is not None:
                    self._where.setdefault(bare_name(d), (name, axis))
        self._shapes: dict[str, str] = {}  # input -> its Shape's output
        self._sizes: dict[str, str] = {}  # name -> its Gather's output ([1] int64)

    def shape(self, values) -> str:
        """A 1-D int64 tensor of ``values`` (ints and Dims): an initializer when all are
        numbers, else a Concat of the numbers and the computed sizes."""
        values = list(values)
        if not any(isinstance(v, Dim) for v in values):
            return self.w.ints(values)
        parts, run = [], []
        for v in values:
            if isinstance(v, Dim):
                if run:
                    parts.append(self.w.ints(run))
                    run = []
                parts.append(self.dim(v))
            else:
                run.append(int(v))
        if run:
            parts.append(self.w.ints(run))
        return parts[0] if len(parts) == 1 else self.w.add("Concat", parts, axis=0)[0]

    def dim(self, d) -> str:
        """A ``[1]`` int64 tensor computing ``d`` from the inputs' shapes."""
        if not isinstance(d, Dim):
            return self.w.ints([int(d)])
        ops = {symbol: self._node(op) for symbol, op in
               (("+", "Add"), ("-", "Sub"), ("*", "Mul"), ("//", "Div"), ("neg", "Neg"))}
        return fold(d, self._size, lambda v: self.w.ints([v]), ops)

    def _node(self, op: str):
        return lambda *ins: self.w.add(op, list(ins))[0]

    def _size(self, name: str) -> str:
        if name not in self._sizes:
            if name not in self._where:
                raise OnnxExportError(f"the size {name} is the dimension of no graph input on "
                                      "its own, so the exported model could not compute it")
            source, axis = self._where[name]
            if source not in self._shapes:
                self._shapes[source] = self.w.add("Shape", [source])[0]
            index = self.w.const(np.asarray([axis], np.int64), "axis")
            self._sizes[name] = self.w.add("Gather", [self._shapes[source], index], axis=0)[0]
        return self._sizes[name]
