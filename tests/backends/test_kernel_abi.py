"""The parameter blocks both backends read (mgegraph/kernel_abi): the CPU build is checked
against them when its backend is made, CUDA's kernels read the same geometry, and a kernel's
status means the same on both."""
import re
from pathlib import Path

import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import linalg, movement, runtime
from mgegraph._kernels.cpu import CpuBackend
from mgegraph._kernels.lowering.built import check_built
from mgegraph.backend import unregister_backend
from mgegraph.cuda import abi as cuda_abi
from mgegraph.cuda.backend import CudaBackend
from mgegraph.kernel_abi import conv, status
from mgegraph.kernel_abi import matmul as abi_matmul
from mgegraph.kernel_abi import movement as abi_movement

ROOT = Path(mg.__file__).parent


def test_the_cpu_build_exports_the_declared_blocks():
    check_built(linalg, **abi_matmul.FIELDS)
    check_built(movement, **abi_movement.FIELDS, PAD_MODES=abi_movement.PAD_CODES)
    check_built(runtime, KERNEL_STATUS=status.MESSAGES)


@pytest.mark.parametrize("module,name,drifted", [
    (linalg, "MATMUL_FIELDS", ("m", "n", "k", "transpose_a", "transpose_b", "threads", "ndim")),
    (movement, "TAKE_FIELDS", ("outer", "axis_length", "row", "count")),
    (runtime, "KERNEL_STATUS", {1: "an index is out of range"}),
])
def test_a_build_that_drifted_from_the_blocks_is_refused(monkeypatch, module, name, drifted):
    monkeypatch.setattr(module, name, drifted)
    with pytest.raises(ImportError, match=f"{name} = .* differ"):
        CpuBackend()


def test_status_codes_are_the_kernels_on_both_devices():
    text = (ROOT / "_kernels" / "abi.pxd").read_text()
    cpu = {k: int(v) for k, v in re.findall(r"KERNEL_(\w+) = (\d+)", text) if k != "OK"}
    assert status.CODES == cpu == cuda_abi.STATUS
    assert set(status.MESSAGES) == set(status.CODES.values())


def _conv_instruction(device_backend):
    g = mg.Graph()
    x, w = g.input("x", (2, 4, 9, 7)), g.input("w", (6, 2, 3, 3))
    y = F.conv2d(x, w, stride=2, padding=(1, 0), dilation=(1, 2), groups=2)
    plan = mg.compile([y], device=device_backend, optimize=0)
    (ins,) = [i for i in plan.instructions if i.op == "conv2d"]
    return ins


def test_cuda_and_cpu_conv_blocks_share_the_geometry():
    mg.register_backend("cuda-plan-abi", lambda: CudaBackend(None, name="cuda-plan-abi"))
    try:
        cuda = _conv_instruction("cuda-plan-abi")
    finally:
        unregister_backend("cuda-plan-abi")
    cpu = _conv_instruction("cpu")
    shared = conv.FIELDS.index("path")  # conv.cu reads the fields before it
    assert cuda.ints[:shared] == cpu.ints[:shared]
    got = dict(zip(conv.FIELDS, cuda.ints))
    assert (got["batch"], got["cin"], got["cout"], got["groups"], got["dw"]) == (2, 4, 6, 2, 2)
    assert (got["path"], got["threads"], got["packed"]) == (0, 1, 0)

