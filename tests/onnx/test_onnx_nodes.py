"""The ONNX backend's node cases of the operators of issue 16 through the importer, every graph
input fed at run time as ONNX Runtime is fed: each passes or is skipped with the importer's
reason (an unsupported dtype or feature); none fails."""
import functools

import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it

from onnx_node_cases import Unsupported, cases, run_case


def _params():
    return [pytest.param(case, id=f"{op}-{case.name}") for op, found in cases().items()
            for case in found]


@pytest.mark.parametrize("case", _params())
def test_node_case(case):
    try:
        run_case(case)
    except Unsupported as exc:
        pytest.skip(str(exc))


@functools.lru_cache(maxsize=1)
def _outcomes() -> dict:
    """case name -> (op, None when it passed, else the importer's reason for skipping it)."""
    out = {}
    for op, found in cases().items():
        for case in found:
            try:
                run_case(case)
                out[case.name] = (op, None)
            except Unsupported as exc:
                out[case.name] = (op, str(exc))
    return out


def test_every_operator_has_a_passing_case():
    passed = {op for op, reason in _outcomes().values() if reason is None}
    missing = [op for op in cases() if op not in passed]
    assert not missing, f"operators with no passing node case: {missing}"


def test_only_dtypes_and_loop_skip_a_case():
    """Shapes fed as data, 3-D pooling and MaxPool's Indices run; what is left is a dtype
    mgegraph has not (uint16, float8, ...) and Range's expansion into a Loop."""
    others = {name: reason for name, (_, reason) in _outcomes().items()
              if reason is not None and "dtype" not in reason and "Loop" not in reason}
    assert not others, others
