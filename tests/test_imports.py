"""The import graph: every module of mgegraph imports alone, in an interpreter of its own, and
the static graph of module-level imports has no cycle (the cycle is printed if it has one)."""
from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
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
    """The modules of mgegraph an import statement makes Python run: the named module, its
    packages (their __init__) unless they enclose the importer (already running by then), and
    for ``from X import y`` the submodule X.y, or X itself when y is a name defined there."""
    if isinstance(node, ast.Import):
        named = {a.name for a in node.names}
    else:
        base = name if is_package else name.rpartition(".")[0]
        if node.level:
            base = ".".join(base.split(".")[:len(base.split(".")) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module
        subs = {f"{source}.{a.name}" for a in node.names} & (set(known) | compiled_modules())
        named = subs | ({source} if len(subs) < len(node.names) else set())
    running = set(_ancestors(name)) | {name}
    out = named & set(known)
    for target in list(out):
        out.update(p for p in _ancestors(target) if p in known and p not in running)
    return out


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
