"""The symbolic IR: a Graph of Nodes in topological (insertion) order, whose values are Vars."""
from __future__ import annotations

import numbers
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import facts
from .dims import Constraints
from .dims import names as dim_names
from .errors import GraphError, OpError, user_location
from .printer import format_graph, graph_to_dot
from .types import TensorType, as_dtype, tensor_type

# Design: the IR imports nothing above it. The layers above plug in here when they are
# imported (as JAX installs Tracer's operators): the op registry gives its lookup of an op by
# name, mgegraph.functional the functions Python's operators on a Var build nodes with, and
# eager mode its graph. A layer that loads on first use (eager mode) is reached through the
# loader the package's facade installs for it, never by its module name from here.
_LAYERS: dict[str, object] = {}
_LOADERS: dict[str, Callable[[], object]] = {}


def install(name: str, value) -> None:
    """Plug a layer above the IR in: ``"get_op"`` (name -> OpDef), ``"functional"`` (the
    module whose functions Var's operators call) or ``"eager"`` (the eager graph)."""
    _LAYERS[name] = value


def install_loader(name: str, load: Callable[[], object]) -> None:
    """Say how to load the layer that installs ``name`` when it is first asked for (the facade,
    mgegraph/__init__.py, does so for ``"eager"``, which a deployment never loads)."""
    _LOADERS[name] = load


def _layer(name: str):
    if name not in _LAYERS and name in _LOADERS:
        _LOADERS[name]()
    try:
        return _LAYERS[name]
    except KeyError:
        raise GraphError(f"the IR is used before mgegraph's {name!r} layer is imported; "
                         "import mgegraph first") from None


def eager_graph():
    """The graph of eager mode (mgegraph.eager installs it), where a node runs when made."""
    return _layer("eager")


def _get_op(name):
    return _layer("get_op")(name)


class Arithmetic:
    """Python arithmetic operators that build nodes through mgegraph.functional (for Var and
    nn.Parameter alike; comparisons stay on Var, since a Parameter must keep identity equality)."""

    __slots__ = ()
    __array_priority__ = 1000  # so ndarray + Var defers to Var.__radd__

    def _F(self):
        return _layer("functional")

    def __add__(self, o): return self._F().add(self, o)
    def __radd__(self, o): return self._F().add(o, self)
    def __sub__(self, o): return self._F().sub(self, o)
    def __rsub__(self, o): return self._F().sub(o, self)
    def __mul__(self, o): return self._F().mul(self, o)
    def __rmul__(self, o): return self._F().mul(o, self)
    def __truediv__(self, o): return self._F().div(self, o)
    def __rtruediv__(self, o): return self._F().div(o, self)
    def __pow__(self, o): return self._F().pow(self, o)
    def __rpow__(self, o): return self._F().pow(o, self)
    def __matmul__(self, o): return self._F().matmul(self, o)
    def __rmatmul__(self, o): return self._F().matmul(o, self)


class Var(Arithmetic):
    """One value of a graph: its type is known when the node that makes it is created.

    Python operators build nodes: ``x @ w + b``, ``-x``, ``x < 0``, ``x[1:, ::2]``.
    """

    __slots__ = ("graph", "id", "index", "node", "type")
    # a value of the graph it names (an nn.Parameter, which joins whichever graph uses it,
    # says False): op builders use it as it is, without lifting
    plain = True

    def __init__(self, graph: Graph, id: int, type: TensorType, node: Node | None, index: int):
        self.graph, self.id, self.type, self.node, self.index = graph, id, type, node, index

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> np.dtype:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def size(self) -> int:
        return self.type.size

    def __repr__(self) -> str:
        return f"Var(%{self.id}:{self.type})"

    __hash__ = object.__hash__  # identity; internal maps key by var.id because __eq__ builds a node

    def __neg__(self): return self._F().neg(self)
    def __abs__(self): return self._F().abs(self)
    def __lt__(self, o): return self._F().less(self, o)
    def __le__(self, o): return self._F().less_equal(self, o)
    def __gt__(self, o): return self._F().greater(self, o)
    def __ge__(self, o): return self._F().greater_equal(self, o)
    def __eq__(self, o): return self._F().equal(self, o)  # type: ignore[override]
    def __ne__(self, o): return self._F().not_equal(self, o)  # type: ignore[override]
    def __getitem__(self, index): return self._F().subscript(self, index)

    def __iter__(self):
        """``var[0], var[1], ...`` along the first axis, as a NumPy array (and an eager Tensor)
        iterates; a 0-d Var has no first axis."""
        if not self.shape:
            raise TypeError(f"iteration over a 0-d Var ({self.type}): it has no first axis")
        for i in range(self.shape[0]):
            yield self[i]

    def __bool__(self):
        raise TypeError("the truth value of a symbolic Var is unknown until the graph runs")

    def reshape(self, *shape): return self._F().reshape(self, shape[0] if len(shape) == 1 else shape)
    def transpose(self, *pattern): return self._F().transpose(self, pattern or None)
    def astype(self, dtype): return self._F().astype(self, dtype)
    def sum(self, axis=None, keepdims=False): return self._F().sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return self._F().mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return self._F().max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return self._F().min(self, axis, keepdims)
    def flatten(self, start_axis=0, end_axis=-1): return self._F().flatten(self, start_axis, end_axis)

    @property
    def T(self): return self._F().transpose(self, None)


@dataclass(frozen=True, eq=False)
class Node:
    """One op application. ``attrs`` is a tuple of (name, value) pairs of plain immutable values."""

    op: object  # ops.registry.OpDef
    inputs: tuple[Var, ...]
    attrs: tuple[tuple[str, object], ...]
    outputs: tuple[Var, ...]
    location: str

    @property
    def attr(self) -> dict:
        return dict(self.attrs)


class Graph:
    """A symbolic graph. Nodes are kept in the order they were made, which is a topological order.

    >>> g = Graph(); x = g.input("x", (2, 3)); y = x * 2.0
    """

    eager = False  # the eager graph of mgegraph.eager, whose nodes run when made, says True

    def __init__(self):
        self.nodes: list[Node] = []
        self.inputs: dict[str, Var] = {}
        self.params: dict[str, Var] = {}
        self.values: dict[int, np.ndarray] = {}  # var id -> value of a param or const
        self.shared: set[int] = set()  # param var ids whose array is used in place, not copied
        self.assigns: list[Node] = []  # state updates, applied at the end of every run
        self._bound: dict[int, Var] = {}  # id(nn.Parameter) -> its param Var in this graph
        self._next_id = 0
        # what the shape rules found that named input sizes must satisfy (`batch == n`),
        # checked when a run's feeds bind the names
        self.constraints = Constraints()

    @property
    def symbolic(self) -> bool:
        """Whether an input has a named dimension (the graph compiles to a plan that
        specialises itself for each binding of the names)."""
        return any(v.type.symbolic for v in self.inputs.values())

    @property
    def dim_names(self) -> frozenset[str]:
        """The names of the inputs' dimensions, in no order."""
        return frozenset(n for v in self.inputs.values() for d in v.shape
                         for n in dim_names(d))

    # -- sources --------------------------------------------------------------------------
    def input(self, name: str, shape, dtype="float32", quant=None) -> Var:
        """A value fed at run time: ``plan.run({name: array})``.

        A dimension may be a name (``g.input("x", ("batch", 784))`` or ``mg.Dim("batch")``):
        the graph then takes any size there, and ``mg.compile`` makes a plan for each size
        fed (``docs/ir.md``, flexible shapes). ``quant`` (``ir.quant.QuantParams``) makes it a
        quantized input whose integers are stored as ``dtype``."""
        self._check_new_name(name)
        t = tensor_type(shape, dtype, quant)
        (var,) = self.add_node("input", (), {"name": name}, types=(t,)).outputs
        self.inputs[name] = var
        return var

    def param(self, name: str, value, share: bool = False, quant=None) -> Var:
        """A named, persistent, trainable value, initialised from ``value`` (copied).

        With ``share=True`` the plan uses ``value`` itself as the buffer (it must be a
        C-contiguous array of a supported dtype): runs read it and state updates write it, so
        several plans (a training step and a predictor) see the same weights. ``quant`` makes
        it a quantized weight (its integers as ``value``'s dtype).
        """
        self._check_new_name(name)
        if share:
            if not (isinstance(value, np.ndarray) and value.flags.c_contiguous
                    and value.flags.writeable):
                raise GraphError(f"param {name!r}: share=True needs a writeable C-contiguous "
                                 "numpy array")
            as_dtype(value.dtype)
            array = value
        else:
            array = _as_array(value)
        (var,) = self.add_node("param", (), {"name": name},
                               types=(_type_of(array, quant),)).outputs
        self.params[name] = var
        self.values[var.id] = array
        if share:
            self.shared.add(var.id)
        return var

    def assign(self, target: Var, value: Var) -> None:
        """Write ``value`` into param ``target`` when a run ends.

        Every read during a run sees the values the params had when it started; all assigns
        take effect together at its end. A param is assigned at most once in a graph: a second
        ``assign`` of the same param is refused when the graph is compiled (a GraphError), since
        which of two writes wins would be an accident of the schedule; combine the updates into
        one value instead.

        >>> g.assign(w, w - 0.1 * dw)
        """
        if not (isinstance(target, Var) and target.graph is self and target.node.op.name == "param"):
            raise GraphError("assign(): the target must be a param of this graph")
        value = self.lift(value, target)
        if value.type != target.type:
            raise GraphError(f"assign(): value {value.type} does not match param "
                             f"{target.node.attr['name']!r} {target.type}")
        node = Node(_get_op("assign"), (target, value), (), (), user_location())
        self.nodes.append(node)
        self.assigns.append(node)

    def const(self, value, dtype=None, quant=None) -> Var:
        """A constant baked into the graph (copied); ``quant`` makes its integers quantized."""
        array = _as_array(value, dtype)
        attrs = {"value": array.item()} if array.ndim == 0 and quant is None else {}
        (var,) = self.add_node("const", (), attrs, types=(_type_of(array, quant),)).outputs
        self.values[var.id] = array
        return var

    def _check_new_name(self, name: str):
        if not isinstance(name, str) or not name:
            raise GraphError(f"a name must be a non-empty string, got {name!r}")
        if name in self.inputs or name in self.params:
            raise GraphError(f"name {name!r} is already used in this graph")

    # -- nodes ----------------------------------------------------------------------------
    def add_node(self, op, inputs, attrs, types=None, location: str | None = None) -> Node:
        """Make a node of registered op ``op`` (name or OpDef); its output types are inferred.
        ``location`` is where the user made it (found from the stack when not given; passes
        rebuilding a graph pass the original node's)."""
        opdef = _get_op(op) if isinstance(op, str) else op
        location = user_location() if location is None else location
        inputs = tuple(self.bind(v) if hasattr(v, "bind_to") else v for v in inputs)
        for v in inputs:
            if not isinstance(v, Var) or v.graph is not self:
                raise OpError(opdef.name, [_describe(v) for v in inputs],
                              "an input belongs to another graph or is not a Var", location)
        in_types = tuple(v.type for v in inputs)
        full_attrs = opdef.complete_attrs(attrs, in_types, location)
        _check_plain_attrs(opdef.name, in_types, full_attrs, location)
        if opdef.category == "source":
            # input/param/const: Graph.input/param/const (and a pass's rebuild) give the type,
            # taken from the shape and dtype asked for or from the value itself
            types = tuple(types) if types is not None else ()
            if len(types) != 1 or not isinstance(types[0], TensorType) or inputs:
                raise OpError(opdef.name, in_types, f"a source takes no inputs and one output "
                              f"type, got types={types!r}", location)
        else:
            # every other node's types are its op's rule's, whatever the caller says: a kernel
            # trusts them (buffer sizes), so a wrong given type would overrun a buffer
            try:
                with facts.recording(self.constraints, opdef.name, location):
                    inferred = tuple(opdef.infer(in_types, full_attrs))
            except (ValueError, TypeError) as exc:  # a DimError is a ValueError
                raise OpError(opdef.name, in_types, str(exc), location) from None
            if types is not None and tuple(types) != inferred:
                raise OpError(opdef.name, in_types, f"given output types "
                              f"{', '.join(map(str, types)) or 'none'} but the op's rule "
                              f"gives {', '.join(map(str, inferred)) or 'none'}", location)
            types = inferred
        outputs = tuple(Var(self, self._new_id(), t, None, i) for i, t in enumerate(types))
        node = Node(opdef, tuple(inputs), tuple(sorted(full_attrs.items())), outputs, location)
        for v in outputs:
            v.node = node
        self.nodes.append(node)
        return node

    def add_copy(self, node: Node, inputs: tuple[Var, ...]) -> Node:
        """``node`` again on ``inputs``: the same op, attributes, output types and location.

        For graph passes, which copy most nodes as they are onto inputs of the same types (their
        rebuild checks that every replaced value keeps its type): no attribute completion and no
        type inference, which would repeat what the node already holds. Check mode still
        re-infers every type after each pass (``pipeline.verify_graph``).
        """
        outputs = tuple(Var(self, self._new_id(), v.type, None, i)
                        for i, v in enumerate(node.outputs))
        new = Node(node.op, tuple(inputs), node.attrs, outputs, node.location)
        for v in outputs:
            v.node = new
        self.nodes.append(new)
        return new

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def lift(self, value, like: Var | None = None) -> Var:
        """A Python scalar or array as a const; scalars take NumPy 2's weak-scalar dtype rule.

        An ``nn.Parameter`` (anything with ``bind_to``) becomes this graph's param Var for it.
        """
        if hasattr(value, "bind_to"):  # (a Parameter is an eager Tensor, a Var, too)
            return self.bind(value)
        if isinstance(value, Var):
            return value
        if like is not None and isinstance(value, (numbers.Number, np.bool_)) and not isinstance(
                value, np.generic):
            dtype = np.result_type(like.dtype, value)
            if dtype.kind in "iu" and not np.iinfo(dtype).min <= value <= np.iinfo(dtype).max:
                # NumPy 2 refuses a Python int outside the dtype of the tensor it meets
                raise GraphError(f"the Python integer {value} does not fit {like.dtype}, the "
                                 f"dtype of the tensor it meets (NumPy refuses it too); cast "
                                 f"the tensor to a wider dtype first (at {user_location()})")
            return self.const(value, dtype)
        return self.const(value)

    def bind(self, parameter) -> Var:
        """The param Var of an nn.Parameter in this graph, made on first use (shared buffer)."""
        key = id(parameter)
        if key not in self._bound:
            self._bound[key] = parameter.bind_to(self)
        return self._bound[key]

    # -- views ----------------------------------------------------------------------------
    def __str__(self) -> str:
        return format_graph(self)

    def to_dot(self) -> str:
        return graph_to_dot(self)


def _as_array(value, dtype=None) -> np.ndarray:
    if isinstance(value, np.ndarray):
        # a broadcast view (np.broadcast_to) holds few bytes but its copy may need terabytes:
        # refuse what cannot be addressed, or is more than this machine's memory, before copying
        kind = tensor_type(value.shape, as_dtype(value.dtype if dtype is None else dtype))
        memory = _physical_memory()
        if memory is not None and kind.nbytes > memory:
            raise GraphError(f"a value of shape {value.shape} and dtype {kind.dtype} needs "
                             f"{kind.nbytes} bytes to copy, more than this machine's memory "
                             f"({memory} bytes) (at {user_location()})")
    try:
        array = np.array(value, dtype=dtype, copy=True)
    except MemoryError:
        raise GraphError(f"a value of shape {np.shape(value)} is more than can be allocated "
                         f"(at {user_location()})") from None
    except OverflowError as exc:  # a Python int outside the dtype asked for (NumPy 2 refuses it)
        raise GraphError(f"{exc} (at {user_location()})") from None
    if dtype is None and array.dtype == np.float64 and not isinstance(value, np.ndarray):
        array = array.astype(np.float32)  # Python floats become float32, the first-class dtype
    if dtype is None and array.dtype.kind == "i" and not isinstance(value, np.ndarray):
        array = array.astype(np.int64)
    as_dtype(array.dtype)
    return array if array.flags.c_contiguous else array.copy(order="C")


# MegEngine's default dtypes: data given without dtype= that NumPy would hold as float64 becomes
# float32, and int64 becomes int32 (MegEngine's core converts so); dtype= keeps either
DEFAULT_NARROWING = {np.dtype(np.float64): np.dtype(np.float32),
                     np.dtype(np.int64): np.dtype(np.int32)}


def value_dtype(value) -> np.dtype:
    """The dtype a tensor made of ``value`` gets (``_as_array``'s, then MegEngine's default
    narrowing), so a function that fills with a Python value picks the dtype ``mg.tensor(value)``
    would have."""
    dtype = _as_array(value).dtype
    return DEFAULT_NARROWING.get(dtype, dtype)


def _check_plain_attrs(op: str, in_types, attrs: dict, location: str) -> None:
    """Attributes are plain immutable values (numbers, strings, tuples of them): a node is
    immutable, passes compare and hash them (cse), and a list or array a caller keeps could
    change under a built graph."""
    for key, value in attrs.items():
        try:
            hash(value)
        except TypeError:
            raise OpError(op, in_types, f"attribute {key}={value!r} is not a plain immutable "
                          f"value ({type(value).__name__}); pass a tuple, a number or a string",
                          location) from None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _type_of(array: np.ndarray, quant=None) -> TensorType:
    return tensor_type(array.shape, array.dtype, quant)


def _describe(v) -> str:
    return str(v.type) if isinstance(v, Var) else type(v).__name__
