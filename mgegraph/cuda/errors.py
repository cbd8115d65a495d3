"""The CUDA backend's errors (project error types: a GraphError or a KernelError)."""
from __future__ import annotations

from ..ir.errors import GraphError, KernelError


class DeviceUnavailableError(GraphError):
    """``device="cuda"`` was asked for where it cannot run: the message says what is missing
    (the ``cuda`` extra, the driver, or a GPU)."""


class CompileError(KernelError):
    """NVRTC refused a source: ``log`` is NVRTC's log; the message shows the offending source
    line and, for rendered kernels, the op that produced it."""

    def __init__(self, message: str, log: str = "", source_name: str = ""):
        super().__init__(message)
        self.log, self.source_name = log, source_name
