"""MegEngine's ``megengine.module.normalization`` path: the norms other than batch norm."""
from ..nn.layers import LayerNorm  # noqa: F401
from ..nn.norm import GroupNorm, InstanceNorm  # noqa: F401
