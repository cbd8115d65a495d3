"""MegEngine's ``megengine.module.embedding`` path: the embedding table."""
from ..nn.layers import Embedding  # noqa: F401
