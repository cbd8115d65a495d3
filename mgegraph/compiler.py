"""``mg.compile``: the driver of the pipeline from a graph to a plan.

graph -> graph passes (planner.pipeline) -> rematerialisation (planner.remat*) -> lowering
through the device's backend (lowering.py) -> memory-aware schedule and arena offsets
(planner.memory) -> a frozen Plan (plan.py), which the backend's executable runs. The caller's
graph is never changed.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .backend import check_backend, get_backend
from .ir.dims import names as dim_names
from .ir.errors import GraphError
from .ir.graph import Graph, Var
from .lowering import Lowered, lower, view_root
from .ops.builder import apply
from .ops.quantized_pack import check_packed_consts
from .plan import Plan, PlanSource
from .planner.memory.plan import memory_options, place, schedule
from .planner.memory.verify import checks_enabled, verify_plan
from .planner.passes.dce import dce
from .planner.passes.fold import fold
from .planner.passes.half import backend_runs_half, widen_half
from .planner.passes.pipeline import optimize as optimize_graph
from .planner.passes.prepack import prepack
from .planner.passes.prologue import PLACEHOLDER, structure_key, weight_arrays
from .planner.passes.prologue import split as split_prologue
from .planner.passes.rewrite import rebuild
from .planner.remat.remat import graph_flops, remat_options, split
from .planner.remat.remat_report import RematReport
from .planner.remat.remat_search import Judge, candidates, choose
from .symbolic_plan import DEFAULT_CACHE_SIZE, SymbolicPlan
from .tuning import Tuner, check_mode


def compile(outputs, device: str = "cpu", memory=None, optimize=1, remat=None,
            check_numerics: bool = False, freeze: bool = False, *,
            cache_size: int = DEFAULT_CACHE_SIZE, warm=(), bounds=None, tune=None,
            _prologues: dict | None = None) -> Plan | SymbolicPlan:
    """Compile the graph that computes ``outputs`` into a Plan for ``device`` (one of
    ``mg.devices()``).

    ``memory`` chooses how temporaries share the arena: None (the default plan), a preset
    ("default", "debug" poisons dead buffers, "no_reuse"), an arena strategy name, or a
    ``mg.planner.MemoryOptions``. ``optimize`` is a level (0: no pass; 1: every pass that
    keeps a training step bitwise as eager mode computes it; 2: every pass, ``accumulate`` too,
    which adds SGD's update inside the weight-gradient GEMM with the BLAS's rounding) or a
    list of pass names of ``mg.planner.pipeline.PASSES``; ``plan.passes_report()`` says what
    each did. ``remat`` trades compute for memory in a training graph (the first output is the
    loss): None (off), "sqrt", "auto", a byte budget for the arena, or a
    ``mg.planner.RematOptions``; ``plan.remat_report()`` says what it kept and recomputed.
    ``check_numerics=True`` makes every run check each instruction's float outputs and raise
    ``mg.NumericsError`` at the first NaN or infinity, naming the instruction, its op and the
    user's line (slower: the instructions run one by one; off, runs cost nothing more).

    ``freeze=True`` (inference): every param no assign of the graph writes becomes a constant
    of the plan holding its value now, so folding, batch-norm folding and the epilogue work on
    the weights once, here; later changes of the weights are not seen, and the plan shares no
    weight. Without it, an optimised plan (``optimize`` not 0) on a backend that can moves the
    instructions that read only weights into ``plan.prologue``, run again only after one of
    those weights was written (``mgegraph.planner.passes.prologue`` lists the writers seen).

    A graph whose inputs name a dimension (``g.input("x", ("batch", 784))``) compiles to a
    ``SymbolicPlan``: each new binding of the names a run's feeds give is specialised then
    (a fixed-shape plan with all of the above) and kept in a cache of ``cache_size`` plans,
    least recently used out; ``warm=[{"batch": 1}, {"batch": 32}]`` specialises ahead of time
    and ``bounds={"batch": (1, 256)}`` refuses other values (a ``FeedError``). (``_prologues``
    is the symbolic plan's own: the store through which its specialisations share one
    prologue, its compiled plan and its arrays.)

    ``tune`` chooses among the ways a kernel can run an instruction (a convolution's paths,
    a GEMM's, their threads; MegEngine's fast-run, ``mgegraph.tuning``): None (the default)
    takes the choices stored for this machine and the backend's rules for the rest,
    "measure" times every way on the instruction's shapes now and stores the fastest,
    "cached" measures only what is not stored, "rules" ignores the store, "deterministic"
    takes the ways on the package's own kernels (no BLAS where another way exists: the same bits
    on any thread count and in the plan's C export, ``mg.deploy.export_c``).
    ``plan.kernels_report()`` says which way each instruction took and why.

    >>> plan = compile([y]); (out,) = plan.run({"x": x_value})
    """
    options = memory_options(memory)
    remat_given, remat = remat, remat_options(remat)
    outputs = [outputs] if isinstance(outputs, Var) else list(outputs)
    if not outputs or not all(isinstance(v, Var) for v in outputs):
        raise GraphError("compile() takes a non-empty list of Vars")
    outputs_given = outputs
    graph = outputs[0].graph
    if any(v.graph is not graph for v in outputs):
        raise GraphError("all outputs of compile() must belong to one graph")
    if getattr(graph, "eager", False):  # an eager Tensor's graph keeps no node to compile
        raise GraphError(f"compile() takes Vars of a Graph, got an eager Tensor {outputs[0]!r:.80} "
                         "(it holds a value, not the ops that made it): build the graph with "
                         "g = mg.Graph() and g.input(...), or trace the eager function with "
                         "mg.jit.trace")
    backend = get_backend(device)
    check_backend(backend)
    check_mode(tune)
    _check_names_bound(graph)
    check_packed_consts(graph)
    if graph.symbolic:
        given = {"device": device, "memory": memory, "optimize": optimize, "remat": remat_given,
                 "check_numerics": check_numerics, "freeze": freeze}
        return _symbolic_plan(graph, outputs, given, cache_size, warm, bounds, tune)
    if warm or bounds:
        raise GraphError("compile(): warm= and bounds= are for a graph whose inputs name a "
                         "dimension; this graph's shapes are all numbers")
    if options.alignment < backend.alignment:
        options = replace(options, alignment=backend.alignment)
    if freeze:
        graph, outputs = frozen(graph, outputs)
    tuner = Tuner(backend, tune)
    packing = tuner.packing()
    widened = widen_half(graph, outputs, runs=lambda node: backend_runs_half(backend, node))
    graph, outputs = widened.graph, widened.outputs
    graph, outputs, report = optimize_graph(graph, outputs, optimize, check=checks_enabled(),
                                            evaluate=evaluator(device),
                                            fusion=backend.fusion, prepack=packing,
                                            runs=lambda op: backend.impl(op) is not None,
                                            exact=backend.exact_accumulate)
    if freeze and report:
        graph, outputs, refold = _fold_weights(graph, outputs, device)
        report.append(("fold_weights", refold))
        if backend.prepack is not None and "prepack" in dict(report):
            # the weights folded just now are consts: the pass packs them itself
            repacked = prepack(graph, outputs, packing)
            graph, outputs = repacked.graph, repacked.outputs
            report.append(("prepack_folded", repacked.stats))
    graph, outputs = _before_updates(graph, outputs)
    prologue = None
    if report and backend.runs_prologue:
        graph, outputs, prologue = _prologue_plan(graph, outputs, device, memory,
                                                  check_numerics, report, _prologues, tune)
    if remat is None:
        plan = plan_of(lower(graph, outputs, backend, tuner=tuner), options)
    else:
        plan = _remat_plan(graph, outputs, backend, options, remat, tuner)
    tuner.save()
    source = PlanSource(snapshot(outputs_given[0].graph), tuple(outputs_given),
                        {"device": device, "memory": memory, "optimize": optimize,
                         "remat": remat_given, "check_numerics": bool(check_numerics),
                         "freeze": bool(freeze)})
    passes = ((("widen_half", widened.stats),) if widened.changed else ()) + tuple(report)
    return replace(plan, passes=passes, check_numerics=bool(check_numerics),
                   source=source, prologue=prologue)


def _check_names_bound(graph: Graph) -> None:
    """Every named size in the graph must be one its inputs' shapes bind: a reshape to
    ``("batch", 24)`` of an input without ``batch`` could never be given a number."""
    bound = graph.dim_names
    for node in graph.nodes:
        for v in node.outputs:
            if not v.type.symbolic:
                continue
            stray = sorted(frozenset().union(*map(dim_names, v.type.shape)) - bound)
            if stray:
                raise GraphError(f"{node.op.name} at {node.location} gives {v.type}, but no "
                                 f"input of the graph has {', '.join(stray)} as a dimension, "
                                 "so no feed can give it a value")


def _symbolic_plan(graph: Graph, outputs, options: dict, cache_size, warm, bounds, tune):
    """A SymbolicPlan over a snapshot of ``graph``: with ``freeze`` the weights become
    constants once, now, so every specialisation holds the same values."""
    source_graph = snapshot(graph)
    if options["freeze"]:
        source_graph, outputs = frozen(source_graph, outputs)

    prologues: dict = {}  # what reads only weights is the same at every binding: made once

    def compile_fixed(fixed_outputs):
        return compile(fixed_outputs, **options, tune=tune, _prologues=prologues)
    plan = SymbolicPlan(source_graph, outputs, compile_fixed, options, cache_size=cache_size,
                        warm=warm, bounds=bounds)
    # what a model file saves: the graph with the weights every specialisation uses
    plan.source = PlanSource(plan.graph, tuple(plan.outputs), options)
    return plan


def frozen(graph: Graph, outputs) -> tuple[Graph, list[Var]]:
    """``graph`` with every param no assign writes replaced by a const holding a copy of its
    value now (``compile(freeze=True)``)."""
    assigned = {node.inputs[0].id for node in graph.assigns}

    def to_const(builder, node):
        if node.op.name != "param" or node.outputs[0].id in assigned:
            return None
        return (builder.const(np.array(graph.values[node.outputs[0].id], copy=True),
                              node.location, quant=node.outputs[0].type.quant),)

    builder = rebuild(graph, to_const)
    return builder.graph, [builder.var(v) for v in outputs]


def _fold_weights(graph: Graph, outputs, device: str):
    """A frozen graph after the passes: what they made of the weights (bnfold's scaled
    weights, fused casts) is folded too, whatever its size, as long as it is no larger than
    the constants it is computed from; then the nodes left unused go."""
    res = fold(graph, outputs, evaluate=evaluator(device), weights=True)
    cleaned = dce(res.graph, res.outputs)
    return cleaned.graph, cleaned.outputs, {**res.stats, **cleaned.stats}


def _prologue_plan(graph: Graph, outputs, device, memory, check_numerics, report,
                   prologues: dict | None = None, tune=None):
    """Split the weight-only instructions off into a plan of their own (see
    ``planner.passes.prologue``); the report says how many moved. With ``prologues`` (a
    symbolic plan's store), an equal prologue made before is used again: the main graph reads
    its arrays, and its plan runs once for all the specialisations that share it."""
    main, main_outputs, pro = split_prologue(graph, outputs)
    if pro is None:
        report.append(("prologue", {"moved": 0}))
        return graph, outputs, None
    key = None if prologues is None else structure_key(pro)
    if key is not None and key in prologues:
        plan, targets, _ = prologues[key]
        for k, array in enumerate(targets):  # the main graph reads the shared arrays
            main.values[main.params[f"{PLACEHOLDER}{k}"].id] = array
    else:
        plan, targets = compile([pro.output], device=device, memory=memory, optimize=0,
                                check_numerics=check_numerics, tune=tune), pro.targets
        if key is not None:  # the arrays kept with the key: its ids stay theirs
            prologues[key] = (plan, targets, weight_arrays(pro))
    report.append(("prologue", {"moved": len(plan.instructions), "values": len(targets),
                                "bytes": sum(t.nbytes for t in targets)}))
    return main, main_outputs, plan


def snapshot(graph: Graph) -> Graph:
    """A copy of ``graph`` as it is now: the same Nodes and Vars, its own lists and maps (nodes
    the caller adds later are not in it)."""
    copy = Graph.__new__(Graph)
    copy.__dict__.update(graph.__dict__)
    copy.nodes, copy.assigns = list(graph.nodes), list(graph.assigns)
    copy.inputs, copy.params = dict(graph.inputs), dict(graph.params)
    copy.values, copy.shared = dict(graph.values), set(graph.shared)
    copy._bound = dict(graph._bound)
    copy.constraints = graph.constraints.copy()
    return copy


def evaluator(device: str):
    """How constant folding computes the values it folds: an unoptimised plan on the target
    device, so that a folded constant is bitwise what the device would have computed."""
    def evaluate(outputs) -> list:
        return compile(outputs, device=device, optimize=0).run({})
    return evaluate


def _remat_plan(graph: Graph, outputs, backend, options, remat, tuner) -> Plan:
    """Rematerialisation runs after the graph passes, so that CSE cannot merge the clones back
    into their originals and the clones are the same fused kernels (bitwise the same results);
    every candidate is judged by its own memory plan."""
    s = split(graph, outputs)
    launches: dict = {}
    judge = Judge(s, outputs,
                  lambda g, outs, clones: lower(g, outs, backend, clones, launches, tuner),
                  options)
    pool, base_flops = candidates(s), graph_flops(graph)

    def judged_plan(candidate):
        judged = judge(candidate)
        return plan_of(judged.lowered, options, judged.scheduled, judged.memory(options))

    chosen = choose(judge, pool, remat, base_flops)
    plan = judged_plan(chosen)
    return replace(plan, remat=RematReport(s, judge, pool, chosen, remat, base_flops,
                                           judged_plan))


def _before_updates(graph: Graph, outputs) -> tuple[Graph, list]:
    """Outputs that are a param an assign updates, or a view of one (``F.reshape(w)``, a
    contiguous slice, or ``w + 0`` that the passes reduced to ``w``), are copied, so they
    still give the value the run began with, not the updated one: the caller reads them
    after the run, when the assigns have written. The copies go into a rebuilt graph: the
    caller's (``optimize=0`` passes it through) stays as it was. Shared params whose arrays
    overlap, one of them assigned, are refused (an update of one would change the other
    during the run)."""
    _check_one_assign_each(graph)
    assigned = {node.inputs[0].id for node in graph.assigns}
    _check_shared_overlap(graph, assigned)
    if not any(view_root(v).id in assigned for v in outputs):
        return graph, outputs
    builder = rebuild(graph)
    outputs = [builder.var(v) for v in outputs]
    assigned = {node.inputs[0].id for node in builder.graph.assigns}
    return builder.graph, [apply("copy", (v,)) if view_root(v).id in assigned else v
                           for v in outputs]


def _check_one_assign_each(graph: Graph) -> None:
    """A GraphError for a param assigned twice: which write a run keeps would be an accident."""
    first: dict[int, object] = {}
    for node in graph.assigns:
        target = node.inputs[0]
        if target.id in first:
            raise GraphError(
                f"param {target.node.attr['name']!r} is assigned twice (at "
                f"{first[target.id].location} and at {node.location}); assign it once with "
                "the final value")
        first[target.id] = node


def _check_shared_overlap(graph: Graph, assigned: set[int]) -> None:
    """A GraphError when an assigned param's (``assigned``: their var ids) shared array
    overlaps another shared param's."""
    shared = [(name, var) for name, var in graph.params.items() if var.id in graph.shared]
    for i, (name, var) in enumerate(shared):
        for other, ovar in shared[i + 1:]:
            if (var.id in assigned or ovar.id in assigned) and np.shares_memory(
                    graph.values[var.id], graph.values[ovar.id]):
                raise GraphError(
                    f"params {name!r} and {other!r} share memory (share=True on one array or "
                    f"on overlapping views of it) and {name if var.id in assigned else other!r}"
                    " is assigned: an update of one would change the other during the run; "
                    "give each its own array")


def plan_of(lowered: Lowered, options, scheduled=None, memory=None) -> Plan:
    """The Plan of a lowered graph; ``scheduled`` (memory.schedule's result) and ``memory``
    (its placement) when the caller has them already."""
    if scheduled is None:
        scheduled = schedule(lowered.slots, lowered.instructions, options, lowered.after)
    order = scheduled.order
    memory = place(lowered.slots, scheduled, options) if memory is None else memory
    slots = tuple(replace(s, offset=memory.offsets.get(s.index)) for s in lowered.slots)
    plan = Plan(lowered.device, slots, tuple(lowered.instructions[i] for i in order),
                lowered.feeds, lowered.outputs, lowered.values, memory, lowered.shared)
    if checks_enabled():
        verify_plan(plan)
    return plan
