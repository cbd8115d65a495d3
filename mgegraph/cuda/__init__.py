"""The CUDA backend: ``mg.compile(..., device="cuda")`` (or ``"cuda:1"``).

Three stages, each its own module: render (``render.py``: the elementwise table and each fused
group's program as CUDA C, pure text), compile (``nvrtc.py`` with the disk cache of
``cache.py``; ``CompileError`` carries NVRTC's log and the op behind the failing line), and run
(``driver.py``: one context, one stream, modules and launches through the driver API;
``backend.py``: the kernel table and the executable that owns a plan's device arena). Kernel
sources live in csrc_cuda/ (shipped in the package as ``mgegraph/cuda/csrc``).

Importing this package imports no CUDA library: cuda-python (the ``cuda`` extra) is imported by
the functions that need it, so ``mg.devices()`` and a clear error work without it.

>>> import mgegraph.cuda
>>> mgegraph.cuda.CSRC.name
'csrc'
"""
from __future__ import annotations

from .driver import probe
from .errors import CompileError, DeviceUnavailableError
from .nvrtc import CSRC

__all__ = ["CSRC", "CompileError", "DeviceUnavailableError", "available", "fetch",
           "unavailable_reason"]


def unavailable_reason() -> str | None:
    """Why ``device="cuda"`` cannot run here (None when it can): the missing extra, a driver
    that does not load, or no GPU. Imports cuda-python only when it is installed.

    >>> unavailable_reason() is None or isinstance(unavailable_reason(), str)
    True
    """
    return probe()


def fetch(*arrays) -> None:
    """Copy the device's newer value of shared param arrays (``p.value`` of the parameters a
    CUDA training step updates) back into them (``state_dict()`` and ``mg.save`` do).

    >>> mgegraph.cuda.fetch(*[p.value for p in model.parameters()])   # doctest: +SKIP
    """
    from .runtime import fetch as fetch_arrays  # lazy: startup cost (mg.devices() probes here)
    fetch_arrays(*arrays)


def available() -> bool:
    """Whether ``mg.compile(..., device="cuda")`` can run here (what ``mg.devices()`` asks)."""
    return unavailable_reason() is None
