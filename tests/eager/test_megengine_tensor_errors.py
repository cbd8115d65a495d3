"""MegEngine's refusals of a Tensor's constructor and operators: a Tensor made from a Tensor
keeps its dtype and device, and None is no operand."""
import operator

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import Tensor
from mgegraph.ir.errors import GraphError


@pytest.mark.parametrize("op", [operator.add, operator.mul, operator.truediv, operator.lt,
                                operator.pow])
@pytest.mark.parametrize("swapped", [False, True])
def test_none_is_no_operand(op, swapped):
    a = mg.tensor([1.0, 2.0])
    with pytest.raises(TypeError) as info:
        op(None, a) if swapped else op(a, None)
    assert str(info.value) == "the operand is None and is not supported."  # MegEngine's words
    assert isinstance(info.value, GraphError)
    assert "test_megengine_tensor_errors.py" in info.value.__notes__[0]


def test_none_is_no_operand_of_a_function_either():
    with pytest.raises(TypeError, match="the operand is None"):
        F.maximum(mg.tensor(1.0), None)
    with pytest.raises(TypeError, match="the operand is None"):
        F.exp(None)


def test_a_tensor_from_a_tensor_keeps_its_dtype():
    x = Tensor(np.arange(3), dtype="int32")
    assert Tensor(x).dtype == np.int32 and Tensor(x, dtype="int32").dtype == np.int32
    with pytest.raises(RuntimeError, match=r"dtype=float32\): a Tensor made from a Tensor keeps "
                                           r"its dtype; cast with .astype \(at .*errors.py"):
        Tensor(x, dtype=np.float32)


def test_a_tensor_from_a_tensor_keeps_its_device_and_not_its_name():
    x = Tensor(0.0, device="xpu0:1", name="w")
    moved = x.to("xpu0:2")
    assert Tensor(x).name == "" and Tensor(x, name="v").name == "v"
    assert Tensor(moved).device == moved.device == "xpu0:2"
    assert Tensor(moved, device="xpu0:2").device == "xpu0:2"
    with pytest.raises(RuntimeError, match=r"on xpu0:2, device='xpu0:1'\): .* keeps its device"):
        Tensor(moved, device="xpu0:1")


def test_a_tensor_of_the_default_device_may_be_named_for_any_cpu():
    x = mg.tensor([1.0, 2.0])
    y = Tensor(x, device="cpu0")
    assert y.device == "cpu0"
    np.testing.assert_array_equal(y.numpy(), x.numpy())
