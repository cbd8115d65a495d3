"""What the ONNX importer refuses before it builds or allocates anything: the limits on what a
file may ask for, the reading of the bytes, the structure ONNX's checker demands, the types
ONNX's shape inference gives each node, and the range of an axis.

Design: a hostile file is small and asks for much (111 bytes of ``ConstantOfShape`` can ask
for 4 TiB). Every size the importer would create is known before it is created: an
initializer's from its declared dims, a graph input's from its declared shape, and a node's
outputs from ONNX's own shape inference run on that one node, with the small arrays known at
import (shapes, axes, repeats, pads, Range's bounds) given as initializers so that inference
reads their values. The same inference, in strict mode, refuses what ONNX Runtime refuses at
load (an axis out of range, Split sizes that do not sum, a Reshape to the wrong size), so a
node is checked the same way whether it is folded or converted.
"""
from __future__ import annotations

import math
import os
import re
import warnings

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper

from ..io.files import open_regular
from ..ir.dims import Dim
from . import SUPPORTED_OPSETS, ImportLimits, OnnxImportError, OnnxImportWarning
from .scan8 import unbatched_scans

# known arrays up to this many elements go to a node's shape inference as initializers (their
# values can decide the output's shape); larger ones only as types, which is all inference
# reads of a weight
_VALUE_ELEMENTS = 256


def tensor_bytes(shape, dtype) -> int:
    return math.prod(int(d) for d in shape) * np.dtype(dtype).itemsize


def check_size(where: str, shape, dtype, limits: ImportLimits, what: str = "the tensor") -> None:
    """Refuse a tensor of ``shape`` and ``dtype`` over the limits (rank, bytes). A named dim (a
    str or a Dim) has no size until it is bound: such a shape is checked for its rank and its
    numbers, and the fed arrays bound its bytes."""
    if len(shape) > limits.max_ndim:
        raise OnnxImportError(f"{where}: {what} of rank {len(shape)}, over the limit of "
                              f"{limits.max_ndim} dims")
    named = any(isinstance(d, (str, Dim)) for d in shape)
    shape = tuple(d if isinstance(d, (str, Dim)) else int(d) for d in shape)
    if any(not isinstance(d, (str, Dim)) and d < 0 for d in shape):
        raise OnnxImportError(f"{where}: {what} of shape {list(shape)} has a negative dim")
    size = 0 if named else tensor_bytes(shape, dtype)
    if size > limits.max_tensor_bytes:
        raise OnnxImportError(f"{where}: {what} of shape {list(shape)} and dtype "
                              f"{np.dtype(dtype)} would take {size} bytes, over the limit of "
                              f"{limits.max_tensor_bytes} (ImportLimits.max_tensor_bytes)")


def axis(where: str, value, rank: int, what: str = "axis", inclusive: bool = False) -> int:
    """``value`` as an axis in ``[0, rank)`` (``[0, rank]`` when ``inclusive``, as Flatten's
    axis): ONNX allows ``[-rank, rank - 1]`` and refuses the rest, never wrapping them."""
    value, top = int(value), rank + inclusive
    if not -rank <= value < top:
        raise OnnxImportError(f"{where}: {what} {value} is out of range for a rank-{rank} input "
                              f"(ONNX allows {-rank} to {top - 1})")
    return value + rank if value < 0 else value


def axes(where: str, values, rank: int, what: str = "axes") -> list[int]:
    """Each of ``values`` through :func:`axis`; an axis named twice is refused (ONNX does)."""
    out = [axis(where, v, rank, what) for v in values]
    if len(set(out)) != len(out):
        raise OnnxImportError(f"{where}: {what} {list(values)} name an axis twice")
    return out


# -- reading -------------------------------------------------------------------------------
def read_model(model, limits: ImportLimits) -> onnx.ModelProto:
    """The ModelProto of a path, bytes or a ModelProto; anything that is not an ONNX model is
    an OnnxImportError saying so."""
    if isinstance(model, onnx.ModelProto):
        proto, source = model, "the model"
    else:
        source = "the bytes" if isinstance(model, (bytes, bytearray)) else repr(os.fspath(model))
        proto = _parse(model, source, limits)
    if not proto.HasField("graph") or proto.ir_version <= 0:
        missing = "graph" if not proto.HasField("graph") else "IR version"
        raise OnnxImportError(f"{source}: not an ONNX model (it has no {missing})")
    return proto


def _parse(model, source: str, limits: ImportLimits) -> onnx.ModelProto:
    if isinstance(model, (bytes, bytearray)):
        _check_file_bytes(source, len(model), limits)
        return _decode(source, lambda: onnx.load_from_string(bytes(model)))

    def refuse(message: str):
        raise OnnxImportError(f"ONNX import: {message}")

    # only a regular file: /dev/zero or a FIFO would be read without end or block
    with open_regular(model, refuse) as f:
        _check_file_bytes(source, os.fstat(f.fileno()).st_size, limits)
        proto = _decode(source, lambda: onnx.load(f, load_external_data=False))
    # weights in files beside the model: their declared sizes checked before onnx reads them
    for init in proto.graph.initializer:
        if init.data_location == TensorProto.EXTERNAL:
            check_size(f"initializer {init.name!r}", init.dims,
                       helper.tensor_dtype_to_np_dtype(init.data_type), limits)
    onnx.load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
    return proto


def _check_file_bytes(source: str, size: int, limits: ImportLimits) -> None:
    if size > limits.max_file_bytes:
        raise OnnxImportError(f"{source}: {size} bytes, over the limit of "
                              f"{limits.max_file_bytes} (ImportLimits.max_file_bytes)")


def _decode(source: str, load) -> onnx.ModelProto:
    try:
        return load()
    except (DecodeError, RuntimeWarning, ValueError, TypeError) as exc:
        raise OnnxImportError(f"{source}: not an ONNX model (protobuf: {exc})") from exc


def upgraded(model: onnx.ModelProto) -> onnx.ModelProto:
    """A model below the oldest opset the converters read, converted up to it by onnx's own
    version converter (no code of the file runs), with an ``OnnxImportWarning`` saying so;
    any other model as it is. A model the converter cannot take is an OnnxImportError."""
    versions = [e.version for e in model.opset_import if e.domain in ("", "ai.onnx")]
    if not versions or versions[0] >= SUPPORTED_OPSETS[0]:
        return model
    from onnx import version_converter  # lazy: loads onnx's converter only for old models

    if versions[0] < 9:  # Scan's batch axis, which onnx's adapter to opset 9 drops
        model = unbatched_scans(model)
    try:
        new = version_converter.convert_version(model, SUPPORTED_OPSETS[0])
    except Exception as exc:  # onnx raises RuntimeError, ValueError and others
        raise OnnxImportError(f"the model is at opset {versions[0]}; mgegraph imports opsets "
                              f"{SUPPORTED_OPSETS[0]} to {SUPPORTED_OPSETS[-1]}, and "
                              f"onnx.version_converter could not convert it: {exc}") from exc
    warnings.warn(f"the model at opset {versions[0]} was converted to opset "
                  f"{SUPPORTED_OPSETS[0]} by onnx.version_converter before import",
                  OnnxImportWarning, stacklevel=4)
    return new


def opset_of(model: onnx.ModelProto) -> int:
    """The default domain's opset, refused outside what the importer and onnx know."""
    versions = [e.version for e in model.opset_import if e.domain in ("", "ai.onnx")]
    used = [] if versions else _default_domain_ops(model.graph)
    if used:
        raise OnnxImportError("the model imports no version of the default ONNX opset, and its "
                              f"nodes use ops of it ({', '.join(used)})")
    if not versions:  # every node of another domain (ai.onnx.ml alone): no default ops to read
        return SUPPORTED_OPSETS[-1]
    opset, newest = versions[0], onnx.defs.onnx_opset_version()
    if opset < SUPPORTED_OPSETS[0]:
        raise OnnxImportError(f"the model is at opset {opset}; mgegraph imports opsets "
                              f"{SUPPORTED_OPSETS[0]} to {SUPPORTED_OPSETS[-1]} (convert it "
                              "with onnx.version_converter first)")
    if opset > newest:
        raise OnnxImportError(f"the model is at opset {opset}, newer than the installed onnx "
                              f"{onnx.__version__} knows ({newest})")
    return opset


def _default_domain_ops(graph) -> list[str]:
    """The ops of ONNX's default domain in ``graph`` and its subgraphs, sorted, once each."""
    found = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            found.add(node.op_type)
        for attr in node.attribute:
            for body in [attr.g] * attr.HasField("g") + list(attr.graphs):
                found.update(_default_domain_ops(body))
    return sorted(found)


def outer_names(node) -> set[str]:
    """The names ``node``'s subgraphs (Scan's body, at any depth) read from enclosing scopes."""
    found = set()
    for attr in node.attribute:
        for body in [attr.g] * attr.HasField("g") + list(attr.graphs):
            defined = {vi.name for vi in body.input} | {i.name for i in body.initializer}
            for inner in body.node:
                found |= {n for n in inner.input if n and n not in defined}
                found |= outer_names(inner) - defined
                defined |= set(inner.output)
            found |= {vi.name for vi in body.output} - defined
    return found


# -- structure -----------------------------------------------------------------------------
def node_name(node) -> str:
    return f"{node.op_type} node {node.name or '(unnamed)'!r}"


def check_structure(graph: onnx.GraphProto, limits: ImportLimits) -> None:
    """Each value defined once and before its use, every graph output defined: the single
    static assignment ONNX's checker demands, with both definers of a name named."""
    if len(graph.node) > limits.max_nodes:
        raise OnnxImportError(f"the graph has {len(graph.node)} nodes, over the limit of "
                              f"{limits.max_nodes} (ImportLimits.max_nodes)")
    defined = {init.name: f"initializer {init.name!r}" for init in graph.initializer}
    for vi in graph.input:
        defined.setdefault(vi.name, f"graph input {vi.name!r}")
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                raise OnnxImportError(f"{node_name(node)} reads {name!r}, which no initializer, "
                                      "graph input or earlier node defines")
        for name in node.output:
            if name in defined:
                raise OnnxImportError(f"{node_name(node)} defines {name!r}, which "
                                      f"{defined[name]} already defines (ONNX values are "
                                      "assigned once)")
            if name:
                defined[name] = node_name(node)
    for vi in graph.output:
        if vi.name not in defined:
            raise OnnxImportError(f"graph output {vi.name!r} is defined by no node, initializer "
                                  "or graph input")


def check_initializer(init: onnx.TensorProto, limits: ImportLimits, dtypes: dict) -> np.dtype:
    """An initializer's dtype, and its declared size within the limits, before its bytes are
    turned into an array."""
    where = f"initializer {init.name!r}"
    if init.data_type not in dtypes:
        code = init.data_type
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        have = ", ".join(str(d) for d in dtypes.values())
        raise OnnxImportError(f"{where}: dtype {name} is not supported (mgegraph has {have})")
    dtype = dtypes[init.data_type]
    check_size(where, init.dims, dtype, limits)
    size = tensor_bytes(init.dims, dtype) if dtype != np.bool_ else math.prod(init.dims)
    if init.HasField("raw_data") and len(init.raw_data) != size:
        raise OnnxImportError(f"{where}: {len(init.raw_data)} bytes of data for shape "
                              f"{list(init.dims)} of {dtype}, which takes {size}")
    check_half_bits(where, init)
    return dtype


# the half types, whose bits ONNX keeps one per int32_data entry when not in raw_data
HALF_CODES = (TensorProto.FLOAT16, TensorProto.BFLOAT16)


def check_half_bits(where: str, tensor: onnx.TensorProto) -> None:
    """A half tensor's int32_data (an initializer's, a Constant's): one 16-bit pattern per
    element (onnx's reader would keep the low 16 bits of a larger value: silently another
    number)."""
    if tensor.data_type not in HALF_CODES or tensor.HasField("raw_data"):
        return
    name = TensorProto.DataType.Name(tensor.data_type).lower()
    count = math.prod(tensor.dims)
    if len(tensor.int32_data) != count:
        raise OnnxImportError(f"{where}: {len(tensor.int32_data)} values in int32_data for "
                              f"shape {list(tensor.dims)} of {name}, which holds {count}")
    bits = np.asarray(tensor.int32_data, np.int64)
    if bits.size and (bits.min() < 0 or bits.max() > 0xFFFF):
        bad = bits[(bits < 0) | (bits > 0xFFFF)][0]
        raise OnnxImportError(f"{where}: int32_data holds {bad}, not the 16 bits of a {name} "
                              "value (0 to 65535)")


def _first_line(exc) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- one node's types -----------------------------------------------------------------------
def check_values(where: str, node, known: list) -> None:
    """What ONNX Runtime refuses in the known inputs' values, where shape inference would only
    fail on them (a Range whose delta is 0 would divide by it)."""
    if node.op_type == "Range" and len(known) == 3 and known[2] is not None \
            and np.any(np.asarray(known[2]) == 0):
        raise OnnxImportError(f"{where}: Range's delta is 0, so the range never reaches its "
                              "limit (ONNX Runtime refuses it too)")


def infer_node(node, values: list, types: list, opset: int, ir_version: int,
               scope: dict | None = None, domains: dict | None = None) -> list:
    """``(shape, dtype)`` of each of ``node``'s outputs by ONNX's strict shape inference (None
    where a dim or the type is unknown), its inputs being ``values`` (an array known at import,
    or None) of ``types`` (a ``(shape, dtype)`` each, None for a missing optional input);
    ``scope`` maps the enclosing scopes' names its subgraphs read to their ``(value, type)``;
    ``domains`` the model's other opset domains to their versions.
    A node ONNX's checker or its inference refuses is an OnnxImportError naming the node."""
    scope = scope or {}
    # the checker of one node cannot be told the names in scope; a node whose subgraphs read
    # them is checked by strict inference here and each of its subgraphs' nodes as converted
    if not scope:
        context = onnx.checker.C.CheckerContext()
        context.ir_version = ir_version
        context.opset_imports = {"": opset, **(domains or {})}
        try:
            onnx.checker.check_node(node, context, onnx.checker.C.LexicalScopeContext())
        except onnx.checker.ValidationError as exc:
            if node.op_type in _DEPRECATED_BUT_RUN and "deprecated" in str(exc):
                return [None] * len(node.output)
            raise OnnxImportError(f"{node_name(node)}: ONNX's checker refuses it: "
                                  f"{_first_line(exc)}") from exc
    inits, inputs, seen = [], [], set()
    pairs = list(zip(node.input, values, types)) + [(n, v, t) for n, (v, t) in scope.items()]
    for name, value, typed in pairs:
        if not name or typed is None or name in seen:
            continue
        seen.add(name)
        if value is not None and value.size <= _VALUE_ELEMENTS:
            inits.append(onnx.numpy_helper.from_array(np.asarray(value), name))
        else:
            shape, dtype = typed
            inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                [str(d) if isinstance(d, Dim) else d for d in shape]))
    outs = [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
            for o in node.output if o]
    graph = helper.make_graph([_with_body_defaults(node)], "node", inputs, outs, inits)
    imports = [helper.make_opsetid(d, v) for d, v in {"": opset, **(domains or {})}.items()]
    model = helper.make_model(graph, opset_imports=imports, ir_version=ir_version)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        raise OnnxImportError(f"{node_name(node)}: ONNX's shape inference refuses it: "
                              f"{_inference_reason(exc)}") from exc
    by_name = {vi.name: _static_type(vi) for vi in inferred.graph.output}
    if node.op_type == "Range" and by_name.get(node.output[0]) is None:
        return [_range_type(values)]
    return [by_name.get(o) if o else None for o in node.output]


def _range_type(values: list):
    """A Range's output type from its known bounds, where ONNX's inference computes no size
    (it does for float32, float64 and the integers, not for the half types): the spec's
    ``max(ceil((limit - start) / delta), 0)`` elements."""
    if len(values) != 3 or any(v is None or np.size(v) != 1 for v in values):
        return None
    start, limit, delta = (float(np.asarray(v, np.float64).reshape(())) for v in values)
    if not all(map(math.isfinite, (start, limit, delta))) or delta == 0:
        return None
    return (max(math.ceil((limit - start) / delta), 0),), np.asarray(values[0]).dtype


# ONNX deprecated GroupNormalization-18 (scale and bias per group) for -21 (per channel): its
# checker refuses the old one and its inference says nothing of it, but ONNX Runtime runs it and
# so does the converter, which checks such a node's inputs itself.
_DEPRECATED_BUT_RUN = {"GroupNormalization"}

# Defaults of attributes that a function op's body reads (``Constant <value_ints = @axes>``):
# ONNX's inference of the body does not fill them in, so a node without the attribute would be
# refused; the node is inferred with the default written out.
_BODY_DEFAULTS = {"MeanVarianceNormalization": {"axes": [0, 2, 3]}}


def _with_body_defaults(node):
    missing = {k: v for k, v in _BODY_DEFAULTS.get(node.op_type, {}).items()
               if k not in {a.name for a in node.attribute}}
    if not missing:
        return node
    filled = onnx.NodeProto()
    filled.CopyFrom(node)
    filled.attribute.extend(helper.make_attribute(k, v) for k, v in missing.items())
    return filled


def _inference_reason(exc) -> str:
    """ONNX's own words, without its "[ShapeInferenceError] Inference error(s): ..." frame."""
    return re.split(r"\[\w+Error\]\s*", " ".join(str(exc).split()))[-1]


def _static_type(vi):
    tt = vi.type.tensor_type
    if (not tt.HasField("shape") or tt.elem_type == TensorProto.UNDEFINED
            or not all(d.HasField("dim_value") for d in tt.shape.dim)):
        return None
    return tuple(d.dim_value for d in tt.shape.dim), helper.tensor_dtype_to_np_dtype(tt.elem_type)
