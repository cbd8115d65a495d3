"""The planner, one sub-package per stage: ``passes`` (graph -> graph, run by
``passes.pipeline``), ``remat`` (recompute instead of keep) and ``memory`` (schedule,
liveness, in-place reuse and offsets in one arena, the reports, and the plan verifier).

``memory.arena`` assigns offsets from buffer lifetimes and knows nothing about graphs;
``memory.plan`` plans a lowered plan with it; ``memory.verify`` checks any plan independently
of both. Here are the public names of all three stages.
"""
from .memory.arena import STRATEGIES, ArenaError, ArenaPlan, Overwrite, Request, lower_bound, solve
from .memory.plan import PRESETS, MemoryOptions, MemoryPlan
from .memory.report import memory_report, memory_summary, memory_svg, save_memory_picture
from .memory.verify import PlanError, checking, verify_plan
from .passes import pipeline
from .passes.verify import verify_graph
from .remat.remat import RematOptions
from .remat.remat_report import remat_svg, save_remat_picture

verify = verify_plan  # the name mg.planner.verify has always had

__all__ = ["PRESETS", "STRATEGIES", "ArenaError", "ArenaPlan", "MemoryOptions", "MemoryPlan",
           "Overwrite", "PlanError", "RematOptions", "Request", "checking", "lower_bound",
           "memory_report", "memory_summary", "memory_svg", "pipeline", "remat_svg",
           "save_memory_picture", "save_remat_picture", "solve", "verify", "verify_graph",
           "verify_plan"]
