"""mgegraph: a define-then-run deep-learning engine with a planner you can see into."""
from . import ops  # noqa: F401  (registers every op)
from . import functional  # noqa: F401
from .autodiff import grad
from .ir.errors import DispatchError, FeedError, GraphError, KernelError, NumericsError, OpError
from .ir.graph import Graph, Node, Var
from .ir.types import TensorType
from .backend import devices, register_backend
from .compiler import compile
from .plan import Instruction, Plan, Role, Slot
from .train import DataLoader, compile_module, compile_train_step, fit
from . import nn, optim, planner  # noqa: E402
from .eager.grad_manager import GradManager  # noqa: E402
from .eager.lazy import lazy  # noqa: E402
from .eager.tensor import MemoryStats, Tensor, memory_stats, tensor  # noqa: E402
from . import jit  # noqa: E402
from .jit import trace  # noqa: E402
from .functional import nn as _functional_nn  # noqa: E402,F401  (F.nn: MegEngine's names)
from . import module, optimizer  # noqa: E402,F401  (MegEngine's names for nn and optim)

__all__ = ["devices", "register_backend", "grad", "compile_train_step", "compile_module", "DataLoader", "fit", "nn", "optim", "Graph", "Node", "Var", "TensorType", "Plan", "Role", "Slot", "Instruction", "compile",
           "functional", "planner", "GraphError", "OpError", "FeedError", "KernelError", "NumericsError",
           "DispatchError", "Tensor", "tensor", "memory_stats", "MemoryStats", "GradManager",
           "lazy", "jit", "trace", "module", "optimizer"]
__version__ = "0.1.0"
