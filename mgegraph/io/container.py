"""The model file's container: a zip of ``model.json`` and ``.npy`` members, each checksummed.

Design: nothing from the file reaches the file system or the unpickler. Member names are
mgegraph's own (``arrays/<n>.npy``), checked against one pattern before anything is read;
every size is checked against ``Limits`` before the bytes it promises are allocated (the
central directory says how large a member unpacks to, and ``zipfile`` never reads past that),
so a small hostile file cannot make the loader allocate gigabytes; and only a regular file is
opened (``files.open_regular``: ``/dev/zero`` or a FIFO would be read without end).
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import struct
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from ..ir.errors import ModelFormatError
from ..ir.types import BFLOAT16, SUPPORTED
from .files import open_regular, write_atomically

MAGIC = "mgegraph-model"
# what each format version adds; a file is written with the lowest version that holds it, so a
# model with fixed shapes stays readable by an mgegraph that knows version 1 only
FORMAT_VERSIONS = {1: "fixed shapes", 2: "named dimensions ({'dim': text} in shapes and "
                   "attributes; the symbolic plan's options)"}
FORMAT_VERSION = max(FORMAT_VERSIONS)
JSON_MEMBER = "model.json"
ARRAY_MEMBER = re.compile(r"arrays/(0|[1-9][0-9]{0,8})\.npy")


@dataclass(frozen=True)
class Limits:
    """What ``load`` accepts; over any limit, a ``ModelFormatError`` before the bytes are read.

    ``max_ratio`` bounds how much a compressed member may unpack to per byte it takes in the
    file (mgegraph stores arrays uncompressed; deflate reaches about 1000 only on runs of one
    byte, a zip bomb's trick); members under ``small_member_bytes`` are exempt.

    >>> mg.load(path, limits=Limits(max_tensor_bytes=2**28))
    """

    max_file_bytes: int = 1 << 36
    max_member_bytes: int = 1 << 33
    max_total_bytes: int = 1 << 34
    max_json_bytes: int = 64 << 20
    max_members: int = 100_000
    max_ratio: int = 200
    small_member_bytes: int = 1 << 20
    max_nodes: int = 1_000_000
    max_ndim: int = 32
    max_tensor_bytes: int = 1 << 32   # one input, intermediate, output or array
    max_plan_bytes: int = 1 << 35     # the compiled plan's arena and persistent buffers
    max_attr_depth: int = 16
    max_attr_items: int = 1 << 16     # elements of one tuple attribute; characters of a string
    max_warm: int = 64                # bindings a symbolic model specialises when it loads


def fail(message: str):
    raise ModelFormatError(f"model file: {message}")


# .npy headers cannot name bfloat16 (NumPy writes it as raw |V2 records): its members hold the
# bits as little-endian uint16, and the description's dtype says how to read them
BITS_OF = {BFLOAT16: np.dtype("<u2")}


# -- writing -------------------------------------------------------------------------------------
def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    array = np.require(array, requirements="C")
    if array.dtype in BITS_OF:
        array = array.view(BITS_OF[array.dtype])
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def write(path, description: dict, arrays: list[np.ndarray], version: int = 1) -> None:
    """Write ``description`` (it gets the magic, format ``version`` and the members'
    checksums) and ``arrays`` (as members ``arrays/<index>.npy``) to ``path``, replacing it when
    complete (``files.write_atomically``: concurrent saves to one path each write their own
    file)."""
    members = {f"arrays/{i}.npy": npy_bytes(a) for i, a in enumerate(arrays)}
    description = {"magic": MAGIC, "format_version": version, **description,
                   "members": {name: {"sha256": hashlib.sha256(data).hexdigest(),
                                      "size": len(data)} for name, data in members.items()}}
    text = json.dumps(description, allow_nan=False, separators=(",", ":")).encode()

    def write_zip(f) -> None:
        with zipfile.ZipFile(f, "w") as zf:
            zf.writestr(JSON_MEMBER, text, compress_type=zipfile.ZIP_DEFLATED)
            for name, data in members.items():  # weights do not compress; stored, they map fast
                zf.writestr(name, data, compress_type=zipfile.ZIP_STORED)

    if hasattr(path, "write"):  # a file object the caller opened (mge.save(obj, f))
        write_zip(path)
    else:
        write_atomically(path, write_zip, fail)


# -- reading -------------------------------------------------------------------------------------
class Container:
    """A model file opened and checked: ``description`` (the JSON, magic and version checked)
    and ``array(name, shape, dtype)``, each member's bytes checked against its checksum;
    ``format_version`` is the file's."""

    def __init__(self, path, limits: Limits):
        self.limits = limits
        self.shared: dict[str, np.ndarray] = {}  # member -> the array shared params use
        self._file = _open(path, limits)
        try:
            size = _size(self._file)
            if size > limits.max_file_bytes:
                fail(f"the file is {size} bytes, over the limit of {limits.max_file_bytes}")
            try:
                self._zip = zipfile.ZipFile(self._file)
                infos = self._zip.infolist()
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError,
                    NotImplementedError) as exc:
                fail(f"not a zip container ({exc})")
        except BaseException:
            self._file.close()
            raise
        try:
            self._infos = self._check_infos(infos, size)
            self.description = self._read_json()
            self.format_version = self.description["format_version"]
            self._members = self._check_members()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._zip.close()
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_infos(self, infos, size: int) -> dict:
        limits = self.limits
        if len(infos) > limits.max_members:
            fail(f"{len(infos)} members, over the limit of {limits.max_members}")
        found, total = {}, 0
        for info in infos:
            name = info.filename
            if name != JSON_MEMBER and not ARRAY_MEMBER.fullmatch(name):
                fail(f"unexpected member {name[:200]!r} (a model file holds {JSON_MEMBER} and "
                     "arrays/<n>.npy only; no directories, '..' or absolute paths)")
            if name in found:
                fail(f"member {name!r} appears twice")
            if info.flag_bits & 0x1:
                fail(f"member {name!r} is encrypted")
            if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                fail(f"member {name!r} uses compression method {info.compress_type} "
                     "(stored or deflated only)")
            if info.file_size > limits.max_member_bytes or info.compress_size > size:
                fail(f"member {name!r} claims {info.file_size} bytes, over the limit of "
                     f"{limits.max_member_bytes} (or more than the file holds)")
            if (info.file_size > limits.small_member_bytes
                    and info.file_size > limits.max_ratio * max(info.compress_size, 1)):
                fail(f"member {name!r} unpacks {info.compress_size} bytes to {info.file_size}, "
                     f"a ratio over {limits.max_ratio} (a zip bomb?)")
            if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
                fail(f"member {name!r} is stored but its sizes differ")
            total += info.file_size
            found[name] = info
        if total > limits.max_total_bytes:
            fail(f"the members unpack to {total} bytes, over the limit of "
                 f"{limits.max_total_bytes}")
        if JSON_MEMBER not in found:
            fail(f"no {JSON_MEMBER} member: not a mgegraph model file")
        return found

    def _read(self, name: str) -> bytes:
        try:
            return self._zip.read(self._infos[name])
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as exc:
            fail(f"member {name!r} is truncated or corrupted ({exc})")
        except (zlib.error, struct.error) as exc:  # mangled deflate data or headers
            fail(f"member {name!r} is truncated or corrupted ({type(exc).__name__}: {exc})")

    def _read_json(self) -> dict:
        if self._infos[JSON_MEMBER].file_size > self.limits.max_json_bytes:
            fail(f"{JSON_MEMBER} is over the limit of {self.limits.max_json_bytes} bytes")
        raw = self._read(JSON_MEMBER)
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_no_constant,
                               object_pairs_hook=_unique_keys)
        except ModelFormatError:
            raise
        except (ValueError, RecursionError) as exc:
            fail(f"{JSON_MEMBER} is not valid JSON ({str(exc)[:200]})")
        if not isinstance(value, dict):
            fail(f"{JSON_MEMBER} is not a JSON object")
        magic = value.get("magic")
        if magic != MAGIC:
            fail(f"wrong magic {str(magic)[:100]!r} (expected {MAGIC!r}): not a mgegraph "
                 "model file")
        version = value.get("format_version")
        if type(version) is not int or version not in FORMAT_VERSIONS:
            fail(f"unknown format version {str(version)[:50]!r}: this mgegraph reads versions "
                 f"{', '.join(map(str, FORMAT_VERSIONS))}")
        return value

    def _check_members(self) -> dict:
        members = self.description.get("members")
        if not isinstance(members, dict):
            fail("'members' must be an object of member name to checksum")
        listed = set(members)
        present = set(self._infos) - {JSON_MEMBER}
        if listed != present:
            fail(f"the members listed {sorted(listed)[:10]} and those in the zip "
                 f"{sorted(present)[:10]} differ")
        for name, entry in members.items():
            if not (isinstance(entry, dict) and set(entry) == {"sha256", "size"}
                    and isinstance(entry["sha256"], str) and type(entry["size"]) is int):
                fail(f"member {name!r}: its entry must be {{'sha256': str, 'size': int}}")
            if entry["size"] != self._infos[name].file_size:
                fail(f"member {name!r} is {self._infos[name].file_size} bytes, the description "
                     f"says {entry['size']} (truncated?)")
        return members

    def array(self, name, shape: tuple, dtype: np.dtype, used: set) -> np.ndarray:
        """Member ``name`` as a fresh writeable array; its checksum, header, dtype and shape
        must be those the description gives."""
        if not isinstance(name, str) or name not in self._members:
            fail(f"array member {str(name)[:100]!r} is not one of the listed members")
        used.add(name)
        data = self._read(name)
        if hashlib.sha256(data).hexdigest() != self._members[name]["sha256"]:
            fail(f"member {name!r}: checksum mismatch (corrupted)")
        stream = io.BytesIO(data)
        try:
            major, _ = np.lib.format.read_magic(stream)
            if major == 1:
                header = np.lib.format.read_array_header_1_0(stream)
            elif major == 2:
                header = np.lib.format.read_array_header_2_0(stream)
            else:
                fail(f"member {name!r}: .npy version {major} is not supported")
        except ModelFormatError:
            raise
        except (ValueError, SyntaxError, TypeError, EOFError, OverflowError) as exc:
            fail(f"member {name!r} is not a valid .npy file ({str(exc)[:200]})")
        file_shape, fortran, file_dtype = header
        if fortran or file_dtype != BITS_OF.get(dtype, dtype) or tuple(file_shape) != tuple(shape):
            fail(f"member {name!r} holds {file_dtype}{list(file_shape)}"
                 f"{' (Fortran order)' if fortran else ''}; the description says "
                 f"{dtype}{list(shape)}")
        if file_dtype.byteorder == ">" or BITS_OF.get(dtype, file_dtype) != file_dtype \
                or dtype not in SUPPORTED:
            fail(f"member {name!r}: dtype {file_dtype} is not supported")
        if len(data) - stream.tell() != math.prod(shape) * dtype.itemsize:
            fail(f"member {name!r}: its data is not {list(shape)} elements of {dtype}")
        stream.seek(0)
        try:
            array = np.load(stream, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            fail(f"member {name!r} could not be read ({str(exc)[:200]})")
        return np.require(array, requirements=("C", "W", "O")).view(dtype)


def _open(source, limits: Limits):
    """A file name opened when it is a regular file, or the rest of a binary file object the
    caller opened, read up to one byte over the limit (a stream says its size no other way)."""
    if not hasattr(source, "read"):
        return open_regular(source, fail)
    if isinstance(source, io.TextIOBase):
        fail(f"{type(source).__name__} is a text file: open the file in binary mode ('rb')")
    data = bytearray()
    while len(data) <= limits.max_file_bytes:  # in pieces: read(n) allocates n bytes at once
        piece = source.read(1 << 20)
        if not isinstance(piece, (bytes, bytearray)):
            fail(f"{type(source).__name__} gave {type(piece).__name__}, not bytes: open the "
                 "file in binary mode ('rb')")
        if not piece:
            break
        data += piece
    return io.BytesIO(bytes(data))


def _size(f) -> int:
    if isinstance(f, io.BytesIO):
        return len(f.getbuffer())
    return os.fstat(f.fileno()).st_size


def _no_constant(token: str):
    fail(f"{JSON_MEMBER} holds the non-standard constant {token} (floats that are not finite "
         "are written as tagged values)")


def _unique_keys(pairs):
    result = {}
    for key, value in pairs:
        if key in result:
            fail(f"{JSON_MEMBER} repeats the key {key[:100]!r}")
        result[key] = value
    return result
