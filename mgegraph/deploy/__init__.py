"""``mg.deploy``: a plan exported as a small C program that runs without Python
(docs/c_runtime.md): ``export_c`` writes the C runtime, exactly the kernels the plan calls, the
plan and its weights as one checked blob, a ``model_run`` command and a Makefile.

>>> mg.deploy.export_c(plan, "out")   # then: make -C out && out/model_run out/model.mgr x.npy
"""
from .errors import ExportError
from .export import Exported, export_c

__all__ = ["ExportError", "Exported", "export_c"]
