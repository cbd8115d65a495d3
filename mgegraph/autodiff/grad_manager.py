"""``mgegraph.autodiff.grad_manager``: MegEngine's path (``megengine.autodiff.grad_manager``) to
the GradManager, which records eager ops and so lives with eager mode (eager/grad_manager.py).
This module sits in the eager layer; ``mgegraph.autodiff`` itself loads none of it."""
from ..eager.grad_manager import GradManager, GradManagerGroup

__all__ = ["GradManager", "GradManagerGroup"]
