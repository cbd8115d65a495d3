"""Compile CUDA C++ with NVRTC (the ``cuda`` extra), through the disk cache.

Options are always ``-std=c++17 -I <csrc_cuda>`` and the architecture
(``--gpu-architecture=sm_90``); rendered elementwise modules add ``--fmad=false`` so that no
multiply-add is contracted, as the CPU kernels are built (bitwise the same results). The result
is the CUBIN for that architecture (loaded by the driver without a JIT) and the PTX (for the
tests' checks of what the compiler made).

>>> compiler = Compiler("sm_90")                                      # doctest: +SKIP
>>> module = compiler.compile('#include "mg_abi.cuh"\\n...', "x.cu")  # doctest: +SKIP
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from .cache import DiskCache, default_dir, key
from .errors import CompileError, DeviceUnavailableError

# the CUDA sources (a link to the repository's csrc_cuda/, copied into wheels as package data)
CSRC = Path(__file__).parent / "csrc"

BASE_OPTIONS = ("-std=c++17",)
EXACT_OPTIONS = ("--fmad=false",)  # rendered elementwise/fused modules: the CPU's arithmetic


@dataclass(frozen=True)
class Compiled:
    """One compiled module: ``cubin`` for the driver, ``ptx`` for inspection, NVRTC's ``log``."""

    cubin: bytes
    ptx: str
    log: str

    def to_bytes(self) -> bytes:
        ptx, log = self.ptx.encode(), self.log.encode()
        return struct.pack("<QQ", len(self.cubin), len(ptx)) + self.cubin + ptx + log

    @classmethod
    def from_bytes(cls, data: bytes) -> Compiled:
        n_cubin, n_ptx = struct.unpack_from("<QQ", data)
        body = data[16:]
        return cls(body[:n_cubin], body[n_cubin:n_cubin + n_ptx].decode(),
                   body[n_cubin + n_ptx:].decode())


def bindings():
    """cuda.bindings.nvrtc, or a DeviceUnavailableError naming the missing extra."""
    try:
        from cuda.bindings import nvrtc  # lazy: optional dependency (the cuda extra)
    except ImportError:
        raise DeviceUnavailableError(
            "the CUDA backend needs the 'cuda' extra (cuda-python and the NVRTC wheel): "
            "pip install 'mgegraph[cuda]'") from None
    return nvrtc


def version() -> tuple[int, int]:
    """NVRTC's (major, minor)."""
    nvrtc = bindings()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return major, minor


def _check(nvrtc, err, what: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"NVRTC {what} failed: {err}")


def headers() -> dict[str, str]:
    """The text of every header in csrc_cuda/ (part of each cache key)."""
    return {p.name: p.read_text() for p in sorted(CSRC.iterdir())
            if p.suffix in (".cuh", ".h")}


def nvrtc_compile(source: str, name: str, options) -> Compiled:
    """One NVRTC compile, no cache; a CompileError with the log and the failing line."""
    nvrtc = bindings()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [o.encode() for o in options]
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _read(nvrtc, prog, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(explain(log, source, name), log, name)
        ptx = _read(nvrtc, prog, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX)
        cubin = _read_bytes(nvrtc, prog, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN)
        return Compiled(cubin, ptx, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def _read_bytes(nvrtc, prog, size_fn, get_fn) -> bytes:
    err, n = size_fn(prog)
    _check(nvrtc, err, size_fn.__name__)
    # NOTE: NVRTC writes into the buffer, so it must be a fresh mutable one. `b" " * n` is not:
    # for n == 1 (an empty log is its NUL alone) it is CPython's shared one-byte b" ", and the
    # write turned every b" " in the process into b"\0" (PyTorch then failed to import).
    buf = bytearray(n)
    (err,) = get_fn(prog, buf)
    _check(nvrtc, err, get_fn.__name__)
    return bytes(buf)


def _read(nvrtc, prog, size_fn, get_fn) -> str:
    return _read_bytes(nvrtc, prog, size_fn, get_fn).rstrip(b"\0").decode(errors="replace")


_LOCATION = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<what>error|warning)")


def explain(log: str, source: str, name: str) -> str:
    """The compile failure in words: NVRTC's first error, the source line it points at, and
    the op whose rendered kernel holds it (its ``// mg-op:`` line)."""
    first = next((m for m in map(_LOCATION.match, log.splitlines()) if m and
                  m["what"] == "error"), None)
    if first is None:
        return f"NVRTC could not compile {name}:\n{log.strip()}"
    file, number = first["file"], int(first["line"])
    lines = source.splitlines() if Path(file).name == name else _header_lines(file)
    text = lines[number - 1].strip() if 0 < number <= len(lines) else "?"
    op = next((ln.split("mg-op:", 1)[1].strip() for ln in reversed(lines[:number])
               if "mg-op:" in ln), None)
    origin = f" (the kernel of {op})" if op else ""
    message = log.strip().splitlines()
    return (f"NVRTC could not compile {name}{origin}: {file}:{number}: {text}\n"
            + "\n".join(message[:20]))


def _header_lines(file: str) -> list[str]:
    path = CSRC / Path(file).name
    return path.read_text().splitlines() if path.is_file() else []


class Compiler:
    """Compiles for one architecture through a DiskCache (and a per-process map, so one plan's
    modules are loaded once); ``compiled`` counts the NVRTC calls it made."""

    def __init__(self, arch: str, cache: DiskCache | None = None):
        if not re.fullmatch(r"(sm|compute)_\d+a?", arch):
            raise ValueError(f"arch must be like 'sm_90', got {arch!r}")
        self.arch, self.cache = arch, cache if cache is not None else DiskCache(default_dir())
        self.version = version()
        self.headers = headers()
        self.compiled = 0
        self._memory: dict[str, Compiled] = {}

    def options(self, extra=()) -> tuple[str, ...]:
        return (*BASE_OPTIONS, f"-I{CSRC.resolve()}", f"--gpu-architecture={self.arch}",
                *extra)

    def compile(self, source: str, name: str = "mgegraph.cu", extra=()) -> Compiled:
        """``source`` compiled (or found in the cache) with the base options and ``extra``."""
        options = self.options(extra)
        # the include directory's location is not part of the key: the headers' text is
        name_key = key(source, self.headers, self.arch, self.version,
                       [o for o in options if not o.startswith("-I")])
        hit = self._memory.get(name_key)
        if hit is None:
            data = self.cache.get(name_key)
            hit = Compiled.from_bytes(data) if data is not None else None
        if hit is None:
            hit = nvrtc_compile(source, name, options)
            self.compiled += 1
            self.cache.put(name_key, hit.to_bytes())
        self._memory[name_key] = hit
        return hit

    def compile_file(self, filename: str, extra=()) -> Compiled:
        """A source of csrc_cuda/ by name."""
        return self.compile((CSRC / filename).read_text(), filename, extra)


def key_of(compiled: Compiled) -> str:
    """A name for a compiled module (loaded modules are kept by it)."""
    return hashlib.sha256(compiled.cubin).hexdigest()[:32]
