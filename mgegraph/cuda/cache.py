"""Where the CUDA modules NVRTC compiled are cached (``mgegraph/disk_cache.py`` keeps them):
``$MGEGRAPH_CUDA_CACHE``, else ``$XDG_CACHE_HOME/mgegraph/cuda``, else ``~/.cache/mgegraph/cuda``.
"""
from __future__ import annotations

from pathlib import Path

from ..disk_cache import DiskCache, cache_dir, key

ENV = "MGEGRAPH_CUDA_CACHE"

__all__ = ["ENV", "DiskCache", "default_dir", "key"]


def default_dir() -> Path:
    return cache_dir("cuda", ENV)
