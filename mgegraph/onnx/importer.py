"""ONNX -> mgegraph Graph: the walk. The model is read and checked (``checks``), the ops are
checked against the converter table (``converters``), then the nodes are taken in order, each
either folded or converted, in an environment of ONNX value name -> value.

Design: a value of the ONNX graph is either a ``Var`` of the mgegraph graph or a NumPy array
known at import (an initializer, a ``Constant``, a bound input, or a folded result). A node
whose inputs are all known is evaluated at import by ONNX's NumPy reference evaluator instead
of being converted, which folds the shape arithmetic exporters emit around reshapes (``Shape``
-> ``Gather`` -> ``Concat`` -> ``Reshape``): ``Shape`` of a Var is known, as numbers or, over
named dims (a graph input's ``dim_param``), as a ``ShapeValue`` whose arithmetic
``shape_values.FOLDS`` folds on the expressions. Any other node goes to its converter
(``converters.CONVERTERS``), which emits mgegraph ops through ``mgegraph.functional`` and sees
the import through a ``Context``; an error of the graph builder or of the file itself comes out
as one ``OnnxImportError`` naming the node.
"""
from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .. import functional as F
from ..ir.dims import MAX_NAME
from ..ir.errors import GraphError
from ..ir.graph import Graph, Var
from ..ir.types import is_float
from . import ImportLimits, OnnxImportError, checks
from .context import DTYPES, Context, dtype_of, shape_of
from .converters import CONVERTERS, check_ops
from .shape_values import FOLDS, ShapeValue


def import_graph(model, *, constants=None, input_shapes=None, limits=None):
    """``(Graph, outputs)`` of an ONNX model; see ``mgegraph.onnx.import_graph``."""
    cx = Context(Graph(), ImportLimits() if limits is None else limits)
    try:
        return _import(cx, model, dict(constants or {}), dict(input_shapes or {}))
    except OnnxImportError:
        raise
    except Exception as exc:
        raise OnnxImportError(f"{cx.where()}: {type(exc).__name__}: {exc}") from exc


def _import(cx: Context, model, constants: dict, input_shapes: dict):
    model = checks.read_model(model, cx.limits)
    checks.check_structure(model.graph, cx.limits)  # before onnx's converter reads it
    model = checks.upgraded(model)
    cx.opset = checks.opset_of(model)
    cx.domains = {e.domain: e.version for e in model.opset_import
                  if e.domain not in ("", "ai.onnx")}
    gp = model.graph
    checks.check_structure(gp, cx.limits)
    check_ops(gp, cx.opset, cx.domains)
    env: dict[str, object] = {"": None}
    cx.env, cx.inline = env, lambda body, values: _inline(cx, body, values, model.ir_version)
    for init in gp.initializer:
        cx.stage = f"initializer {init.name!r}"
        checks.check_initializer(init, cx.limits, DTYPES)
        if init.data_location == TensorProto.EXTERNAL:
            cx.fail("its data is in an external file: pass the model's path, so that onnx "
                    "reads that data from the model's folder")
        array = _remember(cx, np.array(numpy_helper.to_array(init), order="C"))
        env[init.name] = array
        cx.note_initializer(init.name, array)
    declared = {vi.name: vi for vi in gp.input}
    dim_names = _dim_names(gp.input)
    for name, value in constants.items():
        cx.stage = f"constants[{name!r}]"
        if name not in declared:
            cx.fail("the model has no graph input of that name")
        env[name] = _remember(cx, _bound(cx, declared[name], value))
    for vi in gp.input:
        if vi.name not in env:  # else an initializer listed as an input, or a bound constant
            cx.stage = f"graph input {vi.name!r}"
            var = _graph_input(cx, vi, input_shapes.get(vi.name), dim_names)
            env[vi.name] = var
            cx.note_input(vi.name, var)
    cx.stage = None
    for node in gp.node:
        cx.node = node
        for name, value in zip(node.output, _convert(cx, node, [env[n] for n in node.input],
                                                     model.ir_version)):
            if name:
                env[name] = value
    cx.node, cx.stage = None, "the graph's outputs"
    return cx.g, [_output(cx, vi.name, env[vi.name]) for vi in gp.output]


def _inline(cx: Context, body, values: list, ir_version: int) -> list:
    """The outputs of subgraph ``body`` (a ``GraphProto``) on ``values`` (its inputs in order),
    its nodes converted into the graph being built; names of the enclosing scopes are seen."""
    check_ops(body, cx.opset, cx.domains)
    if len(values) != len(body.input):
        cx.fail(f"its subgraph {body.name!r} takes {len(body.input)} inputs, given "
                f"{len(values)}")
    outer, node = cx.env, cx.node
    env = dict(outer)
    env.update(zip((vi.name for vi in body.input), values))
    for init in body.initializer:
        checks.check_initializer(init, cx.limits, DTYPES)
        env[init.name] = _remember(cx, np.array(numpy_helper.to_array(init), order="C"))
    cx.env = env
    try:
        for inner in body.node:
            cx.node = inner
            missing = [n for n in inner.input if n not in env]
            if missing:
                cx.fail(f"input(s) {missing} are defined nowhere in scope")
            for name, value in zip(inner.output, _convert(cx, inner, [env[n] for n in inner.input],
                                                          ir_version)):
                if name:
                    env[name] = value
        undefined = [vi.name for vi in body.output if vi.name not in env]
        if undefined:
            cx.fail(f"its subgraph {body.name!r} gives output(s) {undefined} it never defines")
        return [env[vi.name] for vi in body.output]
    finally:
        cx.env, cx.node = outer, node


def _bound(cx: Context, vi, value) -> np.ndarray:
    """A value bound to a graph input: of the input's declared type, as a feed must be."""
    array = np.array(value, order="C")
    tt = vi.type.tensor_type
    if tt.elem_type:
        dtype = dtype_of(tt.elem_type, cx.where())
        converted = array.astype(dtype)
        nan = is_float(array.dtype) and is_float(dtype)
        if not np.array_equal(converted, array, equal_nan=nan):
            cx.fail(f"a {array.dtype} value that {dtype}, the input's dtype, does not hold")
        array = converted
    if tt.HasField("shape"):
        dims = tt.shape.dim
        if len(dims) != array.ndim or any(d.HasField("dim_value") and d.dim_value != n
                                          for d, n in zip(dims, array.shape)):
            want = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in dims]
            cx.fail(f"a value of shape {list(array.shape)} for an input declared {want}")
    return array


def _graph_input(cx: Context, vi, shape, dim_names: dict) -> Var:
    if not vi.type.HasField("tensor_type"):
        cx.fail("it is not a tensor")
    tt = vi.type.tensor_type
    dtype = dtype_of(tt.elem_type, cx.where())
    if shape is None:
        if not tt.HasField("shape"):
            cx.fail("its rank is not declared; pass input_shapes={name: shape} to give it")
        shape = [dim.dim_value if dim.HasField("dim_value") else dim_names[vi.name, axis]
                 for axis, dim in enumerate(tt.shape.dim)]
    shape = tuple(d if isinstance(d, str) else int(d) for d in shape)
    checks.check_size(cx.where(), shape, dtype, cx.limits, "the input")
    return cx.g.input(vi.name, shape, dtype)


def _dim_names(graph_inputs) -> dict:
    """(input name, axis) -> the mgegraph name of each ONNX dim without a value: its
    ``dim_param`` made an identifier (``batch size`` -> ``batch_size``), one name per distinct
    ``dim_param`` and a fresh ``unk_<n>`` per dim with none; names that sanitise alike are told
    apart by a suffix, so two ONNX names are never merged into one."""
    dims = [((vi.name, axis), d) for vi in graph_inputs if vi.type.HasField("tensor_type")
            for axis, d in enumerate(vi.type.tensor_type.shape.dim)
            if not d.HasField("dim_value")]
    by_param, used = {}, {}
    for param in dict.fromkeys(d.dim_param for _, d in dims if d.dim_param):
        by_param[param] = _fresh(_identifier(param), used)
    out, unnamed = {}, 0
    for key, d in dims:
        if d.dim_param:
            out[key] = by_param[d.dim_param]
        else:
            out[key] = _fresh(f"unk_{unnamed}", used)
            unnamed += 1
    return out


def _identifier(param: str) -> str:
    text = re.sub(r"[^A-Za-z0-9_]+", "_", param).strip("_")[:MAX_NAME - 8] or "dim"
    return text if not text[0].isdigit() else f"d_{text}"


def _fresh(name: str, used: dict) -> str:
    """``name``, or ``name_<n>`` with the first ``n`` not taken; ``used`` maps each name
    given to the next suffix to try, so names that sanitise alike cost no rescans."""
    n = used.get(name, 1)
    candidate = name if n == 1 else f"{name}_{n}"
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used[name], used[candidate] = n + 1, used.get(candidate, 1)
    return candidate


def _convert(cx: Context, node, ins: list, ir_version: int) -> list:
    """The node's outputs: folded when every input is known, else through its converter;
    its outputs' sizes checked against the limits before either allocates them."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    cx.refuse_padded(ins)
    known = [v if isinstance(v, np.ndarray) else None for v in ins]
    types = [None if v is None else (shape_of(v), v.dtype) for v in ins]
    checks.check_values(cx.where(), node, known)
    outer = checks.outer_names(node)
    scope = {n: (v if isinstance(v, np.ndarray) else None, (shape_of(v), v.dtype))
             for n in outer if (v := cx.env.get(n)) is not None}
    predicted = checks.infer_node(node, known, types, cx.opset, ir_version, scope, cx.domains)
    # a node whose subgraph reads enclosing names is converted: the evaluator sees one node
    fold = node.op_type not in UNFOLDED and \
        all(v is None or isinstance(v, np.ndarray) for v in ins) \
        and any(v is not None for v in ins) and not outer
    for name, guess in zip(node.output, predicted):
        if guess is not None:
            checks.check_size(cx.where(), guess[0], guess[1], cx.limits, f"output {name!r}")
        elif name and fold:
            cx.fail(f"the size of output {name!r} is not known before it is evaluated, so it "
                    "cannot be checked against the limits")
    outs = _fold_symbolic(cx, node, ins, attrs)
    if outs is None and fold:
        _reserve(cx, sum(checks.tensor_bytes(*guess) for guess in predicted if guess))
        outs = _fold(node, ins, {"": cx.opset, **cx.domains}, ir_version)
    elif outs is None:
        try:
            outs = CONVERTERS[node.op_type](cx, ins, attrs)
        except OnnxImportError:
            raise
        except GraphError as exc:
            raise OnnxImportError(f"{cx.where()}: {exc}") from exc
    for name, value in zip(node.output, outs):
        if name and value is not None and not isinstance(value, ShapeValue):
            checks.check_size(cx.where(), shape_of(value), value.dtype, cx.limits,
                              f"output {name!r}")
    return outs


# Nodes converted even when their inputs are known: a Constant is its value already, and a
# quantized weight (a QDQ model's DequantizeLinear of int8 integers) stays a quantized value in
# the graph, which the integer kernels take as it is (folding it would give float weights).
UNFOLDED = frozenset(("Constant", "QuantizeLinear", "DequantizeLinear"))


def _fold_symbolic(cx: Context, node, ins: list, attrs: dict) -> list | None:
    """The outputs of a shape computation on named dims (``shape_values.FOLDS``), or None
    when the node is not one (then it is converted, its ShapeValues made graph values)."""
    if not any(isinstance(v, ShapeValue) for v in ins) or node.op_type not in FOLDS:
        return None
    if not all(v is None or isinstance(v, (np.ndarray, ShapeValue)) for v in ins):
        return None
    return FOLDS[node.op_type](ins, attrs, cx)


def _fold(node, values: list, opsets: dict, ir_version: int) -> list:
    """Evaluate one node on known arrays with ONNX's NumPy reference evaluator, the model's
    ``opsets`` (domain -> version) imported."""
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in zip(names, values) if n]
    outs = [f"out{i}" if n else "" for i, n in enumerate(node.output)]
    copy = helper.make_node(node.op_type, names, outs, domain=node.domain)
    copy.attribute.extend(node.attribute)
    graph = helper.make_graph([copy], "fold", inputs,
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in opsets.items()],
                              ir_version=ir_version)
    results = ReferenceEvaluator(model).run(None, {n: v for n, v in zip(names, values) if n})
    it = iter(results)
    return [np.asarray(next(it)) if o else None for o in outs]


def _reserve(cx: Context, nbytes: int) -> None:
    cx.known_bytes += nbytes
    if cx.known_bytes > cx.limits.max_known_bytes:
        cx.fail(f"the arrays known at import would take {cx.known_bytes} bytes, over the limit "
                f"of {cx.limits.max_known_bytes} (ImportLimits.max_known_bytes)")


def _remember(cx: Context, array: np.ndarray) -> np.ndarray:
    checks.check_size(cx.where(), array.shape, array.dtype, cx.limits)
    _reserve(cx, array.nbytes)
    return array


def _output(cx: Context, name: str, value):
    cx.stage = f"graph output {name!r}"
    if isinstance(value, np.ndarray):
        if value.dtype not in DTYPES.values():
            cx.fail(f"dtype {value.dtype} is not supported")
        return cx.g.const(value)
    if isinstance(value, ShapeValue):  # a shape of named dims: computed when they are bound
        return cx.var(value)
    if value.node.op.name in ("input", "param", "const"):
        return F.reshape(value, shape_of(value))  # an output is its own value
    return value
