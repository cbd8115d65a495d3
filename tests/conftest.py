"""Every plan a test compiles goes through the plan checker (mg.planner.verify), with the
kernels' ways the backend's rules choose: the measured choices stored on this machine
(``compile(tune=...)``) go to a file of the test session's own."""
import os
import tempfile
from pathlib import Path

import pytest

os.environ["MGEGRAPH_TUNE_CACHE"] = str(Path(tempfile.mkdtemp(prefix="mg-tune-"))
                                        / "kernel_choices.json")

import mgegraph as mg  # after the store is chosen


@pytest.fixture(autouse=True)
def verify_every_plan():
    with mg.planner.checking():
        yield
