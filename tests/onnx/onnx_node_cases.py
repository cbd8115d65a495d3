"""The ONNX backend's node test cases for the operators of issue 16, collected once, and how
one is run through mgegraph's importer.

The installed ``onnx`` wheel ships no test data, only the generators in
``onnx.backend.test.case.node``; ``collect_testcases`` runs them all and keeps every case
(model, inputs, expected outputs) in memory.

    python tests/onnx/onnx_node_cases.py      # the pass count per operator and in total
"""
from __future__ import annotations

import collections
import functools
import re
import warnings

import numpy as np

# the operators needed for MLPs, CNNs, ResNets and a small transformer (issue 16)
OPERATORS = ["Gemm", "MatMul", "Conv", "BatchNormalization", "Relu", "Gelu", "Softmax", "LayerNormalization", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Add", "Mul", "Sub", "Div", "Reshape", "Transpose", "Concat", "Gather", "Slice", "Flatten", "Unsqueeze", "Squeeze", "ReduceMean", "ReduceSum", "ReduceMax", "Cast", "Erf", "Tanh", "Sigmoid", "Exp", "Log", "Sqrt", "Pow", "Where", "Equal", "Less", "Greater", "Expand", "Split", "Constant", "Shape", "ConstantOfShape", "Range", "Trilu"]


@functools.lru_cache(maxsize=1)
def cases() -> dict:
    """op -> [TestCase]: the single-node cases whose node is that op, and the same cases with
    a function op expanded into its body (``test_layer_normalization_2d_axis0_expanded``)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        every = collect_testcases()
    out = {op: [] for op in OPERATORS}
    op_of = {}
    for case in every:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in out and "_expanded" not in case.name:
            out[nodes[0].op_type].append(case)
            op_of[case.name] = nodes[0].op_type
    for case in every:
        base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
        if base != case.name and base in op_of:
            out[op_of[base]].append(case)
    return out


def _array(x):
    from onnx import numpy_helper
    return np.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else numpy_helper.to_array(x)


class Unsupported(Exception):
    """The importer refused the case with a reason (a dtype, a feature): a skip, not a pass."""


def run_case(case):
    """Import ``case.model``, run it and compare with the expected outputs (the case's rtol and
    atol, and the exact shape and dtype). Inputs whose values decide a shape (Reshape's shape,
    Slice's starts) are bound as constants, as ``import_graph(constants=)`` documents, and the
    return value says which were. Raises Unsupported or AssertionError."""
    import mgegraph.onnx as mo

    model = case.model
    inputs, expected = case.data_sets[0]
    feeds = dict(zip([i.name for i in model.graph.input], map(_array, inputs)))
    bound = {}
    while True:
        try:
            plan = mo.import_model(model, constants=bound)
            break
        except mo.OnnxImportError as exc:
            new = [n for n in exc.needs_constant if n not in bound]
            if not new:
                raise Unsupported(str(exc)) from None
            bound.update((n, feeds[n]) for n in new)
    got = plan.run({k: v for k, v in feeds.items() if k not in bound})
    assert len(got) == len(expected)
    for value, want in zip(got, map(_array, expected)):
        assert value.shape == want.shape and value.dtype == want.dtype, (
            f"{value.shape} {value.dtype} != {want.shape} {want.dtype}")
        np.testing.assert_allclose(value, want, rtol=case.rtol, atol=case.atol)
    return tuple(bound)


def summary() -> dict:
    """op -> Counter(pass/bound/skip/fail)."""
    table = {}
    for op, found in cases().items():
        counts = collections.Counter()
        for case in found:
            try:
                bound = run_case(case)
                counts["pass"] += 1
                counts["of which bound"] += bool(bound)
            except Unsupported:
                counts["skip"] += 1
            except Exception:  # noqa: BLE001 - a failure, counted
                counts["fail"] += 1
        table[op] = counts
    return table


if __name__ == "__main__":
    total = collections.Counter()
    for op, counts in summary().items():
        total.update(counts)
        print(f"{op:20s} " + " ".join(f"{k}={counts[k]}" for k in
                                      ("pass", "of which bound", "skip", "fail")))
    print(f"{'TOTAL':20s} " + " ".join(f"{k}={total[k]}" for k in
                                      ("pass", "of which bound", "skip", "fail")))
