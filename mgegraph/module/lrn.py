"""MegEngine's ``megengine.module.lrn`` path: local response norm."""
from ..nn.norm import LocalResponseNorm  # noqa: F401
