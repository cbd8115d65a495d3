"""Module and Parameter: the containers of a model's trainable and persistent arrays."""
from __future__ import annotations

import numpy as np

from ..backend import sync_to_host
from ..eager.dispatch import MODE, updates
from ..eager.lazy import run_pending
from ..eager.tensor import Tensor, set_array
from ..host_memory import aligned_copy
from ..ir.errors import GraphError
from ..ir.graph import Graph
from ..ir.types import as_dtype
from ..weight_writes import written


class Parameter(Tensor):
    """A persistent array of a Module, used in graph code like a value: ``x @ self.weight``.

    When a graph first uses it, the graph gets a param node that shares this array as its
    buffer, so every plan made from the module reads (and a training step updates) the same
    memory. ``trainable=False`` marks state such as batch-norm running statistics. In eager
    code it is a Tensor (its array is its value) that optimisers update in place, with its
    gradient in ``.grad``. ``==`` compares identity, as for any container's key.

    ``param.value = array`` before any graph used it takes a copy of ``array`` (any shape and
    dtype); after, it copies ``array`` into the bound array in place, so every plan sharing it
    reads the new values, and a different shape or dtype is a GraphError (the plans were
    compiled for the old one: make a new Parameter and recompile).
    """

    def __init__(self, value, trainable: bool = True):
        self._bound = False  # a graph shares self._value as a param's buffer
        self._set(value)
        self.trainable = trainable
        self.name: str | None = None  # the dotted name, set by the first named traversal

    def _set(self, value) -> None:
        # on a cache line, as a plan's own buffers: plans read this array in place
        array = aligned_copy(value.numpy() if isinstance(value, Tensor) else value)
        as_dtype(array.dtype)
        set_array(self, array, owns=True)  # (a previous array's token dies with it)

    def _replace(self, value) -> None:
        """A new array under the same id (a GradManager, a trace or an optimiser knows the
        Parameter by it); ``.grad`` stays while it is of the value's shape and dtype."""
        ident, grad, old = self.id, self.grad, self.type
        self._set(value)
        self.id = ident
        self.grad = grad if self.type == old else None

    plain = False  # lifted into whichever graph uses it
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__

    @property
    def value(self) -> np.ndarray:
        return self._value

    @value.setter
    def value(self, new) -> None:
        # what mg.lazy() left pending and what a GradManager's tape recorded read the old value
        run_pending()
        for recorder in MODE.recorders:
            recorder.overwriting(self)
        if not self._bound:
            self._replace(new)
            return
        new = np.asarray(new)
        if new.shape != self._value.shape or new.dtype != self._value.dtype:
            raise GraphError(
                f"{self!r}: cannot set its value to {new.dtype}{list(new.shape)}: plans "
                f"compiled from it read this {self.dtype}{list(self.shape)} array in place; "
                "assign an array of the same shape and dtype, or make a new Parameter and "
                "recompile")
        np.copyto(self._value, new, casting="no")
        written(self._value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> np.dtype:
        return self.value.dtype

    def bind_to(self, graph: Graph):
        name = self.name or "param"
        while name in graph.params or name in graph.inputs:
            name += "_"
        var = graph.param(name, self._value, share=True)
        self._bound = True
        return var

    def __repr__(self) -> str:
        kind = "Parameter" if self.trainable else "Buffer"
        return f"{kind}({self.name or '?'}: {self.dtype}{list(self.shape)})"


def Buffer(value) -> Parameter:
    """A persistent, non-trainable array (running statistics, step counters)."""
    return Parameter(value, trainable=False)


class Module:
    """Base class of layers and models. Submodules and Parameters are found by one traversal of
    the instance attributes in sorted order (lists and tuples of modules included), so no
    registration calls are needed.

    >>> class MLP(Module):
    ...     def __init__(self): self.fc1, self.fc2 = Linear(784, 128), Linear(128, 10)
    ...     def forward(self, x): return self.fc2(F.relu(self.fc1(x)))
    """

    training = True

    def __init__(self, name: str | None = None):
        """Subclasses may call ``super().__init__()`` (MegEngine's modules do); nothing needs
        registering."""
        if name is not None:
            self.module_name = name

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *inputs, **kwargs):
        self._named_arrays()  # names the parameters (outermost call first) before graphs bind them
        for recorder in MODE.recorders:  # a trace keys its plan by the modules' train/eval mode
            recorder.module_called(self)
        # eager state updates (batch-norm statistics, dropout's step) land when the outermost
        # call ends, as a plan's do when its run ends
        with updates():
            return self.forward(*inputs, **kwargs)

    # -- traversal ------------------------------------------------------------------------
    def named_children(self):
        for key in sorted(vars(self)):
            value = vars(self)[key]
            if isinstance(value, Module):
                yield key, value
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield f"{key}.{i}", item

    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _named_arrays(self) -> list[tuple[str, Parameter]]:
        """Every Parameter reachable from this module once, sorted by dotted name."""
        found, seen = [], set()
        for prefix, module in self.named_modules():
            for key in sorted(vars(module)):
                value = vars(module)[key]
                if isinstance(value, Parameter) and id(value) not in seen:
                    seen.add(id(value))
                    name = f"{prefix}.{key}" if prefix else key
                    if value.name is None:
                        value.name = name
                    found.append((name, value))
        return sorted(found, key=lambda item: item[0])

    def named_parameters(self):
        """(dotted name, Parameter) of every trainable parameter, in a stable sorted order."""
        return [(n, p) for n, p in self._named_arrays() if p.trainable]

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        return [(n, p) for n, p in self._named_arrays() if not p.trainable]

    # -- state ----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """A flat dict of every parameter and buffer name to a copy of its array (a device
        that trained them, CUDA, copies its values back first)."""
        named = list(self._named_arrays())
        sync_to_host(p.value for _, p in named)
        return {name: p.value.copy() for name, p in named}

    def load_state_dict(self, state: dict, strict: bool = True) -> None:
        """Copy ``state`` into the existing arrays in place (plans bound to them see it)."""
        arrays = dict(self._named_arrays())
        missing, unexpected = sorted(set(arrays) - set(state)), sorted(set(state) - set(arrays))
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for name, value in state.items():
            if name not in arrays:
                continue
            target = arrays[name].value
            value = np.asarray(value)
            if value.shape != target.shape:
                raise ValueError(f"load_state_dict: {name} has shape {value.shape}, the module "
                                 f"needs {target.shape}")
            np.copyto(target, value, casting="same_kind")
            written(target)

    def train(self, mode: bool = True) -> Module:
        for _, module in self.named_modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def __repr__(self) -> str:
        children = "".join(f"\n  ({n}): " + repr(c).replace("\n", "\n  ")
                           for n, c in self.named_children())
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self) -> str:
        return ""
