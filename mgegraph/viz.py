"""``mg.viz``: see inside a plan. ``save_html`` writes one self-contained page (the graph, the
arena over time, the instructions, the memory, passes and remat reports, the profile);
``to_svg`` draws the graph alone.

Both take a Plan, a Graph, a model file's path (``mg.save``), or anything that carries a plan:
a training step (``mg.compile_train_step``), a predictor (``mg.compile_module``,
``mg.load``) or a traced function (``mg.jit.trace``, its latest plan).

>>> mg.viz.save_html(step, "step.html")
>>> svg = mg.viz.to_svg(plan)
"""
from __future__ import annotations

import os
import shutil
import subprocess

from .io import load
from .ir.errors import GraphError
from .ir.graph import Graph
from .plan import Plan
from .tools.html import graph_page, plan_page, write_page
from .tools.svg import drawing_svg

ENGINES = ("python", "dot")


def _plan_or_graph(obj):
    """The Plan or Graph that ``obj`` is or carries, or a GraphError naming what it got."""
    if isinstance(obj, (Plan, Graph)):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        return _from_file(os.fspath(obj))
    try:
        found = obj.plan  # a traced function that never ran raises its own GraphError here
    except AttributeError:
        found = None
    if isinstance(found, Plan):
        return found
    raise GraphError(f"mg.viz takes a Plan, a Graph, a model file path or an object with a "
                     f".plan (a training step, a predictor, a traced function), not "
                     f"{type(obj).__name__}")


def _from_file(path: str) -> Plan:
    if not os.path.isfile(path):
        raise GraphError(f"mg.viz: no model file at {path!r}")
    loaded = load(path)
    if isinstance(loaded, dict):
        raise GraphError(f"mg.viz: {path!r} holds a state dict (weights only), not a model; "
                         "there is no graph to draw")
    return loaded.plan


def _times(plan: Plan, profile):
    """Seconds per instruction: the profiler's (``profile.instruction_times(plan)``), else
    what a profiled run left on the plan, else None."""
    times = profile.instruction_times(plan) if profile is not None else None
    if times is None:
        times = plan._cache.get("instruction_times")
    if times is not None and len(times) != len(plan.instructions):
        raise GraphError(f"profile times: {len(times)} for a plan of "
                         f"{len(plan.instructions)} instructions")
    return None if times is None else tuple(float(t) for t in times)


def html(obj, profile=None, title: str | None = None) -> str:
    """The page ``save_html`` writes, as a string.

    >>> text = mg.viz.html(plan)
    """
    target = _plan_or_graph(obj)
    if isinstance(target, Graph):
        if profile is not None:
            raise GraphError("mg.viz: a Graph has no instructions to time; pass the plan "
                             "compiled from it with profile=")
        return graph_page(target, title)
    return plan_page(target, _times(target, profile), title)


def save_html(obj, path, profile=None, title: str | None = None) -> None:
    """Write one self-contained HTML page of ``obj`` to ``path`` (no network needed to open
    it). ``profile``: a profiler whose ``instruction_times(plan)`` gives seconds per
    instruction (a plan run under ``mg.profile()`` carries them itself).

    >>> mg.viz.save_html(step, "step.html")
    """
    write_page(path, html(obj, profile, title))


def to_svg(obj, engine: str = "python") -> str:
    """The graph of ``obj`` as SVG text: our own layered layout (``engine="python"``, groups
    closed as the page opens them), or Graphviz's ``dot`` when it is installed
    (``engine="dot"``).

    >>> open("plan.svg", "w").write(mg.viz.to_svg(plan))
    """
    if engine not in ENGINES:
        raise GraphError(f"to_svg engine {engine!r} is not one of {ENGINES}")
    target = _plan_or_graph(obj)
    if engine == "dot":
        return _dot_svg(target.to_dot())
    return drawing_svg(target)


def _dot_svg(dot: str) -> str:
    exe = shutil.which("dot")
    if exe is None:
        raise GraphError("to_svg(engine='dot') needs Graphviz's dot on PATH (apt install "
                         "graphviz); engine='python' needs nothing")
    done = subprocess.run([exe, "-Tsvg"], input=dot, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise GraphError(f"dot failed: {done.stderr.strip()[:500]}")
    return done.stdout
