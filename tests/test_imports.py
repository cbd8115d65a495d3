"""The import graph: every module of mgegraph imports alone, in an interpreter of its own; the
static graph of module-level imports has no cycle; and every import of the package, those inside
functions and ``importlib.import_module("...")`` names included, keeps the layer order of
``mgegraph/README.md`` (``LAYERS``), forms no circle, and says why on its line when it sits
inside a function (``# lazy: <reason>``). Each failure prints the module, the line and what it
imports (a circle, the modules around it)."""
from __future__ import annotations

import ast
import functools
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mgegraph"


def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (its file, whether it is a package's __init__), for every .py file."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


@functools.cache
def compiled_modules() -> set[str]:
    """Module names of the Cython sources (.pyx): leaves of the import graph, since their
    imports are C-level, but ``from . import blas_table`` names them, not their package."""
    return {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in PACKAGE.rglob("*.pyx")}


# -- each module alone --------------------------------------------------------------------------
def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def _import_alone(name: str) -> tuple[str, int, str]:
    done = _python(f"import {name}")
    return name, done.returncode, done.stderr[-2000:]


def test_every_module_imports_alone_in_a_fresh_interpreter():
    # NOTE: importing a submodule runs its packages' __init__ first, so importing alone any
    # module that ``import mgegraph`` loads is exactly ``import mgegraph``: one interpreter
    # runs that, and each other module gets one of its own (a loop over modules in a single
    # interpreter would find each later module's imports already made).
    first = _python("import sys, mgegraph; print(*sorted(sys.modules), sep='\\n')")
    assert first.returncode == 0, first.stderr[-2000:]
    rest = sorted(set(modules()) - set(first.stdout.split()))
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        results = list(pool.map(_import_alone, rest))
    failed = [f"{name}:\n{err}" for name, code, err in results
              if code and not _optional_missing(err)]
    assert not failed, "\n".join(failed)


# the top-level packages of pyproject's optional extras (onnx, cuda, demo): a module that
# imports one of them at its top is reached only through a function that imports it when called,
# so where the extra is not installed, its failing alone is that extra missing, not a bug
OPTIONAL = ("onnx", "cuda", "sklearn")


def _optional_missing(err: str) -> bool:
    # the fresh interpreter's word is the one to take: in this one, tests/onnx would be found
    # as a namespace package named "onnx"
    last = err.strip().splitlines()[-1] if err.strip() else ""
    return any(last == f"ModuleNotFoundError: No module named '{name}'" for name in OPTIONAL)


# -- the static graph ---------------------------------------------------------------------------
def _module_level_imports(tree: ast.Module) -> list[ast.stmt]:
    """The import statements that run when the module is imported: everything outside function
    bodies (classes, ifs and trys included) but ``if TYPE_CHECKING:`` blocks."""
    found = []

    def walk(nodes):
        for node in nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                walk(node.orelse)
            else:
                walk(ast.iter_child_nodes(node))

    walk(tree.body)
    return found


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _targets(name: str, is_package: bool, node: ast.stmt, known) -> set[str]:
    """The modules of mgegraph an import statement makes Python run (``_run_by`` of the names
    it imports): the named module, its packages unless they enclose the importer, and for
    ``from X import y`` the submodule X.y, or X itself when y is a name defined there."""
    return set(_run_by(name, _statement_names(name, is_package, node))) & set(known)


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of mgegraph its module-level imports run."""
    known = modules()
    graph = {}
    for name, (path, is_package) in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges = set()
        for node in _module_level_imports(tree):
            edges |= _targets(name, is_package, node, known)
        graph[name] = edges - {name}
    return graph


def _cycle(graph: dict[str, set[str]], start: str) -> str | None:
    """A cycle through ``start`` as "a -> b -> a", or None: a depth-first search, which never
    enters a module twice (one that did not lead back to ``start`` never will)."""
    path, seen = [start], {start}

    def visit(node):
        for nxt in sorted(graph[node]):
            if nxt == start:
                return path + [start]
            if nxt not in seen:
                seen.add(nxt)
                path.append(nxt)
                found = visit(nxt)
                if found:
                    return found
                path.pop()
        return None

    found = visit(start)
    return None if found is None else " -> ".join(found)


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Cycles as "a -> b -> a", one through each module (in name order) that no cycle listed
    before passes through."""
    found, covered = [], set()
    for name in sorted(graph):
        if name in covered:
            continue
        cycle = _cycle(graph, name)
        if cycle:
            found.append(cycle)
            covered.update(cycle.split(" -> "))
    return found


def test_the_graph_reads_relative_imports_and_the_packages_they_run():
    graph = import_graph()
    assert "mgegraph.planner.memory.arena" in graph["mgegraph.planner.memory.plan"]
    assert "mgegraph.planner" not in graph["mgegraph.planner.memory.plan"]  # its own package
    assert "mgegraph.planner.passes.rewrite" in graph["mgegraph.planner.remat.remat"]
    assert "mgegraph.planner.passes" in graph["mgegraph.planner.remat.remat"]
    assert "mgegraph.ir.printer" in graph["mgegraph.planner.memory.report"]


def test_only_imports_that_run_on_import_count():
    tree = ast.parse("""\
import a
try:
    from . import b
except ImportError:
    b = None
if TYPE_CHECKING:
    import c
class K:
    import d
def f():
    import e
""")
    names = [n.names[0].name for n in _module_level_imports(tree)]
    assert names == ["a", "b", "d"]


def test_a_cycle_is_found_and_printed():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a -> b -> c -> a"]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_has_no_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(found)


# -- the layer order ----------------------------------------------------------------------------
# Lowest first, as in mgegraph/README.md: a module may import from its own layer and the ones
# below. A module's layer is that of the longest name listed that is it or one of its packages;
# every module of the package must be named by one (the bare "mgegraph", the facade that may
# load anything, is the top layer's).
LAYERS = (
    ("the IR", ("ir", "host_memory", "disk_cache", "weight_writes", "config", "dtype",
                "communicator")),
    ("ops", ("ops", "functional")),
    ("autodiff", ("autodiff",)),
    ("the planner", ("planner",)),
    ("lowering and the plan", ("lowering", "plan", "backend", "compiler", "kernel_abi",
                               "symbolic_plan", "tuning", "kernels_report")),
    ("backends", ("_kernels", "cuda", "device")),
    ("eager, nn, optim", ("eager", "jit", "nn", "module", "optim", "optimizer", "train",
                          "amp", "autodiff.grad_manager", "random", "tensor", "quantization",
                          "distributed")),
    ("io, onnx, tools", ("io", "runtime", "onnx", "tools", "viz", "testing", "deploy")),
    ("the CLI", ("cli", "demo", "__main__")),
)

# The imports allowed to go up a layer, each a deliberate load of a part above at run time,
# never at import: (importer, imported module) -> why. The circle check leaves these edges out
# (what they load is never needed while the importer itself loads).
UPWARD = {
    ("mgegraph.autodiff", "mgegraph.autodiff.grad_manager"):
        "MegEngine's name mgegraph.autodiff.GradManager for eager mode's, loaded on first use",
    ("mgegraph.autodiff", "mgegraph.eager.function"):
        "MegEngine's name mgegraph.autodiff.Function for eager mode's, loaded on first use",
    ("mgegraph.functional", "mgegraph.distributed.functional"):
        "MegEngine's name F.distributed for the eager collectives, loaded on first use",
    ("mgegraph.eager.trace", "mgegraph.tools.profiler"):
        "trace(profiling=True) (MegEngine's option) profiles each run, loaded on first use",
    ("mgegraph.eager.trace_dump", "mgegraph.io"):
        "trace.dump (MegEngine's place for it) writes the model file, loaded on first dump",
}

# An import inside a function says why on its first line: ``# lazy: <reason>`` (an optional
# dependency, a startup cost), never to dodge a circle. The standard library is exempt.
LAZY_REASON = re.compile(r"#\s*lazy:\s*(\S.*)$")


def layer_of(name: str) -> int | None:
    """The index in LAYERS of module ``name`` (the facade "mgegraph": the top), or None when
    no entry names it or one of its packages."""
    if name == "mgegraph":
        return len(LAYERS) - 1
    best, found = -1, None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            full = f"mgegraph.{entry}"
            if (name == full or name.startswith(full + ".")) and len(full) > best:
                best, found = len(full), index
    return found


@dataclass(frozen=True)
class Import:
    """One import in module ``module`` at ``line``: an import statement, an ``import_module``
    call or a module named by a string (a plug-in registry's "mgegraph.x:factory"). Imports
    under ``if TYPE_CHECKING:`` never run and are not read."""

    module: str
    line: int
    targets: frozenset[str]  # the modules of mgegraph it makes Python run
    names: tuple[str, ...]   # the modules it names, as written (absolute)
    local: bool              # inside a function body: runs when the function is called
    statement: bool          # an import statement or an import_module call, not a name string


def _known() -> set[str]:
    return set(modules()) | compiled_modules()


def _run_by(importer: str, named: set[str]) -> frozenset[str]:
    """Modules of mgegraph that importing ``named`` runs: each (or the nearest known module
    holding it), and its packages' __init__ unless they enclose the importer.

    Design: importing a submodule runs its packages first, so an import of ``a.b.c`` counts as
    one of ``a.b`` and ``a`` too; but a package enclosing the importer is already running when
    the importer runs (Python starts a package's __init__ before any of its submodules), so an
    import of it or through it adds no edge: otherwise every ``from . import x`` inside a
    package whose __init__ imports its submodules would read as a circle that Python never
    meets."""
    known, running = _known(), set(_ancestors(importer)) | {importer}
    out = set()
    for name in named:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)
            out.update(p for p in _ancestors(name) if p in known)
    return frozenset(out - running)


def _statement_names(name: str, is_package: bool, node) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    base = name if is_package else name.rpartition(".")[0]
    if node.level:
        base = ".".join(base.split(".")[:len(base.split(".")) - node.level + 1])
        source = f"{base}.{node.module}" if node.module else base
    else:
        source = node.module
    subs = {f"{source}.{a.name}" for a in node.names} & _known()
    return subs | ({source} if len(subs) < len(node.names) else set())


def _dynamic_name(name: str, is_package: bool, arg, loops) -> set[str]:
    """The modules an ``import_module`` argument can name: a string, or an f-string whose
    ``__name__``/``__package__`` are this module's, whose names bound by a loop over literal
    strings (``loops``) take each of those, and whose other parts may be anything (then every
    module that starts with the text before them)."""
    package = name if is_package else name.rpartition(".")[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}
    if not isinstance(arg, ast.JoinedStr):
        return set()
    texts = [""]
    for part in arg.values:
        value = getattr(part, "value", None)
        if isinstance(part, ast.Constant):
            choices = [part.value]
        elif isinstance(value, ast.Name) and value.id in ("__name__", "__package__"):
            choices = [name if value.id == "__name__" else package]
        elif isinstance(value, ast.Name) and value.id in loops:
            choices = loops[value.id]
        else:
            return {m for m in _known() for t in texts if m.startswith(t)}
        texts = [t + c for t in texts for c in choices]
    return set(texts)


def _loop_strings(tree) -> dict[str, list[str]]:
    """Names bound by ``for name in ("a", "b")`` anywhere in ``tree``: name -> the strings."""
    found = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.For) and isinstance(node.target, ast.Name)
                and isinstance(node.iter, (ast.Tuple, ast.List))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str)
                        for e in node.iter.elts)):
            found.setdefault(node.target.id, []).extend(e.value for e in node.iter.elts)
    return found


def _looks_up_sys_modules(node) -> bool:
    """``sys.modules.get(...)`` or ``sys.modules[...]``."""
    target = node.func if isinstance(node, ast.Call) else getattr(node, "value", None)
    if isinstance(node, ast.Call) and getattr(target, "attr", None) == "get":
        target = target.value
    elif not isinstance(node, ast.Subscript):
        return False
    return getattr(target, "attr", None) == "modules"


_MODULE_STRING = re.compile(r"mgegraph(\.\w+)*(:\w+)?")


def _imports_in(name: str, path: Path, is_package: bool) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loops, found, dynamic = _loop_strings(tree), [], set()

    def add(node, names, local, statement):
        absolute = tuple(sorted(n for n in names if n))
        found.append(Import(name, node.lineno, _run_by(name, set(absolute)), absolute, local,
                            statement))

    def visit(node, local):
        if _looks_up_sys_modules(node):  # whether a module is loaded: no import
            dynamic.update(id(n) for n in ast.walk(node))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            add(node, _statement_names(name, is_package, node), local, True)
        elif isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "import_module"
                                             or getattr(node.func, "id", None) == "import_module"):
            if node.args:
                dynamic.add(id(node.args[0]))
                add(node, _dynamic_name(name, is_package, node.args[0], loops), local, True)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in dynamic
              and _MODULE_STRING.fullmatch(node.value)
              and node.value.partition(":")[0] in _known()):
            add(node, {node.value.partition(":")[0]}, local, False)
        inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            if not (isinstance(node, ast.If) and child in node.body
                    and "TYPE_CHECKING" in ast.unparse(node.test)):
                visit(child, inner)

    visit(tree, False)
    return found


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Every import of every module of mgegraph, in name and line order."""
    return tuple(imp for name, (path, is_package) in sorted(modules().items())
                 for imp in _imports_in(name, path, is_package))


def _where(imp: Import) -> str:
    path, _ = modules()[imp.module]
    return f"{path.relative_to(ROOT)}:{imp.line}"


def _listed(imp: Import, target: str) -> bool:
    """Whether UPWARD allows ``imp`` to run ``target``: it lists the import of ``target`` or of
    a module inside it (the import runs that module's packages too)."""
    return any((imp.module, t) in UPWARD and (t == target or t.startswith(target + "."))
               for t in imp.targets)


def upward_imports() -> list[str]:
    """Imports into a higher layer that UPWARD does not list, as "file:line: a (its layer)
    imports b (b's layer)", naming the innermost module of each (not its packages)."""
    found = []
    for imp in all_imports():
        mine = layer_of(imp.module)
        above = {t for t in imp.targets if layer_of(t) > mine and not _listed(imp, t)}
        for target in sorted(t for t in above if not any(u.startswith(t + ".") for u in above)):
            found.append(f"{_where(imp)}: {imp.module} ({LAYERS[mine][0]}) imports {target} "
                         f"({LAYERS[layer_of(target)][0]})")
    return found


def full_graph() -> dict[str, dict[str, int]]:
    """Module -> {module of mgegraph it imports anywhere: the first line doing so}, but the
    upward imports UPWARD lists."""
    graph = {name: {} for name in _known()}
    for imp in all_imports():
        for target in imp.targets:
            if target != imp.module and not _listed(imp, target):
                graph[imp.module].setdefault(target, imp.line)
    return graph


def strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The groups of two or more modules that all reach each other (Tarjan), sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                groups.append(sorted(group))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph)))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(groups)


def _shortest_circle(graph, group: list[str]) -> list[str]:
    """A shortest circle through the group's first module, by breadth-first search."""
    start, members = group[0], set(group)
    came = {start: None}
    queue = [start]
    for v in queue:
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return path[::-1] + [start]
            if w in members and w not in came:
                came[w] = v
                queue.append(w)
    raise AssertionError(f"{start} is in no circle")


def circles(graph: dict[str, dict[str, int]]) -> list[str]:
    """Each group of modules that import each other round: its size, its modules and one of its
    shortest circles as "a (line 3) -> b (line 9) -> a", the line importing the next."""
    found = []
    for group in strongly_connected(graph):
        names = _shortest_circle(graph, group)
        circle = " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(names, names[1:]))
        found.append(f"{len(group)} modules: {', '.join(group)}\n  e.g. {circle} -> {names[-1]}")
    return found


def _third_party(names) -> bool:
    return any(n.partition(".")[0] not in sys.stdlib_module_names for n in names)


def unexplained_lazy_imports() -> list[str]:
    """Function-local imports of mgegraph or of a package outside the standard library whose
    first line gives no reason, or a reason that is a circle, as "file:line: the line"."""
    found = []
    for imp in all_imports():
        if not (imp.local and imp.statement and _third_party(imp.names)):
            continue
        path, _ = modules()[imp.module]
        text = path.read_text(encoding="utf-8").splitlines()[imp.line - 1]
        reason = LAZY_REASON.search(text)
        if reason is None or re.search(r"circ|cycl", reason.group(1), re.IGNORECASE):
            found.append(f"{_where(imp)}: {text.strip()}")
    return found


def lazy_import_counts() -> tuple[int, int]:
    """(function-local imports, those of mgegraph): the figures the layer work is judged by."""
    local = [imp for imp in all_imports() if imp.local and imp.statement]
    return len(local), sum(any(n.startswith("mgegraph") for n in imp.names) for imp in local)


def test_the_layer_rules_read_every_kind_of_import(tmp_path, monkeypatch):
    path = tmp_path / "m.py"
    path.write_text("""\
import importlib
from . import b
def f():
    from .c import d  # lazy: startup cost
    importlib.import_module(f"{__package__}.e")
    return {"x": "mgegraph.g:factory", "y": "mgegraph.g is not a module name",
            "z": sys.modules.get("mgegraph.g")}
if TYPE_CHECKING:
    from . import e
""")
    fake = {name: (path, name == "mgegraph.p") for name in
            ("mgegraph.p", "mgegraph.p.m", "mgegraph.p.b", "mgegraph.p.c", "mgegraph.p.e",
             "mgegraph.g")}
    monkeypatch.setattr(sys.modules[__name__], "modules", lambda: fake)
    found = {(i.line, i.local, i.statement): i.targets
             for i in _imports_in("mgegraph.p.m", path, False)}
    assert found == {(1, False, True): frozenset(), (2, False, True): {"mgegraph.p.b"},
                     (4, True, True): {"mgegraph.p.c"}, (5, True, True): {"mgegraph.p.e"},
                     (6, True, False): {"mgegraph.g"}}


def test_a_circle_is_printed_with_its_lines():
    graph = {"a": {"b": 3}, "b": {"c": 7, "a": 8}, "c": {"a": 2}, "d": {"a": 1}}
    assert circles(graph) == ["3 modules: a, b, c\n  e.g. a (line 3) -> b (line 8) -> a"]
    assert circles({"a": {"b": 1}, "b": {}}) == []


def test_every_module_has_a_layer():
    missing = sorted(name for name in _known() if name != "mgegraph" and
                     not any(name == f"mgegraph.{e}" or name.startswith(f"mgegraph.{e}.")
                             for _, entries in LAYERS for e in entries))
    assert not missing, "modules without a layer (add them to LAYERS and mgegraph/README.md):\n" \
        + "\n".join(missing)


def test_the_readme_table_is_this_order():
    # one row per layer, lowest first: "| 1 | the IR | `ir/`, `host_memory.py`, ... |"
    text = (PACKAGE / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| *(\d+) *\| *([^|]+?) *\| *([^|]+?) *\|$", text, re.MULTILINE)
    # (a module inside a package: `pkg/mod.py` in the table, "pkg.mod" in LAYERS)
    table = [(name, tuple(re.sub(r"(/|\.py)$", "", p).replace("/", ".")
                          for p in re.findall(r"`([^`]+)`", parts)))
             for _, name, parts in rows]
    assert table == [(name, entries) for name, entries in LAYERS]


def test_no_import_goes_up_a_layer():
    found = upward_imports()
    assert not found, "imports into a higher layer (move one, or list it in UPWARD with why):\n" \
        + "\n".join(found)


def test_the_upward_list_is_current():
    used = {(imp.module, t) for imp in all_imports() for t in imp.targets}
    stale = sorted(set(UPWARD) - used)
    assert not stale, f"UPWARD lists imports that no longer exist: {stale}"
    assert all(reason.strip() for reason in UPWARD.values())
    # a listed import runs when called or named, never while its module loads
    eager = [f"{_where(imp)}: {t}" for imp in all_imports() for t in imp.targets
             if (imp.module, t) in UPWARD and imp.statement and not imp.local]
    assert not eager, "UPWARD imports at module level:\n" + "\n".join(eager)


def test_no_circle_among_all_imports():
    found = circles(full_graph())
    assert not found, "import circles (imports inside functions and by name included):\n" \
        + "\n".join(found)


def test_every_import_inside_a_function_says_why():
    found = unexplained_lazy_imports()
    assert not found, "imports inside functions without '# lazy: <reason>' on their line:\n" \
        + "\n".join(found)


def test_lower_layers_reach_higher_ones_only_through_their_hooks():
    # F.nn's losses live with the op functions (no nn); the IR loads eager mode through the
    # facade's loader on the first fill without a graph; the backward ops' own gradients find
    # the walker that autodiff installs
    done = _python("""\
import sys
import numpy as np
import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.registry import walker_grad
from mgegraph.weight_writes import written
from mgegraph.planner.passes import prologue
assert prologue.written is written
assert F.nn.mse_loss is F.nn.square_loss and "mgegraph.nn" not in sys.modules
assert "mgegraph.eager.dispatch" not in sys.modules
assert type(F.zeros((2,))).__name__ == "Tensor" and "mgegraph.eager.dispatch" in sys.modules
try:
    walker_grad(None, [])
except mg.GraphError as e:
    assert "mgegraph.autodiff" in str(e), e
else:
    raise AssertionError("walker_grad ran without the walker")
g = mg.Graph()
x = g.param("x", np.ones((2, 3), np.float32))
label = g.const(np.array([0, 2]))
(dx,) = mg.grad(F.cross_entropy(x, label), [x])
(ddx,) = mg.grad(F.sum(dx * dx), [x])   # through cross_entropy_backward's own gradient
assert ddx.shape == (2, 3) and mg.nn.mse_loss is F.nn.mse_loss
print("ok")
""")
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
