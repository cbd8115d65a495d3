"""ONNX in and out (optional extra ``onnx``): ``import_graph``, ``import_model``, ``export``.

Importing this package does not import ``onnx``; each function imports it when called, so
``import mgegraph`` works without the extra installed.

>>> import mgegraph.onnx
>>> plan = mgegraph.onnx.import_model("model.onnx")      # run() takes the ONNX input names
>>> (y,) = plan.run({"input": x})       # any batch where the file names it (dim_param)
>>> mgegraph.onnx.export(plan, "again.onnx")            # named dims stay named
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.errors import GraphError

__all__ = [
    "SUPPORTED_OPSETS",
    "ImportLimits",
    "OnnxExportError",
    "OnnxImportError",
    "OnnxImportWarning",
    "export",
    "import_graph",
    "import_model",
]

# the opsets the importer is written against; newer opsets are read where every node's op has
# the same definition as at 21 or only added element types (see converters.same_semantics)
SUPPORTED_OPSETS = range(13, 22)


class OnnxImportError(GraphError):
    """An ONNX model mgegraph cannot import. ``unsupported`` maps each op type it has no
    converter for to its count (all of them, found before anything is built);
    ``needs_constant`` names graph inputs whose values decide a shape (pass them in
    ``constants=``)."""

    def __init__(self, message: str, unsupported: dict | None = None,
                 needs_constant: tuple = ()):
        super().__init__(message)
        self.unsupported = dict(unsupported or {})
        self.needs_constant = tuple(needs_constant)


@dataclass(frozen=True)
class ImportLimits:
    """What the importer accepts; over any limit, an ``OnnxImportError`` naming the node (or
    the initializer, or the graph input), raised before the memory is asked for.

    ``max_tensor_bytes`` bounds every tensor the importer would create or fold and every value
    of the graph it builds (the compiled plan allocates those); ``max_known_bytes`` all the
    arrays known at import together (initializers, constants and folded results).

    >>> mgegraph.onnx.import_model(path, limits=ImportLimits(max_tensor_bytes=2**34))
    """

    max_file_bytes: int = 1 << 31     # protobuf's own ceiling for one message
    max_nodes: int = 1_000_000
    max_ndim: int = 32
    max_tensor_bytes: int = 1 << 32
    max_known_bytes: int = 1 << 34
    max_int_list: int = 1 << 16       # a known array read as a shape, axes, pads or sizes



class OnnxImportWarning(UserWarning):
    """Something the importer did to read a model that its user should know of (a model below
    opset 13 converted up by onnx's version converter)."""


class OnnxExportError(GraphError):
    """A graph mgegraph cannot write as ONNX (an op without an ONNX form, named with counts)."""


def import_graph(model, *, constants=None, input_shapes=None, limits=None):
    """``(Graph, outputs)`` of an ONNX model (a path, bytes or a ``ModelProto``).

    Initializers become params (float weights, named as in the file) or constants; the graph
    inputs become ``g.input``s with their ONNX names; shape arithmetic on static shapes is
    folded at import. ``constants`` binds graph inputs to fixed arrays (folded like
    initializers); ``input_shapes`` gives static shapes to inputs with symbolic dims;
    ``limits`` (an :class:`ImportLimits`) bounds what the file may ask for. Anything wrong
    with the file is one ``OnnxImportError`` naming the node, raised before anything runs.
    """
    from .importer import import_graph as _import  # lazy: optional dependency (onnx)
    return _import(model, constants=constants, input_shapes=input_shapes, limits=limits)


def import_model(model, *, constants=None, input_shapes=None, limits=None,
                 values_cache_size: int = 16, **compile_options):
    """``mg.compile`` of :func:`import_graph`'s graph: a Plan (a ``SymbolicPlan`` when an input
    has a named dim) whose ``run(feeds)`` takes the ONNX input names and returns the ONNX
    outputs in order. A model with graph inputs that decide shapes (a Reshape's target fed as
    data) gives a ``ShapeFedPlan``: its ``run`` takes those inputs too, as ONNX Runtime does,
    and keeps a plan per set of their values (at most ``values_cache_size``)."""
    from .shape_feeds import import_model as _import  # lazy: optional dependency (onnx)
    return _import(model, constants=constants, input_shapes=input_shapes, limits=limits,
                   values_cache_size=values_cache_size, **compile_options)


def export(obj, path=None, opset: int = 17, *, output_names=None):
    """Write ``obj`` (a Plan, a traced function, or ``(graph, outputs)``) as an ONNX model at
    ``path`` (returns the ``ModelProto``; ``path=None`` only returns it)."""
    from .exporter import export as _export  # lazy: optional dependency (onnx)
    return _export(obj, path, opset=opset, output_names=output_names)
