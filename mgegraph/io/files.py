"""Files a user names, read and written safely: only a regular file is read (a device such as
``/dev/zero``, a FIFO or a directory would be read without end, block, or fail obscurely), and
a file is written whole or not at all, under a temporary name of its own.

>>> with open_regular("model.mgm", refuse) as f: data = f.read()
>>> write_atomically("model.mgm", lambda f: f.write(data), refuse)
"""
from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Callable
from typing import BinaryIO, NoReturn

Refuse = Callable[[str], NoReturn]  # raises the caller's error type with the message given

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, in words."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path, refuse: Refuse) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (links followed);
    ``refuse`` gets the message otherwise. The file is opened first and its descriptor
    checked (``fstat``), so nothing can swap the file between the check and the read."""
    def opener(name, flags: int) -> int:
        # O_NONBLOCK: opening a FIFO nobody writes to returns at once instead of waiting
        fd = os.open(name, flags | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise _NotRegular(kind_of(mode))
        os.set_blocking(fd, True)
        return fd

    try:
        return open(path, "rb", opener=opener)
    except _NotRegular as exc:
        refuse(f"{_shown(path)} is {exc}, not a regular file")
    except (OSError, TypeError, ValueError) as exc:
        refuse(f"cannot read {_shown(path)}: {getattr(exc, 'strerror', None) or exc}")


class _NotRegular(OSError):
    """What ``open_regular``'s opener raises (inside ``open``) for a file of another kind."""


def write_atomically(path, write: Callable[[BinaryIO], object], refuse: Refuse) -> None:
    """Call ``write`` on a new file in ``path``'s folder under a name no other writer uses,
    then rename it to ``path`` in one step: a reader sees the old file or the new one whole,
    and two writers to one path never share a temporary. ``refuse`` gets the message, before
    anything is written, when ``path`` is a directory, a device, a FIFO or a socket: the rename
    would put a regular file in its place (``/dev/null`` replaced, for root)."""
    path = os.fspath(path)
    try:
        mode = os.stat(path).st_mode
    except OSError:  # nothing there yet (or nothing readable): the rename decides
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        refuse(f"cannot write {_shown(path)}: it is {kind_of(mode)}, not a regular file")
    folder, name = os.path.split(path)
    temporary = os.path.join(folder, f".{name}.{uuid.uuid4().hex}.partial")
    try:  # 0o666: the umask applies, as for a file opened with open(path, "w")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    except OSError as exc:  # no such folder, no permission: said of the path asked for
        refuse(f"cannot write {_shown(path)}: {exc.strerror or exc}")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(temporary, path)
    except BaseException:
        _remove(temporary)
        raise


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _shown(path) -> str:
    return repr(os.fspath(path)) if isinstance(path, (str, bytes, os.PathLike)) else repr(path)
