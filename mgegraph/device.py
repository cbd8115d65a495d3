"""MegEngine's ``megengine.device``: which devices there are and the default one.

Eager tensors live in host memory: the CPU is the only eager device, and a GPU runs compiled
plans (``mg.compile(..., device="cuda")``). So the default device may be set to any name of
MegEngine's form (``"cpu0"``, ``"cpux"``, ``"gpu0"``, ``"xpux"``...), as MegEngine scripts do,
but an eager tensor made on a GPU name is refused (``eager.tensor.check_eager_device``).
GPUs are counted by the CUDA backend's probe, which imports no CUDA library when its extra is
missing.

>>> import mgegraph.device as device
>>> device.get_device_count("cpu")
1
"""
from __future__ import annotations

import re
import threading

from .backend import devices

__all__ = ["Device", "get_default_device", "get_device_count", "is_cuda_available",
           "set_default_device", "what_is_xpu"]

# MegEngine's device names: a kind, then a number or "x" (any), then an optional ":stream"
_NAME = re.compile(r"^(cpu|gpu|xpu|multithread)(x|\d+)(:\d+)?$")
KINDS = ("cpu", "gpu", "xpu")
_default = {"name": "xpux"}
_lock = threading.Lock()


class Device(str):
    """A device name as MegEngine's tensors report it (``x.device``): compares equal to the
    name it was made from and has MegEngine's ``logical_name``."""

    @property
    def logical_name(self) -> str:
        return str(self)


def valid_name(name) -> bool:
    """Whether ``name`` is a device name of MegEngine's form (``"cpu0"``, ``"gpux"``,
    ``"xpu0:1"``)."""
    return isinstance(name, str) and _NAME.match(name) is not None


def check_name(name, what: str) -> Device:
    """``name`` as a Device; a ValueError naming ``what`` when it is not a device name."""
    if not valid_name(name):
        raise ValueError(f"{what}: invalid device name {name!r}: a kind (cpu, gpu, xpu, "
                         f"multithread), then a number or 'x', then an optional ':stream' "
                         f"(e.g. 'cpu0', 'gpux', 'xpu0:1')")
    return Device(name)


def get_device_count(device_type: str) -> int:
    """How many devices of ``device_type`` ("cpu", "gpu" or "xpu", any of them) this machine
    has: one CPU (mgegraph runs it as one device of many threads) and the GPUs CUDA sees.

    >>> get_device_count("gpu") >= 0
    True
    """
    if device_type not in KINDS:
        raise ValueError(f"get_device_count({device_type!r}): the device type is one of "
                         f"{', '.join(KINDS)}")
    if device_type == "cpu":
        return 1
    gpus = _gpu_count()
    return gpus if device_type == "gpu" else gpus + 1


def _gpu_count() -> int:
    if "cuda" not in devices():  # the probe: no extra, no driver or no GPU
        return 0
    from .cuda.driver import device_count  # lazy: optional dependency (the cuda extra)
    return device_count()


def is_cuda_available() -> bool:
    """Whether a CUDA GPU can run compiled plans here (``mg.compile(..., device="cuda")``)."""
    return "cuda" in devices()


def what_is_xpu() -> str:
    """The device "xpu" (any) means here: "cuda" where a GPU can run plans, else "cpu"."""
    return "cuda" if is_cuda_available() else "cpu"


def set_default_device(device: str = "xpux") -> None:
    """Make ``device`` the default (MegEngine's names: "cpu0", "gpux", "xpux"...). Eager
    tensors made without ``device=`` report it; they live in host memory whatever it is.

    >>> set_default_device("cpu0"); get_default_device()
    'cpu0'
    """
    name = check_name(device, "set_default_device")
    with _lock:
        _default["name"] = name


def get_default_device() -> Device:
    """The device ``set_default_device`` set ("xpux", any device, until then; MegEngine's
    environment variable ``MGE_DEFAULT_DEVICE`` is not read: one channel of settings)."""
    return Device(_default["name"])
