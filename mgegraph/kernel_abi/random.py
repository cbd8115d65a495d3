"""The random draws' parameter block, read by _kernels/rng.pyx and by csrc_cuda/rng.cu."""
from __future__ import annotations

from ..backend import Launch
from ..ops.registry import FLOAT_DTYPES
from .layout import pack

# The struct's fields, in the kernels' order (rng.pyx exports its own RNG_FIELDS)
FIELDS = {"RNG_FIELDS": ("size", "seed")}


def _lower(node) -> Launch:
    seed = int(node.attr["seed"]) & (2**64 - 1)
    seed = seed - 2**64 if seed >= 2**63 else seed  # the kernel reads it back as uint64
    return Launch(pack(FIELDS["RNG_FIELDS"], size=node.outputs[0].size, seed=seed), ())


def implement(table) -> None:
    """Register rng_uniform (dispatched on its output's dtype), rng_gamma and rng_poisson."""
    table.implement("rng_uniform", kernel="rng_uniform", dtypes=FLOAT_DTYPES, lower=_lower,
                    dispatch_input=-1)
    for op in ("rng_gamma", "rng_poisson"):
        table.implement(op, kernel=op, dtypes=FLOAT_DTYPES, lower=_lower)
