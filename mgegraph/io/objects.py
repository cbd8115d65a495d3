"""``mg.save`` / ``mg.load`` of the objects MegEngine's ``mge.save`` pickles: a Module, a state
dict (nested dicts, lists and tuples of arrays, tensors, numbers and strings), a tensor.

Design: unpickling runs whatever code a file names, so a model downloaded from anywhere could
run anything. These objects go into the model file's container instead (``container``: JSON and
``.npy`` members, checked before use): each value is a tagged JSON node, each array a member. A
Module is written as its class's ``module:qualname`` and its attributes; loading makes one only
of a Module class already imported (nothing is imported, so naming a module runs no code),
without calling its ``__init__``, and sets the attributes. A tensor or module met twice (a
weight two layers share) is written once and loaded as one object. What is not one of these
(functions, open files, other classes) is refused when saving, naming where it sits.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .. import dtype as qdtypes
from ..ir.errors import GraphError
from ..ir.types import SUPPORTED, tensor_type
from .container import fail, write
from .graph_json import decode_type, encode_type

KIND = "object"
_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
MAX_DEPTH = 200  # nested containers and modules a file may hold (Python's recursion bounds it)


def _modules():
    """The nn module layer when it is loaded (a Module exists only then; a deployment's
    ``mg.load`` must not load it)."""
    return sys.modules.get("mgegraph.nn.module")


def _tensor_class():
    tensor = sys.modules.get("mgegraph.eager.tensor")
    return None if tensor is None else tensor.Tensor


# -- saving --------------------------------------------------------------------------------------
class _Encoder:
    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self.seen: dict[int, int] = {}  # id of a tensor or module -> its number in the file

    def array(self, array: np.ndarray, where: str) -> dict:
        if array.dtype not in SUPPORTED:
            raise GraphError(f"save(): {where}: arrays of dtype {array.dtype} cannot be stored")
        self.arrays.append(np.require(array, requirements="C"))  # (0-d stays 0-d)
        return {"array": f"arrays/{len(self.arrays) - 1}.npy", **encode_type(tensor_type(
            array.shape, array.dtype))}

    def encode(self, obj, where: str):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return obj if math.isfinite(obj) else {"float": repr(obj)}
        if isinstance(obj, (list, tuple)):
            kind = "list" if isinstance(obj, list) else "tuple"
            return {kind: [self.encode(v, f"{where}[{i}]") for i, v in enumerate(obj)]}
        if isinstance(obj, dict):
            return {"dict": [[self.encode(k, f"{where} key"), self.encode(v, f"{where}[{k!r}]")]
                             for k, v in obj.items()]}
        if isinstance(obj, np.generic):
            return {"scalar": self.array(np.asarray(obj), where)}
        if isinstance(obj, np.ndarray):
            return {"ndarray": self.array(obj, where)}
        if isinstance(obj, np.dtype):
            return _encode_dtype(obj, where)
        return self.shared(obj, where)

    def shared(self, obj, where: str) -> dict:
        modules, tensor = _modules(), _tensor_class()
        if id(obj) in self.seen:
            return {"ref": self.seen[id(obj)]}
        if modules is not None and isinstance(obj, modules.Parameter):
            node = {"parameter": self.array(obj.numpy(), where), "trainable": obj.trainable,
                    "name": obj.name}
        elif tensor is not None and isinstance(obj, tensor):
            node = {"tensor": self.array(obj.numpy(), where)}
        elif modules is not None and isinstance(obj, modules.Module):
            node = {"module": _class_name(type(obj), where)}
        else:
            raise GraphError(f"save(): {where} is a {type(obj).__name__}; a saved object holds "
                             "Modules, tensors, arrays, numbers, strings, None and lists, "
                             "tuples and dicts of them (no pickling: see mg.save)")
        self.seen[id(obj)] = node["id"] = len(self.seen)
        if "module" in node:
            node["attributes"] = {"dict": [[key, self.encode(value, f"{where}.{key}")]
                                           for key, value in vars(obj).items()]}
        return node


def _encode_dtype(dtype: np.dtype, where: str) -> dict:
    """A dtype (an int8 layer's output type): its name, and a quantized dtype's "mgb_dtype"
    fields (mgegraph.dtype's qint8, quint8, qint32)."""
    if dtype not in SUPPORTED:
        raise GraphError(f"save(): {where}: dtype {dtype} cannot be stored")
    node = {"dtype": dtype.name}
    if qdtypes.is_quantize(dtype):
        node["mgb_dtype"] = dict(dtype.metadata["mgb_dtype"])
    return node


def _decode_dtype(node, where: str) -> np.dtype:
    name, fields = node["dtype"], node.get("mgb_dtype")
    if type(name) is not str or name not in {d.name for d in map(np.dtype, SUPPORTED)}:
        fail(f"{where}: {name!r} is not a dtype a file may hold")
    if fields is None:
        return np.dtype(name)
    if type(fields) is not dict or not {"name", "scale"} <= set(fields) <= {
            "name", "scale", "zero_point"}:
        fail(f"{where}: a quantized dtype's fields are name, scale and zero_point")
    meta = qdtypes._BY_CNAME.get(fields["name"]) if type(fields["name"]) is str else None
    if meta is None or meta.np_dtype_str != name:
        fail(f"{where}: {fields['name']!r} is not a quantized dtype stored as {name}")
    try:
        return qdtypes.create_quantized_dtype(meta, fields["scale"], fields.get("zero_point"))
    except (TypeError, ValueError) as exc:
        fail(f"{where}: {exc}")


def _class_name(cls, where: str) -> str:
    if "<locals>" in cls.__qualname__:
        raise GraphError(f"save(): {where} is a {cls.__qualname__}, a class defined inside a "
                         "function, which loading could not find; define it at module level")
    return f"{cls.__module__}:{cls.__qualname__}"


def save(obj, path) -> None:
    """Write ``obj`` to ``path`` (a file name or a binary file object)."""
    encoder = _Encoder()
    root = encoder.encode(obj, type(obj).__name__)
    write(path, {"kind": KIND, "object": root}, encoder.arrays)


# -- loading -------------------------------------------------------------------------------------
class _Decoder:
    def __init__(self, container, used: set):
        self.container, self.used = container, used
        self.made: dict[int, object] = {}  # number in the file -> the tensor or module made

    def array(self, node, where: str) -> np.ndarray:
        if type(node) is not dict or set(node) != {"array", "shape", "dtype"}:
            fail(f"{where}: an array must be {{array, shape, dtype}}")
        t = decode_type({"shape": node["shape"], "dtype": node["dtype"]},
                        self.container.limits, where)
        if type(node["array"]) is not str:
            fail(f"{where}: the array's member must be a name")
        return self.container.array(node["array"], t.shape, t.dtype, self.used)

    def decode(self, node, where: str, depth: int = 0):
        if depth > MAX_DEPTH:
            fail(f"{where}: nested deeper than {MAX_DEPTH}")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is not dict or not node:
            fail(f"{where}: {type(node).__name__} is not a value of a saved object")
        tag = next(iter(node))
        if tag in ("list", "tuple") and len(node) == 1 and type(node[tag]) is list:
            items = [self.decode(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(node[tag])]
            return items if tag == "list" else tuple(items)
        if tag == "dict" and len(node) == 1:
            return self.dict(node["dict"], where, depth)
        if tag == "float" and len(node) == 1 and node["float"] in _FLOATS:
            return _FLOATS[node["float"]]
        if tag in ("ndarray", "scalar") and len(node) == 1:
            array = self.array(node[tag], where)
            return array if tag == "ndarray" else array[()]
        if tag == "dtype" and set(node) <= {"dtype", "mgb_dtype"}:
            return _decode_dtype(node, where)
        if tag == "ref" and len(node) == 1:
            if type(node["ref"]) is not int or node["ref"] not in self.made:
                fail(f"{where}: a reference to {node['ref']!r}, which comes before nothing")
            return self.made[node["ref"]]
        return self.shared(node, where, depth)

    def dict(self, pairs, where: str, depth: int) -> dict:
        if type(pairs) is not list or any(type(p) is not list or len(p) != 2 for p in pairs):
            fail(f"{where}: a dict must be a list of [key, value] pairs")
        found = {}
        for key, value in pairs:
            key = self.decode(key, f"{where} key", depth + 1)
            try:
                hash(key)
            except TypeError:
                fail(f"{where}: a dict key must be hashable, got a {type(key).__name__}")
            found[key] = self.decode(value, f"{where}[{key!r}]", depth + 1)
        return found

    def shared(self, node, where: str, depth: int):
        if set(node) not in ({"tensor", "id"}, {"parameter", "trainable", "name", "id"},
                             {"module", "attributes", "id"}):
            fail(f"{where}: unknown node {sorted(node)[:5]}")
        number = node["id"]
        if type(number) is not int or number in self.made:
            fail(f"{where}: a tensor or module needs a new id, got {number!r}")
        if set(node) == {"tensor", "id"}:
            from ..eager.tensor import Tensor  # lazy: startup cost (runtime.load loads no eager)
            array = self.array(node["tensor"], where)
            made = self.made[number] = Tensor(array, dtype=array.dtype)
            return made
        if "parameter" in node:
            return self.parameter(node, number, where)
        return self.module(node, number, where, depth)

    def parameter(self, node, number: int, where: str):
        from ..nn.module import Parameter  # lazy: startup cost (runtime.load loads no nn)
        if type(node["trainable"]) is not bool or not (node["name"] is None
                                                        or type(node["name"]) is str):
            fail(f"{where}: a parameter's trainable must be a bool and its name a string")
        made = self.made[number] = Parameter(self.array(node["parameter"], where),
                                             name=node["name"], trainable=node["trainable"])
        return made

    def module(self, node, number: int, where: str, depth: int):
        cls = _loaded_module_class(node["module"], where)
        made = self.made[number] = cls.__new__(cls)
        attributes = node["attributes"]
        if type(attributes) is not dict or set(attributes) != {"dict"}:
            fail(f"{where}: a module's attributes must be a dict")
        state = self.dict(attributes["dict"], where, depth + 1)
        if any(type(key) is not str for key in state):
            fail(f"{where}: a module's attribute names must be strings")
        vars(made).update(state)  # as unpickling does: no __init__, no __setattr__
        return made


def _loaded_module_class(text, where: str):
    """The Module subclass ``module:qualname`` names, among the modules already imported."""
    modules = _modules()
    if type(text) is not str or text.count(":") != 1:
        fail(f"{where}: a module's class must be written 'module:qualname'")
    name, qualname = text.split(":")
    found = sys.modules.get(name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if modules is None or not isinstance(found, type) or not issubclass(found, modules.Module):
        fail(f"{where}: {text[:200]!r} is not a Module class of a module imported now; import "
             "the code that defines it before loading (loading imports nothing)")
    return found


def read(container) -> object:
    """The object a file of kind ``object`` holds, every member used and checked."""
    description = container.description
    if set(description) != {"magic", "format_version", "members", "kind", "object"}:
        fail("an object file holds magic, format_version, members, kind and object")
    used: set = set()
    found = _Decoder(container, used).decode(description["object"], "object")
    unused = set(description["members"]) - used
    if unused:
        fail(f"members {sorted(unused)[:10]} are listed but nothing uses them")
    return found
