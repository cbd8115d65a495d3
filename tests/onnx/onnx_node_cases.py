"""The ONNX backend's node test cases for the operators of issue 16, collected once, and how
one is run through mgegraph's importer.

The installed ``onnx`` wheel ships no test data, only the generators in
``onnx.backend.test.case.node``; ``collect_testcases`` runs them all and keeps every case
(model, inputs, expected outputs) in memory.

    python tests/onnx/onnx_node_cases.py      # the pass count per operator and in total,
                                              # every input fed at run time (strict)
    python tests/onnx/onnx_node_cases.py --ort    # and ONNX Runtime's on the same cases
    python tests/onnx/onnx_node_cases.py --bind   # shape-deciding inputs bound as constants
    python tests/onnx/onnx_node_cases.py --float32 [--ort] [--fails]
        # every case whose inputs and outputs are all float32 (any op; a function op's
        # expansion counted under the op), shape-deciding inputs bound; --fails lists why
    python tests/onnx/onnx_node_cases.py --half [--ort] [--fails]
        # the same over every case with a float16 or bfloat16 input or output
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
    every = _every()
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


def _every():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return collect_testcases()


@functools.lru_cache(maxsize=1)
def float32_cases() -> dict:
    """op -> [TestCase]: every case whose graph inputs and outputs are all float32 tensors
    (the measure of coverage ONNX Runtime is compared on), under its op's name; a function
    op's expanded body counts under the op it expands."""
    out = collections.defaultdict(list)
    for case in _every():
        values = list(case.model.graph.input) + list(case.model.graph.output)
        if all(v.type.tensor_type.elem_type == 1 for v in values):  # 1: TensorProto.FLOAT
            nodes = case.model.graph.node
            op = nodes[0].op_type if len(nodes) == 1 else _expanded_op(case.name)
            out[op].append(case)
    return dict(out)


@functools.lru_cache(maxsize=1)
def half_cases() -> dict:
    """op -> [TestCase]: every case with a float16 or bfloat16 graph input or output, counted
    as ``float32_cases`` counts."""
    out = collections.defaultdict(list)
    for case in _every():
        values = list(case.model.graph.input) + list(case.model.graph.output)
        if any(v.type.tensor_type.elem_type in (10, 16) for v in values):  # FLOAT16, BFLOAT16
            nodes = case.model.graph.node
            op = nodes[0].op_type if len(nodes) == 1 else _expanded_op(case.name)
            out[op].append(case)
    return dict(out)


def _expanded_op(name: str) -> str:
    base = re.sub(r"_expanded(_ver\d+)?$", "", name)
    return f"{base} (expanded)"


def _array(x):
    from onnx import numpy_helper
    return np.asarray(x) if isinstance(x, (np.ndarray, np.generic)) else numpy_helper.to_array(x)


class Unsupported(Exception):
    """The importer refused the case with a reason (a dtype, a feature): a skip, not a pass."""


def run_case(case, strict: bool = True):
    """Import ``case.model``, run it and compare with the expected outputs (the case's rtol and
    atol, and the exact shape and dtype). Strict (the default) feeds every graph input at run
    time, as ONNX Runtime is fed, so inputs whose values decide a shape (Reshape's shape,
    Slice's starts) are read from the feeds; ``strict=False`` binds those as constants, as
    ``import_graph(constants=)`` documents. Returns the names of the inputs that decided
    shapes. Raises Unsupported or AssertionError."""
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
            if not new or strict:
                raise Unsupported(str(exc)) from None
            bound.update((n, feeds[n]) for n in new)
    got = plan.run({k: v for k, v in feeds.items() if k not in bound})
    _compare(case, got, expected)
    return tuple(bound) or tuple(getattr(plan, "shape_inputs", ()))


def _compare(case, got, expected):
    assert len(got) == len(expected)
    for value, want in zip(got, map(_array, expected)):
        value = np.asarray(value)
        assert value.shape == want.shape and value.dtype == want.dtype, (
            f"{value.shape} {value.dtype} != {want.shape} {want.dtype}")
        np.testing.assert_allclose(value, want, rtol=case.rtol, atol=case.atol)


def run_case_ort(case):
    """The same case through ONNX Runtime (every input fed), for the comparison column."""
    import onnxruntime as ort

    inputs, expected = case.data_sets[0]
    feeds = dict(zip([i.name for i in case.model.graph.input], map(_array, inputs)))
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(case.model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    _compare(case, session.run(None, feeds), expected)


def summary(strict: bool = True, ort: bool = False, every_float32: bool = False,
            why: list | None = None, half: bool = False) -> dict:
    """op -> Counter(pass / of which shapes fed / skip / fail, and ORT's pass and fail);
    ``why`` collects (case, reason) of each skip and failure; ``half``: the half cases."""
    table = {}
    chosen = half_cases() if half else float32_cases() if every_float32 else cases()
    for op, found in chosen.items():
        counts = collections.Counter()
        for case in found:
            try:
                fed = run_case(case, strict)
                counts["pass"] += 1
                counts["of which shapes fed"] += bool(fed)
            except Unsupported as exc:
                counts["skip"] += 1
                if why is not None:
                    why.append((case.name, str(exc)[:200]))
            except Exception as exc:  # noqa: BLE001 - a failure, counted
                counts["fail"] += 1
                if why is not None:
                    why.append((case.name, f"{type(exc).__name__}: {str(exc)[:200]}"))
            if ort:
                try:
                    run_case_ort(case)
                    counts["ORT pass"] += 1
                except Exception:  # noqa: BLE001 - ORT's failure, counted
                    counts["ORT fail"] += 1
        table[op] = counts
    return table


if __name__ == "__main__":
    import sys

    every_float32, half = "--float32" in sys.argv, "--half" in sys.argv
    strict = "--bind" not in sys.argv and not every_float32 and not half
    ort = "--ort" in sys.argv
    why = [] if "--fails" in sys.argv else None
    columns = ("pass", "of which shapes fed", "skip", "fail") + (("ORT pass", "ORT fail")
                                                                 if ort else ())
    total = collections.Counter()
    print("strict: every graph input fed at run time" if strict else
          "--bind: inputs that decide shapes bound with constants=")
    for op, counts in sorted(summary(strict, ort, every_float32, why, half).items()):
        total.update(counts)
        print(f"{op:20s} " + " ".join(f"{k}={counts[k]}" for k in columns))
    print(f"{'TOTAL':20s} " + " ".join(f"{k}={total[k]}" for k in columns))
    for name, reason in why or ():
        print(f"{name}: {reason}")
