"""The disk cache of compiled code: a second compile of the same source compiles nothing. The
CUDA modules (``cuda/nvrtc.py``) and the CPU's generated fused bodies (``_kernels/fused_jit.py``)
keep their builds here.

An entry is keyed by everything the result depends on: the source text, the text of every
header it includes (an include may change), the target (a GPU architecture, a CPU's vector
width), the compiler's version and the options. It lives in a directory of the user's cache
(``cache_dir``: ``$XDG_CACHE_HOME/mgegraph/<kind>``, ``~/.cache/mgegraph/<kind>``) unless an
environment variable names another.

Design: a file per entry, its payload's SHA-256 first, so a truncated or corrupted entry is
detected and rebuilt instead of handed to the driver; written to a temporary file in the same
directory and renamed into place, so concurrent writers (two processes compiling one plan)
never expose a half-written entry, and the last rename wins with identical bytes.

>>> cache = DiskCache(Path(tempfile.mkdtemp()))
>>> cache.get("k") is None
True
>>> cache.put("k", b"cubin"); cache.get("k")
b'cubin'
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def cache_root() -> Path:
    """The package's folder of the user's cache: ``$XDG_CACHE_HOME/mgegraph``, else
    ``~/.cache/mgegraph`` (the BLAS choice's measurement lives there too)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mgegraph"


def cache_dir(kind: str, env: str) -> Path:
    """``$<env>``, else ``$XDG_CACHE_HOME/mgegraph/<kind>``, else ``~/.cache/mgegraph/<kind>``."""
    if os.environ.get(env):
        return Path(os.environ[env])
    return cache_root() / kind


def key(source: str, headers: dict[str, str], arch: str, version, options) -> str:
    """The entry name of one compile: a SHA-256 over all its inputs."""
    h = hashlib.sha256()
    for part in (source, arch, repr(tuple(version)), repr(tuple(options)),
                 *(f"{name}\0{text}" for name, text in sorted(headers.items()))):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


class DiskCache:
    """Entries (bytes) by key in one directory; ``hits``, ``misses`` and ``corrupt`` count
    what ``get`` found."""

    def __init__(self, directory: Path, suffix: str = ".mgcu"):
        self.directory = Path(directory)
        self.suffix = suffix
        self.hits = self.misses = self.corrupt = 0

    def path(self, name: str) -> Path:
        return self.directory / f"{name}{self.suffix}"

    def get(self, name: str) -> bytes | None:
        """The entry's bytes, or None when absent or corrupted (a corrupted one is removed)."""
        try:
            data = self.path(name).read_bytes()
        except OSError:
            self.misses += 1
            return None
        digest, payload = data[:32], data[32:]
        if len(data) < 32 or hashlib.sha256(payload).digest() != digest:
            self.corrupt += 1
            self.misses += 1
            self.path(name).unlink(missing_ok=True)
            return None
        self.hits += 1
        return payload

    def put(self, name: str, payload: bytes) -> None:
        """Store ``payload``; an unwritable directory only costs the next compile."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, self.path(name))
        except OSError:
            return
