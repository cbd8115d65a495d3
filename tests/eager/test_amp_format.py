"""MegEngine's amp module properties (``amp.enabled = True``) and its NHWC format tags:
``Tensor.format``, ``amp.convert_tensor_format`` and ``amp.convert_module_format``."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import amp, nn
from mgegraph.ir.errors import GraphError

RNG = np.random.default_rng(5)


def test_setting_amp_enabled_switches_autocast_on_this_thread():
    assert not amp.enabled
    amp.enabled = True
    try:
        amp.low_prec_dtype = "bfloat16"
        assert amp.enabled and amp.low_prec_dtype == "bfloat16"
        x = mg.tensor(RNG.standard_normal((2, 3)).astype(np.float32))
        assert F.matmul(x, x.T).dtype == np.dtype("bfloat16")
    finally:
        amp.low_prec_dtype = "float16"
        amp.enabled = False
    assert F.matmul(x, x.T).dtype == np.float32
    with pytest.raises(ValueError, match="low_prec_dtype must be float16 or bfloat16"):
        amp.low_prec_dtype = "float32"


def test_tensor_format_is_a_tag_kept_by_copies():
    x = mg.tensor(RNG.random((2, 4, 3, 5)).astype(np.float32))
    assert x.format == "default"
    x.format = "nhwc"
    for other in (copy.copy(x), copy.deepcopy(x), mg.Tensor(x.numpy(), format="nhwc")):
        assert other.format == "nhwc" and other.shape == (2, 4, 3, 5)
        np.testing.assert_array_equal(other.numpy(), x.numpy())
    assert (x * 2).format == "default"  # ops do not carry the tag
    with pytest.raises(GraphError, match="Tensor.format must be one of"):
        x.format = "NHWC"


def test_convert_tensor_format_tags_images_only_and_changes_no_value():
    image = mg.tensor(RNG.random((1, 3, 4, 4)).astype(np.float32))
    same = amp.convert_tensor_format(image)
    assert same is image and image.format == "nhwc"
    fresh = mg.tensor(RNG.random((1, 3, 4, 4)).astype(np.float32))
    tagged = amp.convert_tensor_format(fresh, inplace=False)
    assert tagged is not fresh and tagged.format == "nhwc" and fresh.format == "default"
    vector = mg.tensor(np.ones(3, np.float32))
    assert amp.convert_tensor_format(vector).format == "default"


def test_convert_module_format_tags_its_image_shaped_state_and_keeps_it_through_loading():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Linear(4, 2))
    x = RNG.random((2, 3, 5, 5)).astype(np.float32)
    model.eval()
    before = model[1](model[0](mg.tensor(x))).numpy()
    state = model.state_dict()
    copied = amp.convert_module_format(model, inplace=False)
    assert all(t.format == "default" for _, t in model.named_tensors())
    formats = {name: t.format for name, t in copied.named_tensors()}
    assert formats == {"0.weight": "nhwc", "0.bias": "default", "1.weight": "nhwc",
                       "1.bias": "nhwc", "1.running_mean": "nhwc", "1.running_var": "nhwc",
                       "2.weight": "default", "2.bias": "default"}
    copied.load_state_dict(state)
    assert {name: t.format for name, t in copied.named_tensors()} == formats
    np.testing.assert_array_equal(copied[1](copied[0](mg.tensor(x))).numpy(), before)


def test_a_deep_copied_module_owns_its_weights():
    model = nn.Linear(3, 2)
    twin = copy.deepcopy(model)
    assert twin.weight is not model.weight and twin.weight.trainable
    twin.weight.value = np.zeros((2, 3), np.float32)
    assert model.weight.numpy().any()
