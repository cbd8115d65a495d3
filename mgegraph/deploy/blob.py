"""The C runtime's blob (``model.mgr``): the plan's tables and its weights in one file.

The layout is docs/c_runtime.md's, read by ``csrc/mgr_runtime.c``; its numbers are the
``#define``s and enums there, which ``tests/deploy`` compares with these. Little-endian 64-bit
fields, sections 64-byte aligned. A GEMM's weight packed at export (``export.gemm_panels``) is
a weight record like any other; its kernel's name (``linear_packed_f32``, ``matmul_packed_f32``)
is what an older runtime refuses, so the layout and ``VERSION`` are unchanged.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

MAGIC = b"MGRBLOB1"
VERSION = 1
HEADER_FIELDS = 20  # the magic, then 19 numbers
TENSOR_FIELDS = 16
INSTR_FIELDS = 8
NAME_BYTES = 32  # a kernel's name, NUL padded
ALIGN = 64
MAX_NDIM = 8
KIND_ARENA, KIND_WEIGHT, KIND_INPUT, KIND_OUTPUT = 0, 1, 2, 3
# (int16 came after the others: a blob without one reads as before, so the version stays 1)
DTYPES = {np.dtype(name): code for code, name in enumerate(
    ("float32", "float64", "int32", "int64", "uint8", "int8", "bool", "int16"))}


@dataclass(frozen=True)
class Tensor:
    """A buffer an instruction reads or writes: ``kind`` and where its bytes start (``index``:
    the input's or output's position); ``name`` only on an input's or output's root."""

    kind: int
    index: int
    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]
    name: str = ""

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


@dataclass(frozen=True)
class Call:
    """One instruction: its kernel's index among the blob's names, its buffers (tensor
    indices) and its parameter block."""

    kernel: int
    refs: tuple[int, ...]
    ints: tuple[int, ...] = ()
    floats: tuple[float, ...] = ()


@dataclass
class Blob:
    """What ``encode`` writes: kernel names, tensors, calls, the arena's size, the weights."""

    kernels: list[str] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    arena_bytes: int = 0
    weights: bytearray = field(default_factory=bytearray)

    def add_weight(self, value: np.ndarray) -> int:
        """Append ``value``'s bytes at the next aligned offset; returns the offset."""
        offset = _aligned(len(self.weights))
        self.weights += bytes(offset - len(self.weights))
        self.weights += np.ascontiguousarray(value).tobytes()
        return offset


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _pad(data: bytes) -> bytes:
    return data + bytes(_aligned(len(data)) - len(data))


def _tensor_fields(t: Tensor, name_off: int) -> list[int]:
    shape = list(t.shape) + [0] * (MAX_NDIM - len(t.shape))
    return [t.kind, t.index, t.offset, t.nbytes, DTYPES[t.dtype], len(t.shape), *shape,
            name_off, len(t.name.encode())]


def encode(blob: Blob) -> bytes:
    """The blob's bytes: the header, then kernels, tensors, instructions, refs, ints, floats,
    weights and strings, each section aligned."""
    strings, name_offs = b"", []
    for t in blob.tensors:
        name_offs.append(len(strings) if t.name else 0)
        strings += t.name.encode()
    refs, ints, floats, instr = [], [], [], []
    for c in blob.calls:
        instr += [c.kernel, len(refs), len(c.refs), len(ints), len(c.ints), len(floats),
                  len(c.floats), 0]
        refs += c.refs
        ints += c.ints
        floats += c.floats
    sections = [
        b"".join(name.encode().ljust(NAME_BYTES, b"\0") for name in blob.kernels),
        struct.pack(f"<{len(blob.tensors) * TENSOR_FIELDS}q",
                    *(f for t, o in zip(blob.tensors, name_offs) for f in _tensor_fields(t, o))),
        struct.pack(f"<{len(instr)}q", *instr),
        struct.pack(f"<{len(refs)}q", *refs),
        struct.pack(f"<{len(ints)}q", *ints),
        struct.pack(f"<{len(floats)}d", *floats),
        bytes(blob.weights),
        strings,
    ]
    counts = [len(blob.kernels), len(blob.tensors), len(blob.calls), len(refs), len(ints),
              len(floats), len(blob.weights), len(strings)]
    offsets, at = [], _aligned(HEADER_FIELDS * 8)
    for data in sections:
        offsets.append(at)
        at += _aligned(len(data))
    header = [VERSION, at, blob.arena_bytes]
    for count, offset in zip(counts, offsets):
        header += [count, offset]
    head = MAGIC + struct.pack(f"<{HEADER_FIELDS - 1}q", *header)
    return _pad(head) + b"".join(_pad(s) for s in sections)
