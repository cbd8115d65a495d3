"""Module and Parameter: the containers of a model's trainable and persistent arrays.

Design: nothing is registered. A module's state is found by one walk of its instance attributes
in sorted order, into lists and tuples (in their order) and dicts (sorted keys), each Tensor and
Module once under the first name that reaches it (MegEngine's ``_flatten``), so names read
``seq.0.weight`` and ``blocks.1.norm.running_mean``. A Parameter is trainable state, a
non-trainable Parameter (``Buffer``) or a plain Tensor attribute is a buffer.
"""
from __future__ import annotations

import copy
import warnings

import numpy as np

from ..backend import sync_to_host
from ..eager.dispatch import MODE, updates
from ..eager.lazy import run_pending
from ..eager.tensor import Tensor, check_eager_device, set_array, wrap
from ..host_memory import aligned_copy
from ..ir.errors import GraphError
from ..ir.graph import Graph, _as_array
from ..ir.types import as_dtype
from ..weight_writes import written


class Parameter(Tensor):
    """A persistent array of a Module, used in graph code like a value: ``x @ self.weight``.

    MegEngine's signature: ``Parameter(value, dtype=None, device=None, is_const=False,
    no_cache=False, name=None)``; ``dtype`` converts the value, ``device`` may only name the
    CPU (eager values live in host memory), ``is_const`` and ``no_cache`` are MegEngine's hints to
    its tracer and change nothing here. ``trainable=False`` (keyword) marks state such as
    batch-norm running statistics.

    When a graph first uses it, the graph gets a param node that shares this array as its
    buffer, so every plan made from the module reads (and a training step updates) the same
    memory. In eager code it is a Tensor (its array is its value) that optimisers update in
    place, with its gradient in ``.grad``. ``==`` compares identity, as for any container's key.

    ``param.value = array`` before any graph used it takes a copy of ``array`` (any shape and
    dtype); after, it copies ``array`` into the bound array in place, so every plan sharing it
    reads the new values, and a different shape or dtype is a GraphError (the plans were
    compiled for the old one: make a new Parameter and recompile).

    >>> w = Parameter(np.zeros((3, 4)), dtype="float32")
    """

    def __init__(self, value, dtype=None, device=None, is_const=False, no_cache=False,
                 name: str | None = None, *, trainable: bool = True):
        check_eager_device(device)
        self._bound = False  # a graph shares self._value as a param's buffer
        # the dtype rule of any Tensor's data (mg.tensor's); .value = keeps what it is given
        self._set(_as_array(value.numpy() if isinstance(value, Tensor) else value,
                            None if dtype is None else as_dtype(dtype)))
        self.trainable = trainable
        self.name: str | None = name  # else the dotted name, set by the first named walk

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

    def __deepcopy__(self, memo) -> Parameter:
        """A Parameter owning a copy of the value (unbound: no graph uses it yet), with the
        name, trainability, format tag and other attributes (``copy.deepcopy(module)`` copies
        its weights)."""
        new = Parameter(self._value)
        new.format = self.format
        new.__dict__.update((k, copy.deepcopy(v, memo)) for k, v in vars(self).items()
                            if k != "_bound")
        memo[id(self)] = new
        return new

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

    def __setitem__(self, key, value) -> None:
        """``param[...] = v`` (MegEngine's): writes the selected elements in place, as
        ``.value =`` writes the whole array (plans sharing it read the new values)."""
        array = self._value.copy()
        key = tuple(np.asarray(k) if isinstance(k, Tensor) else k for k in key) \
            if isinstance(key, tuple) else np.asarray(key) if isinstance(key, Tensor) else key
        array[key] = np.asarray(value)
        self.value = array

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


def is_trainable(obj) -> bool:
    return isinstance(obj, Parameter) and obj.trainable


def is_buffer(obj) -> bool:
    """A buffer is state no optimiser trains: a plain Tensor attribute or a Buffer."""
    return isinstance(obj, Tensor) and not is_trainable(obj)


def expand(prefix: str, obj) -> list:
    """(dotted name, leaf) of each Tensor and Module in ``obj``: itself, or what lists, tuples
    (in order) and dicts (sorted keys) inside it hold."""
    if isinstance(obj, (Tensor, Module)):
        return [(prefix, obj)]
    if isinstance(obj, dict):
        items = [(key, obj[key]) for key in sorted(obj)]
    elif isinstance(obj, (list, tuple)):
        items = [(str(i), value) for i, value in enumerate(obj)]
    else:
        return []
    found = []
    for key, value in items:
        inner = expand(key, value)
        if inner and not isinstance(key, str):
            raise GraphError(f"{prefix}: keys of a dict holding Tensors or Modules must be "
                             f"str, got {key!r}")
        found += [(f"{prefix}.{name}", leaf) for name, leaf in inner]
    return found


class HookHandle:
    """What ``register_forward_hook`` gives: ``.remove()`` takes the hook away."""

    def __init__(self, hooks: dict, hook):
        self._hooks, self._key = hooks, object()
        hooks[self._key] = hook

    def remove(self) -> None:
        self._hooks.pop(self._key, None)


class Module:
    """Base class of layers and models: set Parameters, Tensors and Modules (alone or in lists,
    tuples and dicts) as attributes, and ``forward``. Traversals, ``state_dict`` and ``repr``
    follow MegEngine's (``named_modules``, ``named_parameters``, ``named_buffers``,
    ``named_tensors``, each with their unnamed forms).

    >>> class MLP(Module):
    ...     def __init__(self): self.fc1, self.fc2 = Linear(784, 128), Linear(128, 10)
    ...     def forward(self, x): return self.fc2(F.relu(self.fc1(x)))
    """

    training = True
    # a norm that keeps its per-channel arrays as (1, C, 1, 1) states them as (C,), as
    # MegEngine's and PyTorch's state dicts do, and loads any array of C values
    flat_state = False

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
        for hook in list(vars(self).get("_forward_pre_hooks", {}).values()):
            changed = hook(self, inputs)
            if changed is not None:
                inputs = changed if isinstance(changed, tuple) else (changed,)
        # eager state updates (batch-norm statistics, dropout's step) land when the outermost
        # call ends, as a plan's do when its run ends
        with updates():
            outputs = self.forward(*inputs, **kwargs)
        for hook in list(vars(self).get("_forward_hooks", {}).values()):
            changed = hook(self, inputs, outputs)
            if changed is not None:
                outputs = changed
        return outputs

    def register_forward_pre_hook(self, hook) -> HookHandle:
        """``hook(module, inputs)`` runs before ``forward`` and may return new inputs."""
        return HookHandle(vars(self).setdefault("_forward_pre_hooks", {}), hook)

    def register_forward_hook(self, hook) -> HookHandle:
        """``hook(module, inputs, outputs)`` runs after ``forward`` and may return new
        outputs."""
        return HookHandle(vars(self).setdefault("_forward_hooks", {}), hook)

    # -- traversal ------------------------------------------------------------------------
    def _walk(self, recursive: bool = True, prefix: str = "", seen: set | None = None):
        """(dotted name, leaf, owner module) of every Tensor and Module reachable, each once
        under the first name that reaches it, depth first in sorted attribute order."""
        seen = {id(self)} if seen is None else seen
        attributes = vars(self)
        for key in sorted(attributes):
            for name, leaf in expand(key, attributes[key]):
                if id(leaf) in seen:
                    continue
                seen.add(id(leaf))
                name = f"{prefix}.{name}" if prefix else name
                yield name, leaf, self
                if recursive and isinstance(leaf, Module):
                    yield from leaf._walk(True, name, seen)

    def named_children(self):
        return [(n, m) for n, m, _ in self._walk(False) if isinstance(m, Module)]

    def children(self):
        return [m for _, m in self.named_children()]

    def named_modules(self, prefix: str = "", with_parent: bool = False):
        """("", self) then (dotted name, module) of every submodule; with ``with_parent`` each
        also names the module holding it (None for self)."""
        found = [(prefix, self, None)] + [(n, m, owner) for n, m, owner in self._walk(True, prefix)
                                          if isinstance(m, Module)]
        return found if with_parent else [(n, m) for n, m, _ in found]

    def modules(self, with_parent: bool = False):
        return [item[1:] if with_parent else item[1]
                for item in self.named_modules(with_parent=with_parent)]

    def apply(self, fn) -> None:
        """Call ``fn(module)`` on this module and every submodule."""
        for module in self.modules():
            fn(module)

    def _named_arrays(self) -> list[tuple[str, Tensor]]:
        """(dotted name, tensor) of every Tensor reachable once, in walk order; a Parameter
        without a name takes the first it is found under."""
        found = [(n, t) for n, t, _ in self._walk() if isinstance(t, Tensor)]
        for name, t in found:
            if isinstance(t, Parameter) and t.name is None:
                t.name = name
        return found

    def named_tensors(self, prefix: str = "", recursive: bool = True):
        if not prefix and recursive:  # unnamed parameters take these names (plans, states)
            return self._named_arrays()
        return [(n, t) for n, t, _ in self._walk(recursive, prefix) if isinstance(t, Tensor)]

    def tensors(self, recursive: bool = True):
        return [t for _, t in self.named_tensors(recursive=recursive)]

    def named_parameters(self, prefix: str = "", recursive: bool = True):
        """(dotted name, Parameter) of every trainable parameter, in a stable order."""
        return [(n, t) for n, t in self.named_tensors(prefix, recursive) if is_trainable(t)]

    def parameters(self, recursive: bool = True) -> list[Parameter]:
        return [p for _, p in self.named_parameters(recursive=recursive)]

    def named_buffers(self, prefix: str = "", recursive: bool = True):
        """(dotted name, tensor) of the state no optimiser trains: Buffers and plain Tensors."""
        return [(n, t) for n, t in self.named_tensors(prefix, recursive) if is_buffer(t)]

    def buffers(self, recursive: bool = True):
        return [t for _, t in self.named_buffers(recursive=recursive)]

    def zero_grad(self) -> None:
        """Set each parameter's gradient, where it has one, to zeros."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = wrap(np.zeros(p.grad.shape, p.grad.dtype))

    # -- state ----------------------------------------------------------------------------
    def _states(self, prefix: str = ""):
        """(dotted name, owner module, tensor) of the state as MegEngine's ``state_dict`` lists
        it: a module's own tensors, then each submodule's; a tensor two modules hold is listed
        under each name."""
        own = list(self._walk(False, prefix))
        for name, leaf, _ in own:
            if isinstance(leaf, Tensor):
                yield name, self, leaf
        for name, leaf, _ in own:
            if isinstance(leaf, Module):
                yield from leaf._states(name)

    def state_dict(self) -> dict[str, np.ndarray]:
        """A flat dict of every parameter and buffer name to a copy of its array (a device
        that trained them, CUDA, copies its values back first); a batch norm's per-channel
        arrays as (C,).

        >>> mg.save(model.state_dict(), "weights.mgm")"""
        states = list(self._states())
        sync_to_host(t.value for _, _, t in states if isinstance(t, Parameter))
        found = {}
        for name, owner, t in states:
            array = t.value.copy() if isinstance(t, Parameter) else t.numpy()
            found[name] = array.reshape(-1) if owner.flat_state else array
        return found

    def load_state_dict(self, state, strict: bool = True) -> None:
        """Copy ``state`` (name -> array, or MegEngine's ``closure(name, tensor)`` giving an
        array or None to skip) into the existing arrays in place (plans bound to them see it).
        ``strict``: a name of the module that gets no array, or a name of ``state`` the module
        lacks, is a KeyError; else a warning."""
        if isinstance(state, dict):
            def closure(name, _):
                return state.get(name)
        elif callable(state):
            closure = state
        else:
            raise GraphError(f"load_state_dict: needs a dict or a callable, got "
                             f"{type(state).__name__}")
        loaded, missing = set(), []
        for name, owner, t in self._states():
            value = closure(name, t)
            if value is None:
                missing.append(name)
                continue
            _load_one(name, owner, t, value)
            loaded.add(name)
        unexpected = sorted(set(state) - loaded) if isinstance(state, dict) else []
        if missing or unexpected:
            message = f"load_state_dict: missing {sorted(missing)}, unexpected {unexpected}"
            if strict:
                raise KeyError(message)
            warnings.warn(message, stacklevel=2)

    def replace_param(self, params: dict, start_pos: int, seen: set | None = None) -> int:
        """MegEngine's: number the Parameters from ``start_pos`` (a module's own in sorted
        attribute order, each submodule's in turn), put ``params[i]`` (of the same shape) in
        place of the i-th where it is given, and return how many were numbered."""
        offset, seen = 0, {id(self)} if seen is None else seen
        attributes = vars(self)
        for key in sorted(attributes):
            value = attributes[key]
            if id(value) in seen:
                continue
            seen.add(id(value))
            if isinstance(value, Parameter):
                new = params.get(start_pos + offset)
                if new is not None:
                    if tuple(new.shape) != tuple(value.shape):
                        raise GraphError(f"replace_param: {key} has shape {tuple(value.shape)}, "
                                         f"params[{start_pos + offset}] {tuple(new.shape)}")
                    setattr(self, key, new)
                offset += 1
            elif isinstance(value, Module):
                offset += value.replace_param(params, start_pos + offset, seen)
        return offset

    def train(self, mode: bool = True, recursive: bool = True) -> Module:
        for module in self.modules() if recursive else [self]:
            module.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    # -- text -----------------------------------------------------------------------------
    def __repr__(self) -> str:
        info = self._module_info_string()
        extra = info.split("\n") if info else []
        children = [f"({name}): " + repr(leaf).replace("\n", "\n  ")
                    for key, value in list(vars(self).items())
                    for name, leaf in expand(key, value) if isinstance(leaf, Module)]
        text = f"{type(self).__name__}("
        if len(extra) == 1 and not children:
            text += extra[0]
        elif extra or children:
            text += "\n  " + "\n  ".join(extra + children) + "\n"
        return text + ")"

    def _module_info_string(self) -> str:
        """MegEngine's name for ``extra_repr``: what ``repr`` shows of the module's own
        settings."""
        return self.extra_repr()

    def extra_repr(self) -> str:
        return ""


def _load_one(name: str, owner: Module, t: Tensor, value) -> None:
    value = np.asarray(value)
    if value.shape != tuple(t.shape):
        if not (owner.flat_state and value.size == int(np.prod(t.shape))):
            raise ValueError(f"load_state_dict: {name} has shape {value.shape}, the module "
                             f"needs {tuple(t.shape)}")
        value = value.reshape(t.shape)
    if isinstance(t, Parameter):
        np.copyto(t.value, value, casting="same_kind")
        written(t.value)
        return
    set_array(t, aligned_copy(value.astype(t.dtype, casting="same_kind")), owns=True)
