"""mgegraph: a define-then-run deep-learning engine with a planner you can see into."""
import importlib as _importlib

from . import (
    functional,
    ops,  # noqa: F401  (registers every op)
    planner,
    runtime,
)
from .backend import devices, register_backend
from .compiler import compile
from .io import load, save
from .ir.dims import Dim, DimError
from .ir.errors import (
    DispatchError,
    FeedError,
    GraphError,
    KernelError,
    ModelFormatError,
    NumericsError,
    OpError,
)
from .ir.graph import Graph, Node, Var
from .ir.graph import install_loader as _install_loader
from .ir.types import TensorType
from .plan import Instruction, Plan, Role, Slot
from .symbolic_plan import SymbolicPlan

# The built-in devices, each a plug-in loaded when first asked for ("module:function"): the
# registry (backend.py) sits below the backends and names none of them.
register_backend("cpu", "mgegraph._kernels.cpu:backend")
register_backend("cuda", "mgegraph.cuda.backend:backend", per_device=True,
                 probe="mgegraph.cuda:available")  # the probe imports no CUDA library

# Design: the training and eager layers load on first use (PEP 562), so that a deployment's
# ``import mgegraph.runtime`` brings in the ops, the planner and the kernels but no autodiff,
# nn or optim; every ``mg.X`` name still works. Name -> (module, attribute or None: the module).
_LAZY = {
    "grad": ("mgegraph.autodiff", "grad"),
    "compile_train_step": ("mgegraph.train", "compile_train_step"),
    "compile_module": ("mgegraph.train", "compile_module"),
    "DataLoader": ("mgegraph.train", "DataLoader"),
    "fit": ("mgegraph.train", "fit"),
    "GradManager": ("mgegraph.eager.grad_manager", "GradManager"),
    "lazy": ("mgegraph.eager.lazy", "lazy"),
    "Tensor": ("mgegraph.eager.tensor", "Tensor"),
    "tensor": ("mgegraph.eager.tensor", "tensor"),
    "memory_stats": ("mgegraph.eager.tensor", "memory_stats"),
    "MemoryStats": ("mgegraph.eager.tensor", "MemoryStats"),
    "trace": ("mgegraph.jit", "trace"),
    "viz": ("mgegraph.viz", None),
    # MegEngine's top-level Parameter (megengine.Parameter)
    "Parameter": ("mgegraph.nn.module", "Parameter"),
    "profile": ("mgegraph.tools.profiler", "profile"),
    **{name: (f"mgegraph.{name}", None) for name in
       ("nn", "optim", "autodiff", "train", "eager", "jit", "module", "optimizer", "onnx",
        "amp")},
    # MegEngine's megengine.random: seed, RNG and the default generator's draws
    "random": ("mgegraph.random", None),
    # MegEngine's megengine.config and megengine.device, whose functions MegEngine also
    # exports at the top level
    "config": ("mgegraph.config", None),
    "device": ("mgegraph.device", None),
    **{name: ("mgegraph.device", name) for name in
       ("get_device_count", "get_default_device", "set_default_device", "is_cuda_available",
        "what_is_xpu")},
}

# MegEngine's megengine.quantization, and mgegraph.dtype: its quantized dtypes (qint8(scale))
_LAZY |= {name: (f"mgegraph.{name}", None) for name in ("quantization", "dtype")}

# MegEngine's module path megengine.tensor, imported now: the first import of a submodule binds
# its name in this package, which would hide ``mg.tensor`` (the class, loaded through _LAZY)
from . import tensor as _tensor_module  # noqa: F401

del tensor  # noqa: F821  (the submodule's binding; mg.tensor is the class)


def _load_eager() -> None:
    _importlib.import_module("mgegraph.eager.dispatch")  # lazy: startup cost (as _LAZY says)


# F.zeros(shape) and the other fills without graph= make eager Tensors: the IR loads eager mode
# through this when one is first made
_install_loader("eager", _load_eager)


def __getattr__(name):
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'mgegraph' has no attribute {name!r}") from None
    value = _importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # the next lookup is an ordinary one
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "DataLoader",
    "Dim",
    "DimError",
    "DispatchError",
    "FeedError",
    "GradManager",
    "Graph",
    "GraphError",
    "Instruction",
    "KernelError",
    "MemoryStats",
    "ModelFormatError",
    "Node",
    "NumericsError",
    "OpError",
    "Parameter",
    "Plan",
    "Role",
    "Slot",
    "SymbolicPlan",
    "Tensor",
    "TensorType",
    "Var",
    "amp",
    "compile",
    "compile_module",
    "compile_train_step",
    "config",
    "device",
    "devices",
    "fit",
    "functional",
    "get_default_device",
    "get_device_count",
    "grad",
    "is_cuda_available",
    "jit",
    "lazy",
    "load",
    "memory_stats",
    "module",
    "nn",
    "optim",
    "optimizer",
    "planner",
    "profile",
    "random",
    "register_backend",
    "runtime",
    "save",
    "set_default_device",
    "tensor",
    "trace",
    "what_is_xpu",
]
__version__ = "0.1.0"
