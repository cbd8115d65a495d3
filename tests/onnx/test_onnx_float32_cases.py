"""Every ONNX backend node case made of float32 tensors alone (751 with onnx 1.23; ONNX Runtime
1.32 passes 723), run as ``python tests/onnx/onnx_node_cases.py --float32`` runs them: all pass
but the few listed here, each with why it stays failing."""
import pytest

pytest.importorskip("onnx.helper")
from onnx_node_cases import float32_cases, summary

# case -> why it fails by design (ONNX Runtime fails these three too)
KNOWN_FAILURES = {
    # random draws: the expected output is NumPy's generator's, which no other generator gives
    "test_bernoulli_seed": "Bernoulli: random",
    "test_bernoulli_seed_expanded": "RandomUniformLike: random",
    # the expected output holds float32 rounding noise of NumPy's transform (1.9e-7 where the
    # exact inverse is 0), above the case's atol of 1e-7; mgegraph's float64 products give 3e-15
    "test_dft_inverse_opset19": "DFT: the reference's rounding noise",
}
PASSING_AT_LEAST = 748


@pytest.mark.filterwarnings("ignore")
def test_every_float32_case_passes_but_the_known_failures():
    why = []
    table = summary(strict=False, every_float32=True, why=why)
    failed = {name for name, _ in why}
    assert failed <= set(KNOWN_FAILURES), sorted(r for r in why if r[0] not in KNOWN_FAILURES)
    assert sum(c["pass"] for c in table.values()) >= PASSING_AT_LEAST
    assert sum(map(len, float32_cases().values())) >= PASSING_AT_LEAST + len(failed)
