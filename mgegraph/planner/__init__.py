"""The memory planner. ``arena`` assigns offsets in one arena from buffer lifetimes."""
from .arena import (STRATEGIES, ArenaError, ArenaPlan, Overwrite, Request, dump, load,
                    lower_bound, solve, verify)

__all__ = ["ArenaError", "ArenaPlan", "Overwrite", "Request", "STRATEGIES", "dump", "load",
           "lower_bound", "solve", "verify"]
