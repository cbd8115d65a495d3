"""The table the importer reads: ONNX op -> converter (``CONVERTERS``), the families' tables
merged (``convert_math``: elementwise math and reductions; ``convert_nn``: matmul, conv,
pooling, norms, softmax; ``convert_shape``: shapes, movement, constants), and which definitions
of an op the converters were written for (``same_semantics``, ``check_ops``).

Adding an ONNX op is one entry in its family's ``CONVERTERS``; ``merge`` refuses an entry that
names no ONNX op or an op another family converts.
"""
from __future__ import annotations

from collections import Counter

import onnx

from . import (
    SUPPORTED_OPSETS,
    OnnxImportError,
    convert_attention,  # Attention (opsets 23-25) as a composition
    convert_linalg,  # DFT, Det, OneHot on small static sizes
    convert_math,
    convert_ml,  # ai.onnx.ml: Binarizer, TreeEnsemble
    convert_nn,
    convert_quant,  # QuantizeLinear, DequantizeLinear
    convert_recurrent,  # LinearAttention, CausalConvWithState
    convert_resample,
    convert_rnn,  # RNN, GRU, LSTM
    convert_scan,  # Scan unrolled over its static trip count
    convert_sequence,  # RMS norm, rotary embeddings, SwiGLU
    convert_shape,
    convert_sorting,  # TopK, CumSum
    convert_vision,  # image sampling and detection
)
from .context import Converter

# Attributes later revisions added that the converters accept at their defaults' meaning
# (Range-27's stash_type picks the accumulation type of float16 and bfloat16 ranges; Cast-24's
# and CastLike-24's round_mode the rounding to float8e8m0: types mgegraph does not have).
LATER_ATTRIBUTES = {"Range": {"stash_type"}, "Cast": {"round_mode"}, "CastLike": {"round_mode"}}
# Ops first defined after opset 21, with the definition (its opset) their converters follow
LATER_OPS = {"Swish": 24}
# the ops of sequence models (convert_sequence.py)
LATER_OPS |= {"RMSNormalization": 23, "RotaryEmbedding": 23, "SwiGLU": 28}
# SpaceToDepth-28's mode (CRD beside the DCR order of before), which its converter reads
LATER_ATTRIBUTES |= {"SpaceToDepth": {"mode"}}
# ops of ONNX's other domains, by (domain, op): the definition (version) each converter follows
DOMAIN_OPS = {("ai.onnx.preview", "FlexAttention"): 1,
              ("ai.onnx.ml", "Binarizer"): 1, ("ai.onnx.ml", "TreeEnsemble"): 5}
# ops first defined after opset 21 whose converters read several revisions: Attention's
# (convert_attention.py; 24 added nonpad_kv_seqlen, 25 the sliding window), opset 27's
# recurrent ops (convert_recurrent.py)
LATER_VERSIONS = {"Attention": (23, 24, 25), "LinearAttention": (27,),
                  "CausalConvWithState": (27,)}
# the quantizers' every revision (convert_quant.py reads what each added: block_size and
# output_dtype at 21, QuantizeLinear's precision and DequantizeLinear's output_dtype at 23, and
# refuses the types it lacks: 4-bit, 16-bit, float8, float scales other than float32)
LATER_VERSIONS |= dict.fromkeys(("QuantizeLinear", "DequantizeLinear"),
                                (13, 19, 21, 23, 24, 25, 28))


def merge(*families) -> dict[str, Converter]:
    """One table of the families' (modules with a ``CONVERTERS``): ValueError naming the op and
    the family unless each op is one of ONNX's default domain, converted by a callable, and in
    one family only.

    >>> sorted(merge(convert_nn))[:3]
    ['AveragePool', 'BatchNormalization', 'Conv']
    """
    table, family_of = {}, {}
    for family in families:
        for op, convert in family.CONVERTERS.items():
            where = f"{family.__name__}: ONNX op {op!r}"
            if op in table:
                raise ValueError(f"{where} is converted in {family_of[op]} too")
            if not onnx.defs.has(op) and all(op != o for _, o in DOMAIN_OPS):
                raise ValueError(f"{where} is no op of ONNX's default domain")
            if not callable(convert):
                raise ValueError(f"{where} maps to {convert!r}, which is not callable")
            table[op], family_of[op] = convert, family.__name__
    return table


CONVERTERS = merge(convert_math, convert_nn, convert_shape, convert_vision, convert_resample,
                   convert_sorting, convert_sequence,
                   convert_rnn,  # recurrent layers: RNN, GRU, LSTM
                   convert_attention, convert_scan, convert_recurrent, convert_linalg,
                   convert_quant, convert_ml)


def same_semantics(op_type: str, opset: int) -> bool:
    """Whether ``op_type`` at ``opset`` means what its converter was written for: the op's
    definition in force at ``opset`` is one from opsets 13..21, or a later revision that only
    added element types (same inputs, outputs and attributes; every earlier type still allowed),
    as opsets 22 (bfloat16), 23 (float4), 24 (float8e8m0), 25 (int2) and 28 (float6) did; an
    op of ``LATER_OPS`` in the definition its converter follows."""
    try:
        new = onnx.defs.get_schema(op_type, opset, "")
        if op_type in LATER_OPS:
            return new.since_version == LATER_OPS[op_type]
        if op_type in LATER_VERSIONS:
            return new.since_version in LATER_VERSIONS[op_type]
        old = onnx.defs.get_schema(op_type, min(opset, SUPPORTED_OPSETS[-1]), "")
    except onnx.defs.SchemaError:
        return False
    if new.since_version == old.since_version:
        return True
    types = lambda s: {t.type_param_str: set(t.allowed_type_strs) for t in s.type_constraints}
    old_types, new_types = types(old), types(new)
    return ([i.name for i in new.inputs] == [i.name for i in old.inputs]
            and [o.name for o in new.outputs] == [o.name for o in old.outputs]
            and set(new.attributes) - LATER_ATTRIBUTES.get(op_type, set()) == set(old.attributes)
            and all(old_types[k] <= new_types.get(k, set()) for k in old_types))


def _domain_op_known(node, domains: dict) -> bool:
    """Whether a node of another domain is one of ``DOMAIN_OPS`` in the definition its
    converter follows, at the version the model imports that domain."""
    since = DOMAIN_OPS.get((node.domain, node.op_type))
    if since is None or node.domain not in domains:
        return False
    try:
        schema = onnx.defs.get_schema(node.op_type, domains[node.domain], node.domain)
    except onnx.defs.SchemaError:
        return False
    return schema.since_version == since


def check_ops(graph_proto, opset: int, domains: dict | None = None) -> None:
    """Every node's op must have a converter at this opset (and ``domains``, the model's other
    domains' versions): all others reported at once."""
    missing = Counter()
    for node in graph_proto.node:
        if node.domain not in ("", "ai.onnx"):
            if not _domain_op_known(node, domains or {}):
                missing[f"{node.domain}.{node.op_type}"] += 1
        elif node.op_type not in CONVERTERS or not same_semantics(node.op_type, opset):
            missing[node.op_type] += 1
    if missing:
        listed = ", ".join(f"{op} (x{n})" for op, n in sorted(missing.items()))
        raise OnnxImportError(f"unsupported ONNX ops at opset {opset}: {listed}; nothing was "
                              "imported", unsupported=dict(missing))
