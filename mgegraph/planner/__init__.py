"""The memory planner: schedule, liveness, in-place reuse and offsets in one arena.

``arena`` assigns offsets from buffer lifetimes and knows nothing about graphs; ``memory``
plans a lowered plan with it; ``verify`` checks any plan independently of both.
"""
from .arena import STRATEGIES, ArenaError, ArenaPlan, Overwrite, Request, lower_bound, solve
from .memory import PRESETS, MemoryOptions, MemoryPlan
from .remat import RematOptions
from .remat_report import remat_svg, save_remat_picture
from .report import memory_report, memory_summary, memory_svg, save_memory_picture
from .verify import PlanError, checking, verify

__all__ = ["ArenaError", "ArenaPlan", "MemoryOptions", "MemoryPlan", "Overwrite", "PRESETS",
           "PlanError", "RematOptions", "Request", "STRATEGIES", "checking",
           "memory_report", "memory_summary", "memory_svg", "save_memory_picture", "lower_bound",
           "solve", "verify", "remat_svg", "save_remat_picture"]
