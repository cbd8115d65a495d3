"""``megengine`` as a name for ``mgegraph``: nothing but a rename.

Putting this folder (``compat/megengine``) on ``sys.path`` makes ``import megengine`` and
``import megengine.<anything>`` give the very module objects of ``mgegraph`` and
``mgegraph.<anything>``: no wrapper, no adapted behaviour. A script written for MegEngine then
runs on mgegraph exactly as far as mgegraph keeps MegEngine's names and meanings, which is what
``compat/megengine/run_tests.py`` measures with MegEngine's own unit tests.
"""
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

import mgegraph

ALIAS, TARGET = "megengine", "mgegraph"


class _RenamingFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``megengine.x.y`` as ``mgegraph.x.y`` and files the real module under both names."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(ALIAS + "."):
            return None
        try:
            found = importlib.util.find_spec(TARGET + fullname[len(ALIAS):])
        except ModuleNotFoundError:  # its parent is not in mgegraph either
            return None
        if found is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        return None  # the import system makes a placeholder; exec_module swaps in the real one

    def exec_module(self, module):
        real = importlib.import_module(TARGET + module.__name__[len(ALIAS):])
        # The import system returns whatever sys.modules holds under the name after loading.
        sys.modules[module.__name__] = real


if not any(isinstance(finder, _RenamingFinder) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RenamingFinder())
sys.modules[ALIAS] = mgegraph
# The submodules mgegraph imported while loading are megengine's under their renamed names, as
# megengine's own package imports its: a first import through the finder would bind the name in
# the package (``megengine.tensor``, the class, would become the module)
for _name, _module in list(sys.modules.items()):
    if _name.startswith(TARGET + "."):
        sys.modules.setdefault(ALIAS + _name[len(TARGET):], _module)
