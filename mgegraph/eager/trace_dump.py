"""``Traced.dump``: a traced function's latest plan written as mgegraph's model file, under
MegEngine's ``trace.dump`` arguments.

MegEngine writes its own graph format; mgegraph writes its model file (a zip of JSON and
checksummed arrays that ``mg.load`` rebuilds through the ops' rules, never unpickling). What
the plan computes is the traced call's outputs (not the gradients a training step also
returns); its inputs are the tensor arguments, named ``arg_names`` or, as MegEngine names
them, ``arg_0``, ``arg_1``...
The options of MegEngine's format and its inference optimiser (``MEGENGINE_ONLY``) have no
meaning for this file: given with a value other than MegEngine's default, each draws a
``DumpWarning`` naming it, and the file is written as without it.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from typing import NamedTuple

from ..compiler import compile
from ..ir.errors import GraphError, TraceError
from ..planner.passes.rewrite import rebuild

# MegEngine's dump options about its own format, its test-case embedding and its layout
# transforms, with MegEngine's defaults
MEGENGINE_ONLY = {
    "append": False, "keep_var_name": 1, "keep_opr_name": False, "keep_param_name": False,
    "keep_opr_priority": False, "no_change_graph": False, "strip_info_file": None,
    "append_json": False, "user_info": None, "enable_metadata": True, "input_data": None,
    "repeat": 1, "silent": False, "no_assert": False, "maxerr": 1e-4, "resize_input": False,
    "input_transform": None, "dump_format": None, "model_version": 2,
    "compat_older_version": None,
}
LAYOUT_PREFIX = "enable_"  # enable_io16xc32, enable_nchw44...: MegEngine's inference passes


class DumpWarning(UserWarning):
    """A MegEngine dump option that mgegraph's model file has no use for was given."""


class DumpInfo(NamedTuple):
    """What ``dump`` wrote, as MegEngine's ``CompGraphDumpResult`` (a tuple in that order, so
    ``info[4]`` is the inputs' names there too): the graph's node count, the file's bytes, the
    bytes of the weights and constants in it, a 64-bit hash of the file, the inputs' and
    outputs' names and the names of the weights kept as weights (``capture_as_const`` makes
    them constants)."""

    nr_opr: int
    tot_bytes: int
    tensor_value_bytes: int
    content_hash: int
    inputs: list
    outputs: list
    params: list


def write_dump(traced, file, arg_names, output_names, optimize_for_inference: bool,
               options: dict) -> DumpInfo:
    """``Traced.dump``'s work (its docstring says what the arguments mean)."""
    if not traced.capture_as_const:
        raise TraceError("you must specify capture_as_const=True at __init__ to use dump")
    latest = traced._latest
    if latest is None:
        raise TraceError(f"dump: {traced.function.__qualname__} has not been called yet, so "
                         "there is no plan to write")
    if latest.n_results == 0:
        raise TraceError("the traced function without return values cannot be dumped, the "
                         "traced function should return List[Tensor] or Dict[str, Tensor]")
    if latest.constant_updates:
        raise TraceError(f"dump: {traced.function.__qualname__} updates "
                         f"{', '.join(latest.constant_updates)}, which capture_as_const=True "
                         "made a constant; a model file cannot update state (call the module's "
                         "eval() before tracing it for inference)")
    _warn_ignored(options)
    source = latest.plan.source
    names = _input_names(source.graph, arg_names)
    graph, outputs = _renamed(source.graph, source.outputs[:latest.n_results], names)
    compile_options = dict(source.options)
    if not optimize_for_inference:
        compile_options["optimize"] = 0
    plan = compile(outputs, **compile_options)
    output_names = _output_names(latest.structure, output_names, len(outputs))
    content = _write(plan, file, output_names)
    # the stored arrays are the graph's weights and constants (a SymbolicPlan has no slots)
    values = [n for n in graph.nodes if n.op.name in ("param", "const")]
    return DumpInfo(len(graph.nodes), len(content),
                    sum(n.outputs[0].type.nbytes for n in values),
                    int.from_bytes(hashlib.sha256(content).digest()[:8], "little"),
                    list(names.values()), output_names,
                    [n.attr.get("name") for n in values if n.op.name == "param"])


def _warn_ignored(options: dict) -> None:
    unknown = [k for k in options if k not in MEGENGINE_ONLY and not k.startswith(LAYOUT_PREFIX)]
    if unknown:
        raise TypeError(f"dump() got unexpected keyword arguments {', '.join(unknown)}")
    given = [k for k, v in options.items() if MEGENGINE_ONLY.get(k, False) != v]
    if given:
        warnings.warn(f"dump: {', '.join(given)} concern MegEngine's own model format and "
                      "mean nothing for mgegraph's model file, which is written as without "
                      "them", DumpWarning, stacklevel=3)


def _input_names(graph, arg_names) -> dict:
    """{old input name: new name}, in feed order."""
    old = list(graph.inputs)
    if arg_names is None:  # MegEngine's default names, in the order of the tensor arguments
        return {name: f"arg_{i}" for i, name in enumerate(old)}
    arg_names = [arg_names] if isinstance(arg_names, str) else list(arg_names)
    if len(arg_names) != len(old):
        raise GraphError(f"dump: wrong number of arg_names, should be {len(old)} values "
                         f"(the tensor arguments {', '.join(old)}); got {arg_names}")
    if len(set(arg_names)) != len(arg_names):
        raise GraphError(f"dump: arg_names {arg_names} repeat a name")
    return dict(zip(old, arg_names))


def _renamed(graph, outputs, names: dict):
    """The graph with its inputs renamed, and ``outputs`` in it."""
    def rename(builder, node):
        if node.op.name != "input":
            return None
        (old,) = node.outputs
        return (builder.graph.input(names[node.attr["name"]], old.shape, old.dtype),)

    builder = rebuild(graph, rename)
    return builder.graph, [builder.var(v) for v in outputs]


def _output_names(structure, output_names, count: int) -> list:
    if output_names is None:
        keys = _dict_keys(structure)
        return keys if keys is not None else [f"output{i}" for i in range(count)]
    output_names = [output_names] if isinstance(output_names, str) else list(output_names)
    if len(output_names) != count:
        raise GraphError(f"dump: wrong number of output_names, should be {count} values; got "
                         f"{output_names}")
    return output_names


def _dict_keys(structure):
    """The keys of a traced function's dict result, in the order of its outputs, or None."""
    if not isinstance(structure, tuple) or structure[0] is not dict:
        return None
    items = structure[1]
    if not all(isinstance(i, int) for i in items.values()):
        return None
    return [str(k) for k, _ in sorted(items.items(), key=lambda kv: kv[1])]


def _write(plan, file, output_names: list) -> bytes:
    """Write the model file to a path or a binary file object; returns its bytes."""
    from ..io import save  # lazy: the model file sits above eager mode (io/), needed here only

    if isinstance(file, (str, os.PathLike)):
        save(plan, file, output_names=output_names)
        with open(file, "rb") as written:
            return written.read()
    with tempfile.TemporaryDirectory() as folder:  # a file object gets the file's bytes
        path = os.path.join(folder, "model.mgm")
        save(plan, path, output_names=output_names)
        with open(path, "rb") as written:
            content = written.read()
    file.write(content)
    return content
