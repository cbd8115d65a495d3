"""The conftest that ``run_tests.py`` puts in place of MegEngine's own (which reads MegEngine's
internal option registry). It does three things and nothing else:

- skips the tests MegEngine marks as needing GPUs or several processes (``require_ngpu``,
  ``distributed_isolated``, ``isolated_distributed``), as MegEngine's conftest does on a
  CPU-only machine;
- lets modules under MegEngine's internal namespaces (``megengine.core``, ``megengine.utils``,
  ``megengine.traced_module``, ...) be imported as placeholders whose every use raises
  ``MegEngineInternal``, and answers a private name (``from megengine.module.module import
  _access_structure``) of a module imported as ``megengine...`` with such a placeholder, so a
  test file that imports one at its top still runs its other tests; a test whose own code reads
  a private attribute mgegraph's objects lack (``param._tuple_shape``) is stopped by an internal
  too; so is a public name that MegEngine's public module only re-exports from its internals
  (``INTERNAL_REEXPORTS``);
- files every test's outcome, with ``internal`` for a test stopped by such a use, as one JSON line
  in the file named by ``MGE_COMPAT_RESULTS``.
"""
import importlib.abc
import importlib.machinery
import json
import os
import sys
import types

import pytest

INTERNAL_PREFIXES = tuple(os.environ.get("MGE_COMPAT_INTERNAL", "").split(","))
GPU_MARKERS = ("require_ngpu", "distributed_isolated", "isolated_distributed", "require_higher_ngpu")

# Public names whose MegEngine module only re-exports them from MegEngine's internals, with the
# origin its source imports them from (``functional/elemwise.py``: ``from ..core.ops.builtin
# import Elemwise``; ``device.py``: ``from .core._imperative_rt.common import CompNode``). They are
# internals under a public path: answered, where mgegraph's module lacks them, with a placeholder.
INTERNAL_REEXPORTS = {
    "megengine.functional.elemwise": {"Elemwise": "megengine.core.ops.builtin.Elemwise"},
    "megengine.device": {"CompNode": "megengine.core._imperative_rt.common.CompNode"},
}


class MegEngineInternal(Exception):
    """A test used a MegEngine internal module that mgegraph does not reproduce."""


class _InternalName:
    """Stands for any name inside an internal module; any use of it raises."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _InternalName(f"{self._name}.{attr}")

    def _refuse(self, *args, **kwargs):
        raise MegEngineInternal(self._name)

    __call__ = __iter__ = __getitem__ = __enter__ = __bool__ = __len__ = _refuse
    __eq__ = __lt__ = __add__ = __mul__ = __mro_entries__ = _refuse
    __hash__ = object.__hash__

    @property
    def __dict__(self):  # ``vars(Elemwise.Mode)`` must not read as an empty namespace
        raise MegEngineInternal(self._name)

    # No mgegraph object is an instance of a MegEngine internal class (MegEngine's test helpers
    # ask ``isinstance(x, VarNode)`` of every result), so the question has an honest answer.
    def __instancecheck__(self, instance):
        return False

    def __subclasscheck__(self, subclass):
        return False


class _InternalModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _InternalName(f"{self.__name__}.{attr}")


class _InternalFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(INTERNAL_PREFIXES) or not INTERNAL_PREFIXES[0]:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _InternalModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def _answer_private_names(module, alias):
    """Private names the module lacks, and the internal re-exports of MegEngine's module
    ``alias``, become placeholders (a module's own __getattr__, such as mgegraph's lazy one, is
    asked first)."""
    if isinstance(module, _InternalModule) or "_private_names_answered" in module.__dict__:
        return
    previous = module.__dict__.get("__getattr__")
    reexports = INTERNAL_REEXPORTS.get(alias, {})

    def __getattr__(name):
        if previous is not None:
            try:
                return previous(name)
            except AttributeError:
                pass
        if name in reexports:
            return _InternalName(reexports[name])
        if name.startswith("_") and not name.startswith("__"):
            return _InternalName(f"{module.__name__}.{name}")
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__
    module._private_names_answered = True


class _PrivateNamesFinder(importlib.abc.MetaPathFinder):
    """Lets the renaming finder load ``megengine.x``, then answers x's private names."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("megengine."):
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                load = spec.loader.exec_module

                def exec_module(module, load=load, name=fullname):
                    load(module)
                    _answer_private_names(sys.modules[name], name)

                spec.loader = type("PrivateNamesLoader", (), {
                    "create_module": staticmethod(spec.loader.create_module),
                    "exec_module": staticmethod(exec_module)})()
                return spec
        return None


import megengine  # noqa: F401  (installs the renaming finder, needed before the two above)

for _name, _module in list(sys.modules.items()):  # those the shim filed under megengine.* names
    if _name == "megengine" or _name.startswith("megengine."):
        _answer_private_names(_module, _name)
sys.meta_path.insert(0, _PrivateNamesFinder())
sys.meta_path.append(_InternalFinder())
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))


def pytest_configure(config):
    for marker in GPU_MARKERS:
        config.addinivalue_line("markers", f"{marker}: needs GPUs or several processes")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in GPU_MARKERS):
            item.add_marker(pytest.mark.skip(reason="needs GPUs or several processes"))


def _reads_a_private_attribute(excinfo):
    """The test's own code read a private attribute (``param._tuple_shape``) mgegraph lacks."""
    error = excinfo.value
    name = getattr(error, "name", None) or ""
    return (isinstance(error, AttributeError) and name.startswith("_")
            and not name.startswith("__") and "mgegraph" not in str(excinfo.traceback[-1].path))


def _stopped_by_internal(excinfo):
    if excinfo is not None and _reads_a_private_attribute(excinfo):
        return True
    error = excinfo.value if excinfo is not None else None
    while error is not None:
        if isinstance(error, MegEngineInternal):
            return True
        error = error.__cause__ or error.__context__
    return excinfo is not None and "MegEngineInternal" in str(excinfo.getrepr(style="line"))


def _first_line(report):
    text = str(report.longrepr) if report.longrepr else ""
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    return (lines[0][1:].strip() if lines else text.splitlines()[-1] if text else "")[:300]


_outcomes = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or report.outcome != "passed":
        kind = report.outcome
        if report.failed and _stopped_by_internal(call.excinfo):
            kind = "internal"
        previous = _outcomes.get(item.nodeid)
        if previous is None or previous[0] == "passed":
            _outcomes[item.nodeid] = (kind, _first_line(report) if report.failed else "")


def pytest_collectreport(report):
    if report.failed:
        kind = "internal" if "MegEngineInternal" in str(report.longrepr) else "collect-error"
        _outcomes[report.nodeid] = (kind, _first_line(report))


def pytest_sessionfinish(session):
    path = os.environ.get("MGE_COMPAT_RESULTS")
    if not path:
        return
    with open(path, "a") as out:
        out.writelines(json.dumps({"test": nodeid, "outcome": kind, "why": why}) + "\n"
                       for nodeid, (kind, why) in _outcomes.items())
