"""MegEngine's ``megengine.module.batchnorm`` path: the batch norms."""
from ..nn.norm import BatchNorm1d, BatchNorm2d, SyncBatchNorm  # noqa: F401
