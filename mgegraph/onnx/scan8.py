"""``Scan`` of opset 8 (a batch axis first on every state and scan input, each row scanned on
its own) rewritten, before onnx's version converter takes the model up to opset 13, as one
unbatched Scan per row between ``Split``/``Squeeze`` and ``Unsqueeze``/``Concat``.

Design: onnx's own adapter from Scan 8 to 9 only strips the leading axis from the declared
shapes of the node's values and keeps the node, so a model with a batch of 1 imports declared
without the axis its data has, and one with a larger batch means something else. Here each row
becomes a Scan whose inputs are that row; the adapter then has only the attribute's new name
to change. The batch is read from onnx's shape inference of the opset-8 model, so it must be a
number there. ``sequence_lens`` (rows of different lengths) is refused.
"""
from __future__ import annotations

import onnx
from onnx import helper

from . import OnnxImportError


def unbatched_scans(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (opset 8) with every Scan, in any graph, one Scan per batch row; a model
    without Scan as it is."""
    if not _has_scan(model.graph):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    inferred = onnx.shape_inference.infer_shapes(model)
    used = set()
    _names(model.graph, used)
    _rewrite(model.graph, inferred.graph, {}, used)
    return model


def _subgraphs(node) -> list:
    return [g for attr in node.attribute for g in [attr.g] * attr.HasField("g") + list(attr.graphs)]


def _has_scan(graph) -> bool:
    return any(n.op_type == "Scan" or any(map(_has_scan, _subgraphs(n))) for n in graph.node)


def _names(graph, used: set) -> None:
    """Every value name of ``graph`` and its subgraphs, added to ``used``."""
    for node in graph.node:
        used.update([*node.input, *node.output])
        for body in _subgraphs(node):
            used.update(vi.name for vi in body.input)
            _names(body, used)
    used.update(vi.name for vi in [*graph.input, *graph.output])


def _rewrite(graph, inferred, outer: dict, used: set) -> None:
    """Scans of ``graph`` and its subgraphs made per row; ``inferred`` is the same graph after
    shape inference, ``outer`` the shapes of the enclosing scopes' names."""
    shapes = {**outer, **{vi.name: [d.dim_value if d.HasField("dim_value") else None
                                    for d in vi.type.tensor_type.shape.dim]
                          for vi in [*inferred.input, *inferred.value_info, *inferred.output]
                          if vi.type.HasField("tensor_type")}}
    for node, twin in zip(graph.node, inferred.node):
        for body, body_twin in zip(_subgraphs(node), _subgraphs(twin)):
            _rewrite(body, body_twin, shapes, used)
    nodes = []
    for node in graph.node:
        nodes += _per_row(node, shapes, used) if node.op_type == "Scan" else [node]
    del graph.node[:]
    graph.node.extend(nodes)


def _per_row(node, shapes: dict, used: set) -> list:
    where = f"node {node.name or node.output[0]!r} (Scan, opset 8)"
    if node.input and node.input[0]:
        raise OnnxImportError(f"{where}: sequence_lens (rows of different lengths) is not "
                              "supported; each row is scanned over the whole sequence")
    values = list(node.input[1:])
    rows = {(shapes.get(v) or [None])[0] for v in values}
    if len(rows) != 1 or not isinstance(next(iter(rows)), int) or next(iter(rows)) < 1:
        raise OnnxImportError(f"{where}: its batch size (the first axis of its inputs) must be "
                              f"one number known from the model, found {sorted(map(str, rows))}")
    batch = rows.pop()
    fresh = lambda stem: _fresh(f"{node.output[0]}_{stem}", used)  # noqa: E731
    out, row_inputs = [], [[] for _ in range(batch)]
    for v in values:
        parts = [fresh(f"in_row{b}") for b in range(batch)] if batch > 1 else [v]
        if batch > 1:
            out.append(helper.make_node("Split", [v], parts, axis=0, split=[1] * batch))
        for b, part in enumerate(parts):
            row_inputs[b].append(fresh(f"in_row{b}_squeezed"))
            out.append(helper.make_node("Squeeze", [part], [row_inputs[b][-1]], axes=[0]))
    row_outputs = []
    for b in range(batch):
        row_outputs.append([fresh(f"out{j}_row{b}") for j in range(len(node.output))])
        scan = helper.make_node("Scan", [""] + row_inputs[b], row_outputs[b])
        scan.attribute.extend(node.attribute)
        out.append(scan)
    for j, name in enumerate(node.output):
        lifted = [fresh(f"out{j}_row{b}_unsqueezed") for b in range(batch)]
        out += [helper.make_node("Unsqueeze", [row_outputs[b][j]], [lifted[b]], axes=[0])
                for b in range(batch)]
        out.append(helper.make_node("Concat", lifted, [name], axis=0))
    return out


def _fresh(name: str, used: set) -> str:
    n, candidate = 1, name
    while candidate in used:
        n += 1
        candidate = f"{name}_{n}"
    used.add(candidate)
    return candidate
