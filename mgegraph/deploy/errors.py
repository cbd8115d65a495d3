"""The error of an export the C runtime cannot take (``mg.deploy.export_c``)."""
from __future__ import annotations

from ..ir.errors import GraphError


class ExportError(GraphError):
    """A plan the C runtime cannot run as it is (an op or kernel it lacks, a shape left named,
    an output that is an input): the message names the ops, kernels and slots."""
