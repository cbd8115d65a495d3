"""Attention on CUDA (csrc_cuda/attention.cu), from the shared parameter block of
mgegraph/kernel_abi/attention.py without its workspace: the forward a thread per query row
(an online softmax, no shared memory); the backward two steps, a thread per query row (dq) then
per key row (dk, dv), so no atomics.

>>> sorted(KERNELS)
['attention_backward_f32', 'attention_backward_f64', 'attention_f32', 'attention_f64']
"""
from __future__ import annotations

from functools import partial
from types import SimpleNamespace

from ...ir.types import short_name
from ...kernel_abi import attention as abi
from .norm import elementwise_steps
from .reuse import family_kernels, implement_shared

_FIELD = {f: abi.FIELDS["ATTENTION_FIELDS"].index(f) for f in ("batch", "hq", "hkv", "lq", "lk")}


def _steps(family, dtype):
    entry = f"mg_{family}_{short_name(dtype)}"

    def steps(launch, types):
        get = {f: launch.ints[i] for f, i in _FIELD.items()}
        rows = get["batch"] * get["hq"] * get["lq"]
        if family == "attention":
            return elementwise_steps(entry, rows)
        keys = get["batch"] * get["hkv"] * get["lk"]
        return elementwise_steps(entry + "_dq", rows) + elementwise_steps(entry + "_dkv", keys)
    return steps


# the shared lowering with CUDA's choice: no tiles' scratch
_NoWorkspace = SimpleNamespace(implement=partial(abi.implement, with_workspace=False))


def implement(table) -> None:
    """Register attention and its backward on ``table``."""
    implement_shared(table, _NoWorkspace)


KERNELS = family_kernels(_NoWorkspace, "attention.cu", _steps)
