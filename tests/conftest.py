"""Every plan a test compiles goes through the plan checker (mg.planner.verify)."""
import pytest

import mgegraph as mg


@pytest.fixture(autouse=True)
def verify_every_plan():
    with mg.planner.checking():
        yield
