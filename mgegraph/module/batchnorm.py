"""MegEngine's ``megengine.module.batchnorm`` path: the batch norms."""
from ..nn.norm import BatchNorm1d, BatchNorm2d  # noqa: F401
from ..nn.sync_norm import SyncBatchNorm  # noqa: F401
