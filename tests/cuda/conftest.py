"""Markers of the CUDA tests: ``nvrtc`` needs only the NVRTC wheel (the cuda extra); ``cuda``
needs a GPU too. Each skips with the reason when what it needs is missing. Modules that import
host_emu compile kernels with g++ (csrc_cuda/host_emu.h) and need neither."""
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # host_emu.py, no __init__.py here


def _nvrtc_missing() -> str | None:
    try:
        from cuda.bindings import nvrtc
        nvrtc.nvrtcVersion()
    except Exception as exc:  # noqa: BLE001  ImportError, or a wheel without its library
        return f"NVRTC is not installed (pip install 'mgegraph[cuda]'): {exc}"
    return None


def _cuda_missing() -> str | None:
    from mgegraph.cuda import unavailable_reason
    return unavailable_reason()


def pytest_collection_modifyitems(config, items):
    reasons = {}
    for item in items:
        for marker, probe in (("nvrtc", _nvrtc_missing), ("cuda", _cuda_missing)):
            if item.get_closest_marker(marker) is not None:
                if marker not in reasons:
                    reasons[marker] = probe()
                if reasons[marker]:
                    item.add_marker(pytest.mark.skip(reason=reasons[marker]))
        if "host_emu" in getattr(item.module, "__dict__", {}) and shutil.which("g++") is None:
            item.add_marker(pytest.mark.skip(reason="no g++ for the host emulation"))
