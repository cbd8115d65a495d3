"""(export) A half-precision node whose ONNX ops do not take its half type, written between
Casts: the node on float32, its half inputs widened and its results rounded back.

Design: that is what the node means in mgegraph (every op but those that move or convert bytes
computes in float32 and rounds its result to the half type once: ``ops.registry``), so the
rewrite changes no value; it is needed where ONNX's schema has no kernel type for the half type
(``Conv`` and the pooling ops take float16 but not bfloat16), and used only there, so an
exported float16 model keeps its float16 ops for the runtime. Whether an op takes the type is
read from ONNX's own schemas at the export's opset, by following the half values through the
nodes the op's writer emitted (a type variable bound to a half input makes its outputs half).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..ir.graph import Graph
from ..ir.types import HALF_DTYPES

FLOAT32 = np.dtype(np.float32)


def half_types(node) -> set:
    """The half dtypes ``node`` reads or makes."""
    return {v.dtype for v in (*node.inputs, *node.outputs) if v.dtype in HALF_DTYPES}


def _formal(schema, params, index: int):
    """The formal parameter of input or output ``index`` (a variadic last one repeats)."""
    if index < len(params):
        return params[index]
    last = params[-1] if params else None
    return last if last is not None and last.option == last.option.Variadic else None


def _allowed(schema, type_str: str) -> set[str]:
    for c in schema.type_constraints:
        if c.type_param_str == type_str:
            return set(c.allowed_type_strs)
    return {type_str}  # a concrete type ("tensor(int64)")


def refuses(nodes, half_names: set[str], dtype: np.dtype, opset: int) -> str | None:
    """The first ONNX op of ``nodes`` (in order) whose schema does not take ``dtype`` on an
    input that holds it, or None; ``half_names`` are the values holding it at the start."""
    want = f"tensor({'float16' if dtype == np.float16 else 'bfloat16'})"
    half = set(half_names)
    for n in nodes:
        schema = onnx.defs.get_schema(n.op_type, opset, n.domain)
        bound = set()
        for i, name in enumerate(n.input):
            formal = _formal(schema, schema.inputs, i)
            if name in half and formal is not None:
                if want not in _allowed(schema, formal.type_str):
                    return n.op_type
                bound.add(formal.type_str)
        for i, name in enumerate(n.output):
            formal = _formal(schema, schema.outputs, i)
            if formal is not None and formal.type_str in bound:
                half.add(name)
    return None


def widened_node(node):
    """``node`` made again on float32 inputs in a graph of its own (its rule run on them), for
    its writer to write the float32 form."""
    g = Graph()
    inputs = [g.input(f"x{i}", v.shape, FLOAT32 if v.dtype in HALF_DTYPES else v.dtype)
              for i, v in enumerate(node.inputs)]
    return g.add_node(node.op.name, inputs, node.attr)


def write(w, node, ins, writer) -> list[str]:
    """``writer(w, node, ins)``'s output names; where its ONNX ops refuse one of the node's half
    types, what it wrote is dropped and the node is written widened instead."""
    nodes, inits = len(w.nodes), len(w.initializers)
    outs = writer(w, node, ins)
    for dtype in half_types(node):
        code = helper.np_dtype_to_tensor_dtype(dtype)
        names = {name for name, v in zip(ins, node.inputs) if v.dtype == dtype}
        names |= {t.name for t in w.initializers[inits:] if t.data_type == code}
        if refuses(w.nodes[nodes:], names, dtype, w.opset):
            del w.nodes[nodes:], w.initializers[inits:]
            return write_widened(w, node, ins, writer)
    return outs


def write_widened(w, node, ins, write) -> list[str]:
    """Write ``node`` with ``write(w, node, ins)`` between Casts to float32 and back."""
    wide = widened_node(node)
    cast_in = [w.add("Cast", [name], to=TensorProto.FLOAT)[0] if v.dtype in HALF_DTYPES
               else name for name, v in zip(ins, node.inputs)]
    outs = write(w, wide, cast_in)
    return [w.add("Cast", [name], to=helper.np_dtype_to_tensor_dtype(v.dtype))[0]
            if v.dtype in HALF_DTYPES else name for name, v in zip(outs, node.outputs)]
