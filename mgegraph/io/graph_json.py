"""A graph as JSON and back: nodes (op name, op version, attributes, inputs, output types),
sources referring to array members, and state updates.

A named dimension (``batch``, ``2*seq + 1``) is ``{"dim": "<its text form>"}`` wherever a
shape entry or an attribute holds one, so it cannot be taken for an int or a string attribute.
Reading it is ``ir.dims.parse_dim`` (a small grammar with size limits, never eval), and only in
a file whose format version allows named dimensions (``symbolic=True`` here).

Design: the file stores the graph, not the plan. Loading rebuilds it through
``Graph.input/param/const`` and ``Graph.add_node``, so every node passes its op's rules again
(types, attributes) and a node's recorded output types must be what the rule infers; then the
plan is compiled as it was, with the saved options, which gives the same kernels and the same
numbers on the same machine. Var ids are implicit: each node's outputs take the next numbers,
and an input names an earlier number.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dims import Dim, evaluate, is_known_nonnegative, parse_dim
from ..ir.dims import names as dim_names
from ..ir.errors import GraphError, ModelFormatError
from ..ir.graph import Graph, Node
from ..ir.quant import QuantParams
from ..ir.types import SUPPORTED, TensorType
from .container import Limits, fail

# Every registered op has a version here: an op whose meaning (attributes, semantics) changes
# gets a new number, and files naming an older one are refused instead of run differently. A
# test asserts that every op of ``ops.all_ops()`` is listed, so a new op forces a decision.
OP_VERSIONS = {
    "abs": 1, "adaptive_avg_pool2d": 1, "adaptive_avg_pool2d_backward": 1,
    "adaptive_max_pool2d": 1, "adaptive_max_pool2d_backward": 1, "adaptive_max_pool2d_select": 1,
    "add": 1, "addmm": 1, "arange": 1, "argmax": 1, "argmin": 1, "assign": 1, "avg_pool2d": 1,
    "avg_pool2d_backward": 1, "batch_norm": 1, "batch_norm_backward": 1, "broadcast_to": 1,
    "cast": 1, "ceil": 1, "clip": 1, "concat": 1, "const": 1, "conv2d": 1,
    "conv2d_backward_data": 1, "conv2d_backward_filter": 1, "conv2d_pack_weight": 1,
    "conv2d_packed": 1, "copy": 1, "cos": 1,
    "cross_entropy": 1, "cross_entropy_backward": 1, "div": 1, "dropout": 1, "equal": 1, "erf": 1,
    "exp": 1, "fill": 1, "floor": 1, "floor_div": 1, "fused_elementwise": 1, "gather": 1,
    "gelu": 1, "gelu_tanh": 1, "greater": 1, "greater_equal": 1, "hardswish": 1, "index_add": 1,
    "input": 1, "layer_norm": 1, "layer_norm_backward": 1, "leaky_relu": 1, "less": 1,
    "less_equal": 1, "linear": 1, "linspace": 1, "log": 1, "log1p": 1, "log_softmax": 1,
    "matmul": 1, "max": 1, "max_pool2d": 1, "max_pool2d_backward": 1, "max_pool2d_select": 1,
    "maximum": 1, "mean": 1, "min": 1, "minimum": 1, "mod": 1, "mul": 1, "neg": 1, "not_equal": 1,
    "one_hot": 1, "pad": 1, "pad_backward": 1, "param": 1, "pow": 1, "prod": 1, "reciprocal": 1,
    "relu": 1, "relu_backward": 1, "reshape": 1, "rsqrt": 1, "scatter_add": 1, "sigmoid": 1,
    "sign": 1, "silu": 1, "sin": 1, "slice": 1, "slice_backward": 1, "softmax": 1, "softplus": 1,
    "split": 1, "sqrt": 1, "square": 1, "sub": 1, "sum": 1, "take": 1, "tanh": 1, "transpose": 1,
    "var": 1, "where": 1,
    # the activations
    "celu": 1, "elu": 1, "hardsigmoid": 1, "logsigmoid": 1, "mish": 1, "prelu": 1, "selu": 1,
    "shrink": 1, "softsign": 1, "thresholded_relu": 1,
    # detection and geometry (ops/vision.py)
    "grid_sample": 1, "grid_sample_backward_data": 1, "grid_sample_backward_grid": 1, "nms": 1,
    "remap": 1, "remap_backward_data": 1, "remap_backward_map": 1, "roi_align": 1,
    "roi_align_backward": 1, "roi_align_backward_rois": 1, "roi_pooling": 1,
    "roi_pooling_backward": 1,
}
# group norm (ops/norm.py)
OP_VERSIONS.update({"group_norm": 1, "group_norm_backward": 1})
# resampling: ONNX Resize's meaning over the last 1-3 axes (ops/resize.py)
OP_VERSIONS |= {"resize": 1, "resize_backward": 1}
# deformable sampling and correlation (ops/deform.py)
OP_VERSIONS |= {"deform_im2col": 1, "deform_im2col_backward": 1, "correlation": 1,
                "correlation_backward": 1}
# grid_sample over volumes (ops/vision.py)
OP_VERSIONS |= {"grid_sample3d": 1, "grid_sample3d_backward_data": 1,
                "grid_sample3d_backward_grid": 1}
# sorting and scans (ops/sorting.py)
OP_VERSIONS |= {"sort": 1, "topk": 1, "cumsum": 1, "cumprod": 1, "cumprod_backward": 1}
# trigonometric and hyperbolic elementwise math, atan2 and the two roundings
OP_VERSIONS |= {"tan": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1, "asinh": 1,
                "acosh": 1, "atanh": 1, "atan2": 1, "round": 1, "round_half_even": 1}
# the embedding lookup with PyTorch's padding_idx, RMS norm (ops/sequence.py)
OP_VERSIONS |= {"embedding": 1, "rms_norm": 1}
# scaled dot-product attention and its backward (ops/attention.py)
OP_VERSIONS |= {"attention": 1, "attention_backward": 1}
# the counter-based random draws (ops/random.py)
OP_VERSIONS |= {"rng_uniform": 1, "rng_gamma": 1, "rng_poisson": 1}
# MegEngine's matinv (ops/linalg_inv.py) and sliding windows (ops/sliding_window.py)
OP_VERSIONS |= {"matinv": 1, "sliding_window": 1, "sliding_window_transpose": 1}
# convolutions with unshared weights or region-restricted taps (ops/local_conv.py)
OP_VERSIONS |= {"local_conv2d": 1, "local_conv2d_backward": 1, "region_restricted_conv": 1,
                "region_restricted_conv_backward": 1}
# quantize and dequantize (ops/quantize.py); a quantized value's type also carries "quant"
OP_VERSIONS |= {"quantize": 1, "dequantize": 1, "as_quantized": 1}
# the int8 compute ops (ops/quantized.py)
OP_VERSIONS |= {"quantized_conv2d": 1, "quantized_linear": 1, "quantized_add": 1}
# the int8 transposed convolution and batched matmul (ops/quantized.py)
OP_VERSIONS |= {"quantized_conv_transpose2d": 1, "quantized_batch_matmul": 1}
# the int8 conv2d and linear on packed weights (ops/quantized_pack.py; the CPU's prepack pass)
OP_VERSIONS |= {"quantized_pack_weight": 1, "quantized_conv2d_packed": 1,
                "quantized_linear_packed": 1}
# version 2: the packed bytes in the layout every int8 variant reads, AMX tiles included (rows
# padded to 16, k to 64). A file of version 1 may hold packed bytes of the old layout as a const:
# refused, never misread.
OP_VERSIONS |= {"quantized_pack_weight": 2, "quantized_conv2d_packed": 2,
                "quantized_linear_packed": 2}
# the int8 transposed convolution and batched matmul on packed weights (ops/quantized_pack.py).
# quantized_pack_weight also packs a batched matmul's (1, n, k) a now: only
# quantized_batch_matmul_packed reads such a pack, so a reader without it refuses the file by
# that op's name, and its version stays.
OP_VERSIONS |= {"quantized_pack_transposed_weight": 1, "quantized_conv_transpose2d_packed": 1,
                "quantized_batch_matmul_packed": 1}
# quantization-aware training's fake quantization (ops/fake_quant.py); version 2: the tqt
# attribute (TQT's gradient at the clip edges). A node without it is written as version 1.
OP_VERSIONS |= {"fake_quant": 2}
# attributes a version 1 node is written without: (op, attribute) -> the value version 1 means
V2_ATTRS = {("fake_quant", "tqt"): False}
# the collectives (ops/collective.py): a saved step's graph keeps its all-reduce, which a
# process of the same group runs; the planned pair is the planner's, never in a graph one saves
OP_VERSIONS |= {"all_reduce": 1, "all_reduce_start": 1, "all_reduce_wait": 1}
# version 2 of all_reduce: the deterministic attribute (a sum in rank order). A node without it
# is written as version 1.
OP_VERSIONS |= {"all_reduce": 2}
V2_ATTRS |= {("all_reduce", "deterministic"): False}
# the epilogue's relu6 (activation="relu6" on linear, conv2d and conv2d_packed) is version 2 of
# those ops. A node without it is written as version 1, which readers from before relu6 run,
# and this reader takes both; a version 1 node that says relu6 is refused.
EPILOGUE_V2 = ("linear", "conv2d", "conv2d_packed")
OP_VERSIONS |= dict.fromkeys(EPILOGUE_V2, 2)
# version 2 of group_norm: the epilogue's activation attribute (the epilogue pass folds a relu or
# clip(0, 6) after it in). A node without one is written as version 1, without the attribute.
OP_VERSIONS |= {"group_norm": 2}
V2_ATTRS |= {("group_norm", "activation"): "none"}
# version 2 of conv2d_backward_data: its optional bias input (the epilogue pass folds the
# transposed convolution's bias add in). A node without one is written as version 1.
BIAS_V2 = {"conv2d_backward_data": 3}  # op -> its number of inputs with the bias
OP_VERSIONS |= dict.fromkeys(BIAS_V2, 2)
# op -> the older versions read
OLDER_VERSIONS = dict.fromkeys(EPILOGUE_V2 + tuple(op for op, _ in V2_ATTRS) + tuple(BIAS_V2),
                               (1,))


def node_version(node) -> int:
    """The version ``node`` is written at: the oldest that has its meaning."""
    if node.op.name in EPILOGUE_V2 and node.attr["activation"] != "relu6":
        return 1
    if node.op.name in BIAS_V2 and len(node.inputs) < BIAS_V2[node.op.name]:
        return 1
    older = [(key, value) for (op, key), value in V2_ATTRS.items() if op == node.op.name]
    if older and all(node.attr[key] == value for key, value in older):
        return 1
    return OP_VERSIONS[node.op.name]


def _check_version(op, entry, where) -> None:
    version = entry["version"]
    if type(version) is not int or (version != OP_VERSIONS[op]
                                    and version not in OLDER_VERSIONS.get(op, ())):
        fail(f"{where}: op version {str(version)[:20]} is unknown (this mgegraph has version "
             f"{OP_VERSIONS[op]})")
    attrs = entry.get("attrs")
    if op in EPILOGUE_V2 and version == 1 and type(attrs) is dict \
            and attrs.get("activation") == "relu6":
        fail(f"{where}: activation 'relu6' needs version 2 of {op}, the file says version 1")
    for (name, key), value in V2_ATTRS.items():
        if op == name and version == 1 and type(attrs) is dict and attrs.get(key, value) != value:
            fail(f"{where}: the {key} attribute needs version 2 of {op}, the file says "
                 "version 1")
    inputs = entry.get("inputs")
    if op in BIAS_V2 and version == 1 and type(inputs) is list and len(inputs) >= BIAS_V2[op]:
        fail(f"{where}: a bias input needs version 2 of {op}, the file says version 1")


SOURCES = ("input", "param", "const")
DTYPES = {str(d): d for d in SUPPORTED}
INT_LIMIT = 1 << 63
MAX_DIM = 1 << 62
MAX_STRING = 1 << 16


# -- attributes ----------------------------------------------------------------------------------
def encode_attr(value):
    """A plain attribute value as JSON: tuples as {"tuple": [...]}, floats that are not finite
    as {"float": "nan" | "inf" | "-inf"}; NumPy scalars as the Python value they equal."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, str):
        return value
    if isinstance(value, Dim):
        return encode_dim(value)
    if isinstance(value, tuple):
        return {"tuple": [encode_attr(v) for v in value]}
    raise GraphError(f"an attribute value {value!r} of type {type(value).__name__} has no "
                     "model-file form (numbers, strings, None and tuples of them)")


def decode_attr(value, limits: Limits, where: str, depth: int = 0, symbolic: bool = False):
    if depth > limits.max_attr_depth:
        fail(f"{where}: attribute nested deeper than {limits.max_attr_depth}")
    if value is None or type(value) in (bool, float):
        return value
    if type(value) is int:
        if not -INT_LIMIT <= value < INT_LIMIT:
            fail(f"{where}: integer attribute out of the int64 range")
        return value
    if type(value) is str:
        if len(value) > limits.max_attr_items:
            fail(f"{where}: string attribute over {limits.max_attr_items} characters")
        return value
    if type(value) is dict and len(value) == 1:
        if type(value.get("tuple")) is list:
            items = value["tuple"]
            if len(items) > limits.max_attr_items:
                fail(f"{where}: tuple attribute over {limits.max_attr_items} items")
            return tuple(decode_attr(v, limits, where, depth + 1, symbolic) for v in items)
        if value.get("float") in ("nan", "inf", "-inf"):
            return float(value["float"])
        if symbolic and "dim" in value:
            return _parse(value["dim"], where)  # its meaning the op's rule checks
    fail(f"{where}: {str(value)[:100]!r} is not an attribute value (number, string, null, "
         "{'tuple': [...]}, {'float': 'nan'|'inf'|'-inf'}" + (" or {'dim': text}" if symbolic
                                                             else "") + ")")


# -- types ---------------------------------------------------------------------------------------
def encode_dim(dim) -> int | dict:
    """A shape entry or attribute size: an int as itself, a named one as ``{"dim": text}``."""
    return {"dim": str(dim)} if isinstance(dim, Dim) else int(dim)


def encode_type(t: TensorType) -> dict:
    entry = {"shape": [encode_dim(d) for d in t.shape], "dtype": str(t.dtype)}
    if t.quant is not None:  # a reader without quantized types refuses the unknown key
        q = t.quant
        entry["quant"] = {"scales": list(q.scales), "zero_points": list(q.zero_points),
                          "axis": q.axis}
    return entry


def decode_quant(value, shape: tuple, where: str) -> QuantParams:
    """A type's quantization: finite positive scales, integer zero points, one each per index
    of ``axis`` (null: one of each for the tensor)."""
    entry = fields(value, {"scales", "zero_points", "axis"}, where)
    scales, zps, axis = entry["scales"], entry["zero_points"], entry["axis"]
    if axis is not None and (type(axis) is not int or not 0 <= axis < len(shape)):
        fail(f"{where}: quant axis {str(axis)[:20]} is not an axis of shape {shape}")
    count = 1 if axis is None else shape[axis]
    if type(scales) is not list or type(zps) is not list or len(scales) != len(zps) \
            or (isinstance(count, int) and len(scales) != count):
        fail(f"{where}: quant needs lists of {count} scales and zero points")
    if not all(type(v) in (int, float) for v in scales) or \
            not all(type(v) is int for v in zps):
        fail(f"{where}: quant scales must be numbers and zero points ints")
    try:
        return QuantParams(tuple(scales), tuple(zps), axis)
    except ValueError as exc:
        fail(f"{where}: {exc}")


def decode_type(value, limits: Limits, where: str, symbolic: bool = False) -> TensorType:
    entry = fields(value, {"shape", "dtype"}, where, optional={"quant"})
    shape, dtype = entry["shape"], entry["dtype"]
    if type(shape) is not list or len(shape) > limits.max_ndim:
        fail(f"{where}: shape must be a list of at most {limits.max_ndim} ints")
    shape = tuple(_decode_dim(d, shape, where, symbolic) for d in shape)
    if type(dtype) is not str or dtype not in DTYPES:
        fail(f"{where}: dtype {str(dtype)[:50]!r} is not one of {sorted(DTYPES)}")
    problem = size_problem(shape, DTYPES[dtype], {}, limits)
    if problem:
        fail(f"{where}: {problem}")
    quant = decode_quant(entry["quant"], shape, where) if "quant" in entry else None
    try:
        return TensorType(shape, DTYPES[dtype], quant)
    except GraphError as exc:
        fail(f"{where}: {exc}")


def _decode_dim(value, shape: list, where: str, symbolic: bool) -> int | Dim:
    if symbolic and type(value) is dict and set(value) == {"dim"}:
        dim = _parse(value["dim"], where)
        if isinstance(dim, int) or is_known_nonnegative(dim) is not False:
            value = dim
    if type(value) is int and 0 <= value <= MAX_DIM or isinstance(value, Dim):
        return value
    named = " or {'dim': text} never negative" if symbolic else ""
    fail(f"{where}: shape {str(shape)[:100]} must hold non-negative ints{named}")


def _parse(text, where: str) -> int | Dim:
    """A named dimension's text from a file: parsed as data (``parse_dim``), never run."""
    if type(text) is not str:
        fail(f"{where}: a named dimension is {{'dim': text}}, got {str(text)[:100]!r}")
    try:
        return parse_dim(text)
    except GraphError as exc:  # DimError: bad syntax, or over the sizes parse_dim allows
        fail(f"{where}: the dimension {text[:100]!r} is malformed: {str(exc)[:300]}")


def size_problem(shape: tuple, dtype: np.dtype, bindings: dict[str, int],
                 limits: Limits) -> str | None:
    """Why a value of ``shape`` and ``dtype`` with its names bound as ``bindings`` says would
    be over ``limits.max_tensor_bytes``, or None (a name not bound counts as 1, its least value,
    so that a file's constants are checked before any shape is fed)."""
    sizes, named = [], set()
    for d in shape:
        if isinstance(d, Dim):
            named |= dim_names(d)
            d = evaluate(d, {n: bindings.get(n, 1) for n in dim_names(d)})
        sizes.append(max(d, 0))  # below 0: a binding the rules refuse, not a size
    nbytes = math.prod(sizes) * dtype.itemsize
    if nbytes <= limits.max_tensor_bytes:
        return None
    at = "".join(f", {n}={bindings.get(n, 1)}" for n in sorted(named))
    of = f" ({dtype}[{', '.join(map(str, shape))}]{at})" if named else ""
    return f"a tensor of {nbytes} bytes{of} is over the limit of {limits.max_tensor_bytes}"


def fields(value, keys: set, where: str, optional: set = frozenset()) -> dict:
    """``value`` as an object with exactly ``keys`` (and maybe ``optional``)."""
    if type(value) is not dict:
        fail(f"{where}: expected an object, got {type(value).__name__}")
    missing, extra = keys - set(value), set(value) - keys - optional
    if missing or extra:
        fail(f"{where}: missing keys {sorted(missing)}, unexpected keys "
             f"{sorted(extra)[:10]}")
    return value


# -- writing -------------------------------------------------------------------------------------
def encode_graph(graph: Graph, outputs) -> tuple[dict, dict[int, int], list[np.ndarray]]:
    """The nodes ``outputs`` and the state updates need, and every input, as JSON; the file id
    of each saved Var (by Var id); the arrays of the params and consts, in member order."""
    live = _live(graph, outputs)
    ids: dict[int, int] = {}
    arrays: list[np.ndarray] = []
    members: dict[int, int] = {}  # id(array) -> member: params sharing an array share a member
    nodes = []
    for node in graph.nodes:
        name = node.op.name
        if name == "assign" or (node not in live and name != "input"):
            continue
        if name not in OP_VERSIONS:
            raise GraphError(f"op {name!r} has no model-file version (mgegraph.io.graph_json)")
        entry = {"op": name, "version": node_version(node),
                 "inputs": [ids[v.id] for v in node.inputs],
                 "outputs": [encode_type(v.type) for v in node.outputs],
                 "location": node.location}
        if name in SOURCES:
            var = node.outputs[0]
            if name != "const":
                entry["name"] = node.attr["name"]
            if name != "input":
                array = graph.values[var.id]
                if id(array) not in members:
                    members[id(array)] = len(arrays)
                    arrays.append(array)
                entry["array"] = f"arrays/{members[id(array)]}.npy"
            if name == "param":
                entry["shared"] = var.id in graph.shared
        else:
            entry["attrs"] = {key: encode_attr(value) for key, value in node.attrs
                              if (name, key) not in V2_ATTRS or entry["version"] == 2}
        for v in node.outputs:
            ids[v.id] = len(ids)
        nodes.append(entry)
    assigns = [[ids[n.inputs[0].id], ids[n.inputs[1].id]] for n in graph.assigns]
    return {"nodes": nodes, "assigns": assigns}, ids, arrays


def _live(graph: Graph, outputs) -> set[Node]:
    live: set[Node] = set()
    stack = [v.node for v in outputs] + [v.node for n in graph.assigns for v in n.inputs]
    while stack:
        node = stack.pop()
        if node not in live:
            live.add(node)
            stack.extend(v.node for v in node.inputs)
    return live


# -- reading -------------------------------------------------------------------------------------
NODE_KEYS = {"op", "version", "inputs", "outputs", "location"}


def decode_graph(value, container, limits: Limits, symbolic: bool = False) -> tuple[Graph, list]:
    """The Graph the JSON describes, rebuilt through its ops' rules, and its Vars by file id;
    ``symbolic``: shapes and attributes may hold named dimensions."""
    entry = fields(value, {"nodes", "assigns"}, "graph")
    nodes, assigns = entry["nodes"], entry["assigns"]
    if type(nodes) is not list or len(nodes) > limits.max_nodes:
        fail(f"graph.nodes must be a list of at most {limits.max_nodes} nodes")
    g, variables, used = Graph(), [], set()
    for i, node in enumerate(nodes):
        variables.extend(_decode_node(g, node, variables, container, limits, used, i,
                                       symbolic))
    if type(assigns) is not list:
        fail("graph.assigns must be a list of [param id, value id]")
    for k, pair in enumerate(assigns):
        if not (type(pair) is list and len(pair) == 2):
            fail(f"graph.assigns[{k}] must be [param id, value id]")
        target, new = (_var(variables, j, f"graph.assigns[{k}]") for j in pair)
        try:
            g.assign(target, new)
        except GraphError as exc:
            fail(f"graph.assigns[{k}]: {exc}")
    return g, variables, used


def _var(variables: list, index, where: str):
    if type(index) is not int or not 0 <= index < len(variables):
        fail(f"{where}: {str(index)[:50]} is not the id of an earlier value")
    return variables[index]


def _decode_node(g: Graph, value, variables, container, limits, used, i, symbolic):
    where = f"node {i}"
    op = value.get("op") if type(value) is dict else None
    if type(value) is dict and "op" in value and type(op) is not str:
        # (a list or an object would be sliced or looked up below: a TypeError, not a refusal)
        fail(f"{where}: op must be a string, not {type(op).__name__}")
    extra = {"input": {"name"}, "param": {"name", "array", "shared"},
             "const": {"array"}}.get(op, {"attrs"}) if type(op) is str else set()
    entry = fields(value, NODE_KEYS | extra, where)
    where = f"node {i} ({op[:50]})"
    if op not in OP_VERSIONS or op == "assign":
        fail(f"{where}: unknown op {op[:100]!r}")
    _check_version(op, entry, where)
    location = entry["location"]
    if type(location) is not str or len(location) > 4096:
        fail(f"{where}: location must be a string")
    if type(entry["inputs"]) is not list or type(entry["outputs"]) is not list \
            or len(entry["outputs"]) > 1024:
        fail(f"{where}: inputs and outputs must be lists")
    inputs = [_var(variables, j, f"{where} input {k}") for k, j in enumerate(entry["inputs"])]
    types = tuple(decode_type(t, limits, f"{where} output {k}", symbolic)
                  for k, t in enumerate(entry["outputs"]))
    try:
        if op in SOURCES:
            node = _source(g, op, entry, inputs, types, container, used, where)
        else:
            if type(entry["attrs"]) is not dict:
                fail(f"{where}: attrs must be an object")
            attrs = {k: decode_attr(v, limits, f"{where} attr {k[:50]}", symbolic=symbolic)
                     for k, v in entry["attrs"].items()}
            node = g.add_node(op, inputs, attrs, location=location)
    except ModelFormatError:
        raise
    except (GraphError, ValueError, TypeError, ArithmeticError) as exc:
        fail(f"{where}: {str(exc)[:500]}")
    got = tuple(v.type for v in node.outputs)
    if got != types:
        fail(f"{where}: the op's rule gives {', '.join(map(str, got)) or 'no outputs'}, the "
             f"file says {', '.join(map(str, types)) or 'no outputs'}")
    return node.outputs


def _source(g: Graph, op, entry, inputs, types, container, used, where) -> Node:
    if inputs or len(types) != 1:
        fail(f"{where}: a source takes no inputs and has one output")
    (t,) = types
    if op == "input":
        var = g.input(entry["name"], t.shape, t.dtype, t.quant)
    else:
        array = container.array(entry["array"], t.shape, t.dtype, used)
        if op == "const":
            var = g.const(array, quant=t.quant)
        elif type(entry["shared"]) is not bool:
            fail(f"{where}: 'shared' must be true or false")
        else:
            var = g.param(entry["name"], _shared_array(container, entry["array"], array)
                          if entry["shared"] else array, share=entry["shared"], quant=t.quant)
    return var.node


def _shared_array(container, member: str, array: np.ndarray) -> np.ndarray:
    """Params saved with one shared array get one array again (``share=True`` on both)."""
    return container.shared.setdefault(member, array)
