"""The graph optimisation pipeline: one ordered list of passes, and the runner that applies them.

Design: the runner is the only place that knows about levels, checking and dumps; every pass
is a pure ``(graph, outputs) -> PassResult`` and knows nothing of the others. In check mode
the IR is verified after each pass (``verify.verify_graph``), and any error (from the pass or
the check) names the pass.
"""
from __future__ import annotations

from typing import Callable

from ...ir.errors import GraphError
from ...ir.graph import Graph, Var
from .accumulate import accumulate
from .bnfold import bnfold
from .bucket_grads import bucket_grads
from .cse import cse
from .dce import dce
from .epilogue import epilogue
from .fold import fold
from .fuse import fuse
from .prepack import prepack
from .qdq import fold_qdq
from .rewrite import PassResult
from .simplify import simplify
from .verify import verify_graph

# (name, pass, why it runs here). Order matters: folding exposes constants that simplify
# recognises, and simplify and fold leave dead nodes that the last DCE removes.
PASSES: list[tuple[str, Callable[[Graph, list[Var]], PassResult], str]] = [
    ("dce", dce, "drop what the outputs, assigns and inputs do not need, so later passes "
                 "do less work"),
    ("cse", cse, "merge equal nodes (autodiff repeats forward values), so fold and simplify "
                 "see each value once"),
    ("fold_qdq", fold_qdq, "a float op between dequantizes and a quantize becomes its int8 op, "
                           "before fold turns the dequantized weights into float constants"),
    ("fold", fold, "evaluate nodes of constants once, at compile time"),
    ("simplify", simplify, "algebraic identities (x*1, neg(neg x), transpose of transpose) "
                           "on the folded constants"),
    ("bnfold", bnfold, "inference batch norm after a conv becomes the conv's weight and bias, "
                       "before epilogue fusion looks at what follows the conv"),
    ("bucket_grads", bucket_grads, "gradients' all-reduces in buckets started as soon as each "
                                   "is written: after fold and simplify, which could make a "
                                   "gradient a constant or a view, before epilogue, accumulate "
                                   "or fuse could merge a gradient's node with a reader"),
    ("epilogue", epilogue, "bias add and relu after linear/conv2d run inside the GEMM "
                           "kernel, before elementwise fusion could claim them"),
    ("prepack", prepack, "a conv2d of weights alone reads them in its kernel's layout, packed "
                         "once by the prologue or here, after epilogue fusion settled its "
                         "attributes"),
    ("accumulate", accumulate, "a matmul added into a matrix (SGD's w - lr * dw) adds its "
                               "product in place, before fuse could claim the add"),
    ("fuse", fuse, "the remaining elementwise groups become one fused kernel each (split where "
                   "one would not fit the backend's fused kernel)"),
    ("dce_final", dce, "remove the nodes that the passes above left unused"),
]

# Level 2 differs from level 1 in rounding only: accumulate's rewrites may round otherwise than
# the ops they replace. At level 1, where eager, traced, lazy and compiled steps give bitwise
# the same weights, it makes only those the target vouches for (``exact``); level 2, or the
# pass named in a list, makes them all (as -ffast-math).
LEVELS = {0: [], 1: [name for name, _, _ in PASSES], 2: [name for name, _, _ in PASSES]}


class PassError(GraphError):
    """A pass failed or left an invalid graph; ``pass_name`` says which."""

    def __init__(self, pass_name: str, reason: str):
        self.pass_name = pass_name
        super().__init__(f"optimisation pass {pass_name!r}: {reason}")


def _select(passes_or_level) -> list[tuple[str, Callable, str]]:
    by_name = {name: (name, fn, why) for name, fn, why in PASSES}
    if isinstance(passes_or_level, int) and not isinstance(passes_or_level, bool):
        if passes_or_level not in LEVELS:
            raise GraphError(f"compile: unknown optimisation level {passes_or_level}; levels: "
                             f"{sorted(LEVELS)}")
        return [by_name[n] for n in LEVELS[passes_or_level]]
    names = list(passes_or_level)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise ValueError(f"unknown pass(es) {unknown}; available: {', '.join(by_name)}")
    return [by_name[n] for n in names]


def optimize(graph: Graph, outputs, passes_or_level=1, check: bool = False, dump=None,
             evaluate=None, fusion=None, prepack=None, runs=None, exact=None):
    """Run the pipeline (a level of ``LEVELS`` or a list of pass names) on the graph computing
    ``outputs``; returns (new graph, outputs mapped into it, report: [(pass name, stats)]).

    ``check`` verifies the IR after each pass; ``dump(pass name, graph)`` is called after each.
    What the target device contributes: ``evaluate(outputs) -> arrays`` computes the values
    constant folding folds, and ``fusion`` (the backend's ``FusionLimits``) bounds the groups
    fuse makes; without one, its pass is skipped (a device with no fused kernel gets no
    fused nodes) and the report says so. ``prepack(conv2d node)`` gives the block of output
    channels the backend packs a convolution's weights in, or None; without it the prepack
    pass is skipped likewise. ``runs(op name)`` says whether the backend has a kernel for an
    op (accumulate makes addmm only where it does, fold_qdq an int8 op likewise);
    ``exact(matmul node)`` whether its addmm
    of that product rounds as the ops it replaces (the only ones level 1 makes; none without
    it).

    >>> g2, outs, report = optimize(g, [y], check=True); print(passes_report(report))
    """
    outputs = [outputs] if isinstance(outputs, Var) else list(outputs)
    if check:
        _run_checked("(input)", lambda: verify_graph(graph))
    report = []
    keeps_rounding = isinstance(passes_or_level, int) and passes_or_level == 1  # (LEVELS)
    target = {"fold": {"evaluate": evaluate}, "fuse": {"limits": fusion},
              "prepack": {"block_of": prepack},
              "accumulate": {"runs": runs, "exact": (exact or _none) if keeps_rounding else None}}
    target["fold_qdq"] = {"runs": runs}  # an int8 op only where the target has its kernel
    needs = {"fold": (evaluate, "evaluator"), "fuse": (fusion, "fused kernel"),
             "prepack": (prepack, "packed weight layout"), "accumulate": (runs, "op table")}
    for name, fn, _ in _select(passes_or_level):
        if name in needs and needs[name][0] is None:
            report.append((name, {"skipped": "the target gives no " + needs[name][1]}))
            continue
        res = _run_checked(name, lambda: fn(graph, outputs, **target.get(name, {})))
        if check:
            _run_checked(name, lambda: verify_graph(res.graph))
        graph, outputs = res.graph, res.outputs
        report.append((name, res.stats))
        if dump is not None:
            dump(name, graph)
    return graph, outputs, report


def _none(node) -> bool:  # a target that vouches for no rewrite's rounding
    return False


def _run_checked(name: str, thunk):
    try:
        return thunk()
    except PassError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure inside a pass is reported with its name
        raise PassError(name, f"{type(exc).__name__}: {exc}") from exc


def passes_report(report) -> str:
    """One line per pass: its name and what it changed.

    >>> print(passes_report(optimize(g, [y])[2]))
    """
    lines = []
    for name, stats in report:
        lines.append(f"{name:<12} {_describe(stats)}")
    return "\n".join(lines)


def _describe(stats: dict) -> str:
    parts = []
    for key, value in stats.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
            parts.append(f"{key}: {inner or 'none'}")
        else:
            parts.append(f"{key.replace('_', ' ')} {value}")
    return ", ".join(parts) or "nothing"
