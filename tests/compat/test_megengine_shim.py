"""The renaming-only ``megengine`` package and the runner of MegEngine's own tests."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = os.path.join(ROOT, "compat", "megengine")
RUNNER = os.path.join(SHIM, "run_tests.py")


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=dict(os.environ, PYTHONPATH=SHIM, **env), check=False)


def test_megengine_names_are_the_mgegraph_modules_themselves():
    done = _run("""
        import mgegraph, megengine as mge, megengine.functional as F
        from megengine.nn import Linear
        import megengine.ir.errors
        assert mge is mgegraph and F is mgegraph.functional
        assert Linear is mgegraph.nn.Linear
        assert megengine.ir.errors is importlib.import_module("mgegraph.ir.errors")
    """.replace("import mgegraph,", "import importlib, mgegraph,"))
    assert done.returncode == 0, done.stderr


def test_a_name_mgegraph_lacks_is_a_plain_import_error():
    done = _run("""
        import megengine
        for name in ("megengine.core._imperative_rt", "megengine.no_such_module"):
            try:
                __import__(name)
            except ModuleNotFoundError as error:
                assert name.startswith(error.name), error
            else:
                raise SystemExit(name + " imported")
    """)
    assert done.returncode == 0, done.stderr


FAKE_TEST = '''
import pytest
import megengine as mge
import megengine.functional as F
from megengine.core._imperative_rt.core2 import apply
from megengine.functional import _a_private_name
from megengine.functional.elemwise import Elemwise  # MegEngine's re-export of an internal


def test_passes():
    assert F.relu(mge.tensor([-1.0, 2.0])).numpy().tolist() == [0.0, 2.0]


def test_fails():
    assert F.relu(mge.tensor([-1.0])).numpy().tolist() == [-1.0]


def test_uses_an_internal():
    apply(None)


def test_uses_a_private_name():
    _a_private_name()


def test_uses_an_internal_reexport():
    assert Elemwise(mode="add") is not None


def test_reads_an_internal_reexports_namespace():
    for key, mode in vars(Elemwise.Mode).items():  # an empty namespace would pass vacuously
        assert isinstance(mode, Elemwise.Mode)


def test_reads_a_private_attribute():
    assert mge.tensor([1.0])._tuple_shape == (1,)


@pytest.mark.require_ngpu(2)
def test_needs_gpus():
    raise AssertionError("must be skipped")
'''


def test_runner_sorts_outcomes(tmp_path):
    folder = tmp_path / "imperative" / "python" / "test" / "unit" / "functional"
    folder.mkdir(parents=True)
    (folder / "test_fake.py").write_text(FAKE_TEST)
    (folder.parent.parent / "conftest.py").write_text("raise RuntimeError('never read')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, RUNNER, "--megengine", str(tmp_path), "--groups",
                           "functional", "--failures"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("functional"))
    assert row.split()[1:7] == ["1", "1", "0", "5", "1", "50%"], done.stdout
    assert "test_fake.py::test_fails" in done.stdout


QUANT_TEST = '''
import megengine as mge
from megengine.quantization import QuantMode, create_qparams


def test_a_tensor_carries_qparams():
    x = mge.tensor([1.0])
    x.qparams.update(create_qparams(QuantMode.SYMMERTIC, "qint8", mge.tensor(0.5)))
    assert float(x.qparams.scale.numpy()) == 0.5
'''


def test_the_quantization_group_counts_megengines_quantization_as_applying(tmp_path):
    # its folder and the one file it names from unit/module (which the module group excludes)
    unit = tmp_path / "imperative" / "python" / "test" / "unit"
    for folder, name in (("quantization", "test_fake_quant.py"), ("module", "test_qat.py")):
        (unit / folder).mkdir(parents=True)
        (unit / folder / name).write_text(QUANT_TEST)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, RUNNER, "--megengine", str(tmp_path), "--groups",
                           "quantization"], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("quantization"))
    assert row.split()[1:7] == ["2", "0", "0", "0", "0", "100%"], done.stdout
