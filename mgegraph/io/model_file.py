"""``mg.save`` / ``mg.load``: a plan, a traced function, a ``compile_module`` predictor or a
state dict in one zip container (``model.json`` and ``.npy`` members, each checksummed).

A model file holds the graph a plan was compiled from (``plan.source``), its input and output
names, shapes and dtypes and the compile options; loading validates all of it, rebuilds the
graph through the ops' rules and compiles it again with the same options, so the loaded plan
gives bitwise the outputs of the saved one on the same machine. A state dict file holds named
arrays only. Any problem with a file is one ``ModelFormatError``, raised before anything runs.

A ``SymbolicPlan`` (a graph whose inputs name a dimension) is saved with its named dimensions
(format version 2, ``graph_json``), its bounds, cache size and the bindings to specialise at
load (``save(..., warm=)``); loading rebuilds the graph, whose rules record their facts about
the names again, and gives a ``SymbolicPlan`` that takes any shape those facts allow.

>>> mg.save(plan, "model.mgm"); predictor = mg.load("model.mgm"); (y,) = predictor.run({"x": x})
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields

import numpy as np

from ..backend import sync_to_host
from ..compiler import compile
from ..ir.errors import FeedError, GraphError, ModelFormatError
from ..ir.types import SUPPORTED, tensor_type
from ..plan import Plan
from ..planner.memory.plan import MemoryOptions
from ..planner.remat.remat import RematOptions
from ..symbolic_plan import SymbolicPlan
from ..tuning import check_mode
from . import objects
from .container import Container, Limits, fail, write
from .graph_json import (
    DTYPES,
    decode_graph,
    decode_type,
    encode_graph,
    encode_type,
    fields,
    size_problem,
)

KINDS = ("plan", "traced", "predictor", "state_dict", objects.KIND)
SYMBOLIC_VERSION = 2  # the format version that holds named dimensions
SYMBOLIC_OPTIONS = ("cache_size", "bounds", "warm")  # a SymbolicPlan's own, beside compile's
MODEL_KEYS = {"magic", "format_version", "members", "kind", "graph", "inputs", "outputs",
              "options"}


@dataclass(frozen=True)
class LoadedModel:
    """What a model file gives: the compiled ``plan``, what kind of object was saved, and the
    names of its inputs (the plan's feeds) and outputs, in order."""

    plan: object
    kind: str
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]


# -- saving --------------------------------------------------------------------------------------
def save(obj, path, *, warm=(), output_names=None) -> None:
    """Save a Plan or ``SymbolicPlan``, a function traced with ``mg.jit.trace`` (its latest
    plan), the predictor of ``mg.compile_module`` or a state dict (``{name: ndarray}``) to
    ``path`` (a file name or a binary file object). Anything else MegEngine's ``mge.save``
    takes (a Module, a tensor, nested dicts and lists of arrays, tensors, numbers and strings)
    is saved as an object (``io.objects``), never pickled: no arbitrary Python objects, so
    loading a file runs no code it names.

    Params are saved with the values their graph holds: a shared param's (``share=True``, as
    every ``nn`` parameter) is its live array, so the weights as they are now; a param copied
    at compile keeps the value it had then (state updates a plan's runs made to such a copy
    live in its executable and are not saved). A symbolic plan keeps its named dimensions,
    bounds and cache size; ``warm`` lists bindings (``[{"batch": 1}]``) that loading
    specialises ahead of the first run. ``output_names`` names the outputs (``output0``,
    ``output1``... by default).

    >>> mg.save(model.state_dict(), "weights.mgm"); mg.save(predict, "model.mgm")
    """
    if isinstance(obj, dict) and _flat_state(obj):
        _save_state(obj, path)
        return
    kind, plan = _plan_of(obj)
    if plan is None:
        objects.save(obj, path)
        return
    symbolic = isinstance(plan, SymbolicPlan)
    if warm and not symbolic:
        raise GraphError("save(warm=...): warm bindings are for a plan whose inputs name a "
                         "dimension; this plan's shapes are all numbers")
    for fixed in [p for _, p in plan.plans] if symbolic else [plan]:
        sync_to_host(fixed.values[s] for s in fixed.shared)  # weights a device trained
    source = getattr(plan, "source", None)
    if source is None:
        raise GraphError("save(): this plan has no source graph (plan.source); compile it with "
                         "mg.compile to save it")
    graph_json, ids, arrays = encode_graph(source.graph, source.outputs)
    inputs = [{"name": name, **encode_type(t)} for name, t in input_types(plan).items()]
    names = output_names or [f"output{i}" for i in range(len(source.outputs))]
    outputs = [{"name": name, "var": ids[v.id], **encode_type(v.type)}
               for name, v in zip(names, source.outputs)]
    options = encode_options(source.options)
    if symbolic:
        options.update(cache_size=plan.cache_size, warm=[_warm(plan, b) for b in warm],
                       bounds={n: list(pair) for n, pair in sorted(plan.bounds.items())})
    write(path, {"kind": kind, "graph": graph_json, "inputs": inputs, "outputs": outputs,
                 "options": options}, arrays, version=SYMBOLIC_VERSION if symbolic else 1)


def input_types(plan) -> dict:
    """Each input's name and type (symbolic where a dimension is named), in feed order."""
    if isinstance(plan, SymbolicPlan):
        return plan.input_types
    return {name: plan.slots[slot].type for name, slot in plan.feeds.items()}


def output_types(plan) -> list:
    if isinstance(plan, SymbolicPlan):
        return plan.output_types
    return [plan.slots[s].type for s in plan.outputs]


def _warm(plan: SymbolicPlan, bindings) -> dict:
    """One ``save(warm=)`` binding, checked as a run would check it: every name an int
    within its bounds, the recorded facts true."""
    if not isinstance(bindings, dict) or set(bindings) != plan.names:
        raise GraphError(f"save(warm=...): {bindings!r} is not a binding of every name "
                         f"({', '.join(sorted(plan.names))}) to an int")
    for name, value in bindings.items():
        low, high = plan.bounds.get(name, (1, None))
        if type(value) is not int or value < low or (high is not None and value > high):
            raise GraphError(f"save(warm=...): {name}={value!r} is not an int in {low}.."
                             f"{high or ''}")
    try:
        plan.constraints.check(bindings)
    except FeedError as exc:
        raise GraphError(f"save(warm=...): {bindings}: {exc}") from None
    return dict(sorted(bindings.items()))


def _plan_of(obj) -> tuple[str, object]:
    if isinstance(obj, (Plan, SymbolicPlan)):
        return "plan", obj
    # the eager and training layers are looked up, not imported: an object of theirs exists
    # only when they are loaded, and the model file must not pull them into a runtime
    trace = sys.modules.get("mgegraph.eager.trace")
    if trace is not None and isinstance(obj, trace.Traced):
        return "traced", obj.plan
    train = sys.modules.get("mgegraph.train")
    if train is not None and isinstance(obj, train.Predictor):
        return "predictor", obj.plan
    return "", None


def _flat_state(state: dict) -> bool:
    """Whether ``state`` is names to arrays (or tensors), which loads as a dict of arrays."""
    tensor = sys.modules.get("mgegraph.eager.tensor")
    return all(isinstance(name, str) and (isinstance(value, np.ndarray) or (
        tensor is not None and isinstance(value, tensor.Tensor))) for name, value in state.items())


def _save_state(state: dict, path) -> None:
    entries, arrays = [], []
    for name, value in state.items():
        array = value if isinstance(value, np.ndarray) else getattr(value, "numpy", lambda: None)()
        if not isinstance(name, str) or not isinstance(array, np.ndarray) \
                or array.dtype not in SUPPORTED:
            raise GraphError(f"save(): a state dict maps names to arrays of {sorted(DTYPES)}; "
                             f"got {name!r}: {type(value).__name__}")
        entries.append({"name": name, "array": f"arrays/{len(arrays)}.npy",
                        **encode_type(_type(array))})
        arrays.append(array)
    write(path, {"kind": "state_dict", "state": entries}, arrays)


def _type(array):
    return tensor_type(array.shape, array.dtype)


# -- compile options -----------------------------------------------------------------------------
def encode_options(options: dict) -> dict:
    """``plan.source.options`` as JSON: MemoryOptions and RematOptions as tagged objects."""
    encoded = {}
    for key, value in options.items():
        if hasattr(value, "__dataclass_fields__"):
            value = {type(value).__name__: {f.name: getattr(value, f.name)
                                            for f in dataclass_fields(value)}}
        elif isinstance(value, (list, tuple)):
            value = list(value)
        encoded[key] = value
    return encoded


def decode_options(value, limits: Limits, symbolic: bool = False) -> dict:
    # what the file may say of its plan: not the compiler's private arguments, nor how this
    # machine chooses its kernels' ways (tune)
    accepted = {name for name in inspect.signature(compile).parameters
                if not name.startswith("_")} - {"outputs", "tune"}
    options = fields(value, {"device"}, "options", accepted)
    device, optimize = options["device"], options.get("optimize", 1)
    if type(device) is not str:
        fail("options.device must be a string")
    if not (type(optimize) is int or (type(optimize) is list
                                      and all(type(p) is str for p in optimize))):
        fail("options.optimize must be an int or a list of pass names")
    decoded = dict(options, optimize=optimize)
    for key, cls in (("memory", MemoryOptions), ("remat", RematOptions)):
        if key in options:
            decoded[key] = _option(options[key], cls, key)
    named = [key for key in SYMBOLIC_OPTIONS if key in options]
    if named and not symbolic:
        fail(f"options.{named[0]}: an option of a plan with named dimensions, which format "
             "version 1 does not hold")
    decoded.update(_symbolic_options(options, limits))
    for key, given in options.items():
        if key not in ("device", "optimize", "memory", "remat", *SYMBOLIC_OPTIONS) \
                and type(given) is not bool:
            fail(f"options.{key} must be true or false")
    return decoded


def _symbolic_options(options: dict, limits: Limits) -> dict:
    """cache_size, bounds and warm as JSON allows them; compile checks the names and values."""
    decoded = {}
    if "cache_size" in options:
        if type(options["cache_size"]) is not int or options["cache_size"] < 1:
            fail("options.cache_size must be an int >= 1")
        decoded["cache_size"] = options["cache_size"]
    if "bounds" in options:
        bounds = options["bounds"]
        if type(bounds) is not dict or not all(
                type(pair) is list and len(pair) == 2 and all(type(v) is int for v in pair)
                for pair in bounds.values()):
            fail("options.bounds must map names to [low, high] ints")
        decoded["bounds"] = {name: tuple(pair) for name, pair in bounds.items()}
    if "warm" in options:
        warm = options["warm"]
        if type(warm) is not list or len(warm) > limits.max_warm or not all(
                type(b) is dict and all(type(v) is int for v in b.values()) for b in warm):
            fail(f"options.warm must be a list of at most {limits.max_warm} bindings of names "
                 "to ints")
        decoded["warm"] = [dict(b) for b in warm]
    return decoded


def _option(value, cls, key: str):
    if value is None or type(value) is str or (type(value) is int and key == "remat"):
        return value
    if type(value) is dict and set(value) == {cls.__name__} and type(value[cls.__name__]) is dict:
        given = value[cls.__name__]
        kinds = {f.name: f.type for f in dataclass_fields(cls)}
        if not set(given) <= set(kinds):
            fail(f"options.{key}: unknown fields {sorted(set(given) - set(kinds))}")
        if not all(type(v) in (str, int, float, bool) for v in given.values()):
            fail(f"options.{key}: fields must be strings, numbers or booleans")
        try:
            return cls(**given)
        except (GraphError, TypeError, ValueError) as exc:
            fail(f"options.{key}: {exc}")
    fail(f"options.{key}: {str(value)[:100]!r} is not a {key} option")


# -- loading -------------------------------------------------------------------------------------
def read(path, limits: Limits | None = None, device: str | None = None, tune=None):
    """The contents of a model file, validated: a LoadedModel, or a dict for a state dict.
    ``device`` and ``tune`` (``mg.compile``'s) are this machine's choices, not the file's."""
    check_mode(tune)  # the caller's mistake, said before the file is read
    limits = Limits() if limits is None else limits
    with Container(path, limits) as container:
        description = container.description
        kind = description.get("kind")
        if kind not in KINDS:
            fail(f"unknown kind {str(kind)[:50]!r} (one of {KINDS})")
        if kind == "state_dict":
            state = _read_state(container)
        elif kind == objects.KIND:
            state = objects.read(container)
        else:
            fields(description, MODEL_KEYS, "model.json")
            symbolic = container.format_version >= SYMBOLIC_VERSION
            graph, variables, used = decode_graph(description["graph"], container, limits,
                                                  symbolic)
            _check_unused(container, used)
    if kind in ("state_dict", objects.KIND):
        return state
    return _compile(description, kind, graph, variables, limits, device, symbolic, tune)


def _read_state(container) -> dict:
    description = container.description
    fields(description, {"magic", "format_version", "members", "kind", "state"}, "model.json")
    entries, state, used = description["state"], {}, set()
    if type(entries) is not list:
        fail("state must be a list of named arrays")
    for i, entry in enumerate(entries):
        entry = fields(entry, {"name", "array", "shape", "dtype"}, f"state[{i}]")
        name = entry["name"]
        if type(name) is not str or name in state:
            fail(f"state[{i}]: the name must be a string used once")
        t = decode_type({"shape": entry["shape"], "dtype": entry["dtype"]}, container.limits,
                        f"state[{i}]")
        state[name] = container.array(entry["array"], t.shape, t.dtype, used)
    _check_unused(container, used)
    return state


def _type_fields(entry: dict) -> dict:
    """The fields of an input's or output's entry that are its type (a quantized one's too)."""
    return {k: entry[k] for k in ("shape", "dtype", "quant") if k in entry}


def _check_unused(container, used: set) -> None:
    unused = set(container.description["members"]) - used
    if unused:
        fail(f"members {sorted(unused)[:10]} are listed but nothing uses them")


def _compile(description, kind, graph, variables, limits, device, symbolic,
             tune=None) -> LoadedModel:
    inputs, outputs = description["inputs"], description["outputs"]
    if type(inputs) is not list or type(outputs) is not list or not outputs:
        fail("inputs and outputs must be lists (and a model has an output)")
    input_names = []
    for i, entry in enumerate(inputs):
        entry = fields(entry, {"name", "shape", "dtype"}, f"inputs[{i}]", optional={"quant"})
        name = entry["name"]
        t = decode_type(_type_fields(entry), limits, f"inputs[{i}]", symbolic)
        if type(name) is not str or name not in graph.inputs or graph.inputs[name].type != t \
                or name in input_names:
            fail(f"inputs[{i}]: {str(name)[:100]!r} {t} is not an input of the graph")
        input_names.append(name)
    if set(input_names) != set(graph.inputs):
        fail(f"inputs list {input_names[:10]}, the graph has {sorted(graph.inputs)[:10]}")
    vars_out, output_names = [], []
    for i, entry in enumerate(outputs):
        entry = fields(entry, {"name", "var", "shape", "dtype"}, f"outputs[{i}]",
                       optional={"quant"})
        var = variables[entry["var"]] if type(entry["var"]) is int \
            and 0 <= entry["var"] < len(variables) else fail(f"outputs[{i}]: unknown value")
        t = decode_type(_type_fields(entry), limits, f"outputs[{i}]", symbolic)
        if type(entry["name"]) is not str or var.type != t:
            fail(f"outputs[{i}]: the name must be a string and the type {var.type}")
        vars_out.append(var)
        output_names.append(entry["name"])
    options = decode_options(description["options"], limits, symbolic)
    if device is not None:
        options["device"] = device
    options["tune"] = tune
    for bindings in options.get("warm", ()):
        problem = sizes_problem(graph, bindings, limits)
        if problem:
            fail(f"options.warm {bindings}: {problem}")
    try:
        plan = compile(vars_out, **options)
    except ModelFormatError:
        raise
    except (GraphError, ValueError, TypeError, ArithmeticError, LookupError) as exc:
        fail(f"the graph does not compile: {type(exc).__name__}: {str(exc)[:500]}")
    for bindings, fixed in plan.plans if isinstance(plan, SymbolicPlan) else [({}, plan)]:
        problem = plan_bytes_problem(fixed, limits)
        if problem:
            fail(f"the plan{f' for {bindings}' if bindings else ''} {problem}")
    return LoadedModel(plan, kind, tuple(input_names), tuple(output_names))


def sizes_problem(graph, bindings: dict[str, int], limits: Limits) -> str | None:
    """Why a value of ``graph`` bound as ``bindings`` says would be over
    ``limits.max_tensor_bytes``, or None: asked before a binding is specialised, since
    compiling it may fold constants of those sizes."""
    for node in graph.nodes:
        for var in node.outputs:
            problem = var.type.symbolic and size_problem(var.shape, var.dtype, bindings, limits)
            if problem:
                return f"{node.op.name} at {node.location}: {problem}"
    return None


def plan_bytes_problem(plan: Plan, limits: Limits) -> str | None:
    """Why ``plan``'s arena and persistent buffers are over the limit, or None."""
    total = plan.arena_bytes + plan.persistent_bytes
    if total > limits.max_plan_bytes:
        return f"needs {total} bytes, over the limit of {limits.max_plan_bytes}"
    return None
