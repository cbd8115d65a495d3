"""The ONNX backend's node cases of the operators of issue 16 through the importer: each passes
or is skipped with the importer's reason (an unsupported dtype or feature); none fails."""
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


def test_every_operator_has_a_passing_case():
    missing = []
    for op, found in cases().items():
        passed = 0
        for case in found:
            try:
                run_case(case)
                passed += 1
            except Unsupported:
                pass
        if not passed:
            missing.append(op)
    assert not missing, f"operators with no passing node case: {missing}"
