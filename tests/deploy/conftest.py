"""The deploy tests' builds share one folder of compiled objects for the session (cbuild.make)."""
import pytest

from . import cbuild


@pytest.fixture(scope="session", autouse=True)
def c_object_cache(tmp_path_factory):
    cbuild.OBJECT_CACHE = tmp_path_factory.mktemp("c-objects")
    yield cbuild.OBJECT_CACHE
    cbuild.OBJECT_CACHE = None
