"""The examples run as a user runs them: a fresh interpreter, exit status 0, the expected output."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# runs the example with sklearn unimportable, as on a machine without it
_WITHOUT_SKLEARN = ("import runpy, sys; sys.modules['sklearn'] = None; sys.argv = sys.argv[1:]; "
                    "runpy.run_path(sys.argv[0], run_name='__main__')")


def _run(*argv, without_sklearn=False) -> str:
    script = str(EXAMPLES / argv[0])
    prefix = [sys.executable, "-c", _WITHOUT_SKLEARN] if without_sklearn else [sys.executable]
    proc = subprocess.run([*prefix, script, *argv[1:]], check=False, capture_output=True, text=True,
                          timeout=60, cwd=EXAMPLES.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _check_megengine_style(out: str) -> None:
    batches = re.findall(r"first batch (\d+\.\d+), last batch (\d+\.\d+)", out)
    assert len(batches) == 1, out
    first, last = map(float, batches[0])
    assert last < first, out
    accuracy = re.search(r"^test accuracy (\d\.\d+) after 1 epochs", out, re.MULTILINE)
    assert accuracy is not None, out
    assert 0.0 <= float(accuracy.group(1)) <= 1.0


@pytest.mark.parametrize("without_sklearn", [False, True], ids=["as-installed", "no-sklearn"])
def test_megengine_style_trains_and_prints_accuracy(without_sklearn):
    out = _run("megengine_style.py", "--epochs", "1", without_sklearn=without_sklearn)
    _check_megengine_style(out)
    assert ("scikit-learn is not installed" in out) == (
        without_sklearn or not _importable("sklearn")), out


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


def test_quickstart_runs():
    assert "max |mgegraph - numpy|" in _run("quickstart.py")


def test_lstm_classifier_trains_saves_and_matches_onnx_runtime():
    """A short run: the loss falls, the model file's logits equal the plan's, and ONNX Runtime
    agrees with the exported model (the full run reaches accuracy 1.0; this one only trains)."""
    out = _run("lstm_classifier.py", "--steps", "30", "--bidirectional")
    first, last = map(float, re.search(r"loss (\d\.\d+) -> (\d\.\d+)", out).groups())
    assert last < first, out
    assert "loaded logits equal bitwise" in out, out
    assert ("max |ONNX Runtime - mgegraph|" in out) == _importable("onnxruntime"), out
    assert re.search(r"^test accuracy \d\.\d+ \(chance 0\.5\)", out, re.MULTILINE), out
