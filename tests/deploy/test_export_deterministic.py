"""compile(tune="deterministic") and the C export: the model-file tests' float models saved, then
exported from the file (mg.deploy.export_c(path), which loads it so) and run by model_run, give
runtime.load(path, tune="deterministic")'s outputs bit for bit (issue 39's check); the mode
moves off the BLAS every instruction that has another way, and its plans give the same bits on
one and two threads."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, runtime
from mgegraph.backend import get_backend
from mgegraph.deploy import export_c

from .cbuild import cc, run_on_random_floats

sys.path.insert(0, str(Path(__file__).parent.parent / "io"))
import test_epilogue_model_file as epilogue_file  # noqa: E402  the model-file tests' models
import test_model_file as model_file  # noqa: E402
import test_pool_model_file as pool_file  # noqa: E402
import test_symbolic_model_file as symbolic_file  # noqa: E402

CPU = get_backend("cpu")


class UNet(nn.Module):
    """A small U-Net of the ops the C runtime has (no bilinear resize): two levels down by max
    pooling, back up by the transposed convolutions at stride 2, 3x3 padded with an output
    padding and 2x2, each joined to its skip; group norm, odd channels."""

    def __init__(self):
        super().__init__()
        self.enc1, self.gn1 = nn.Conv2d(3, 6, 3, padding=1), nn.GroupNorm(3, 6)
        self.enc2, self.gn2 = nn.Conv2d(6, 10, 3, padding=1), nn.GroupNorm(2, 10)
        self.bottom = nn.Conv2d(10, 14, 3, padding=1)
        self.up2 = nn.ConvTranspose2d(14, 9, 3, stride=2, padding=1, output_padding=1)
        self.dec2 = nn.Conv2d(19, 7, 3, padding=1)
        self.up1 = nn.ConvTranspose2d(7, 5, 2, stride=2)
        self.head = nn.Conv2d(11, 2, 1)

    def forward(self, x):
        skip1 = F.relu(self.gn1(self.enc1(x)))
        skip2 = F.relu(self.gn2(self.enc2(F.max_pool2d(skip1, 2))))
        deep = F.relu(self.bottom(F.max_pool2d(skip2, 2)))
        up = F.relu(self.dec2(F.concat([skip2, self.up2(deep)], axis=1)))
        return self.head(F.concat([skip1, self.up1(up)], axis=1))


def unet_plan():
    model = UNet()
    model.eval()
    return mg.compile_module(model, (np.ones((2, 3, 20, 12), np.float32),)).plan


MODELS = {"mlp": model_file.mlp_plan, "cnn-batch-norm": model_file.small_cnn_plan,
          "mobilenet-head": epilogue_file.mobilenet_head,
          "mobilenet-head-unfused": lambda: epilogue_file.mobilenet_head(False),
          "pooling": pool_file.pooling_plan, "digits": symbolic_file.digits_plan,
          "symbolic-mlp": symbolic_file.mlp_plan, "unet": unet_plan}


def assert_same_bits(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert np.array_equal(np.ascontiguousarray(g).view(np.uint8),
                              np.ascontiguousarray(w).view(np.uint8))


def off_the_blas(plan) -> list[str]:
    """The instructions of ``plan`` on a way that is not deterministic, "op (way)"."""
    return [f"{i.op} ({i.choice.path})" for i in plan.instructions
            if i.choice is not None and not CPU.deterministic(i.op, i.choice)]


@pytest.mark.parametrize("name", MODELS)
def test_a_saved_model_exported_from_its_file_is_bitwise_the_runtimes(tmp_path, name):
    cc()
    path = tmp_path / "model.mgm"
    mg.save(MODELS[name](), path)
    predictor = runtime.load(path, tune="deterministic")
    plan = predictor.plan
    bindings = {n: 3 for n in getattr(plan, "names", ())} or None
    exported = export_c(path, tmp_path / "out", bindings=bindings)
    assert off_the_blas(exported.plan) == []
    feeds, got = run_on_random_floats(exported)
    assert_same_bits(got, predictor.run(feeds))


def _conv_graph(shape, weight, **attrs):
    rng = np.random.default_rng(5)
    g = mg.Graph()
    x = g.input("x", shape, "float32")
    w = g.param("w", rng.standard_normal(weight, dtype=np.float32) * 0.1)
    return x, F.conv2d(x, w, **attrs)


@pytest.mark.parametrize("shape, weight, attrs", [
    ((2, 3, 20, 20), (8, 3, 5, 5), {"padding": 2}),          # the rules: im2col
    ((2, 32, 9, 9), (64, 32, 1, 1), {"stride": 2}),          # the rules: im2col's GEMM
], ids=["5x5", "1x1-stride-2"])
def test_the_mode_moves_a_convolution_off_the_blas(shape, weight, attrs):
    x, y = _conv_graph(shape, weight, **attrs)
    ruled = mg.compile([y], tune="rules")
    assert off_the_blas(ruled), "the rules run this convolution through the BLAS"
    plan = mg.compile([y], tune="deterministic")
    assert off_the_blas(plan) == []
    chosen = [i.choice for i in plan.instructions if i.choice is not None]
    assert chosen and {c.how for c in chosen} <= {"deterministic", "rules"}
    feeds = {"x": np.random.default_rng(6).standard_normal(shape, dtype=np.float32)}
    want = np.asarray(ruled.run(feeds)[0], np.float64)
    np.testing.assert_allclose(plan.run(feeds)[0], want, rtol=1e-5, atol=1e-5)


def test_a_deterministic_plan_gives_the_same_bits_on_one_and_two_threads():
    x, y = _conv_graph((2, 16, 23, 21), (40, 16, 3, 3), padding=1)
    h = F.relu(y)
    feeds = {"x": np.random.default_rng(7).standard_normal(x.shape, dtype=np.float32)}
    outs = []
    for threads in (1, 2):
        with threadpool_limits(threads, user_api="openmp"):
            plan = mg.compile([F.sum(h, axis=(2, 3)), h], tune="deterministic")
            outs.append(plan.run(feeds))
    assert_same_bits(*outs)


def test_the_mode_is_named_among_the_others():
    x, y = _conv_graph((1, 3, 8, 8), (4, 3, 3, 3))
    with pytest.raises(ValueError, match="'deterministic'"):
        mg.compile([y], tune="exact")


def test_the_mode_measures_and_stores_nothing(tmp_path, monkeypatch):
    store = tmp_path / "choices.json"
    monkeypatch.setenv("MGEGRAPH_TUNE_CACHE", str(store))
    x, y = _conv_graph((2, 3, 20, 20), (8, 3, 5, 5), padding=2)
    mg.compile([y], tune="deterministic")
    assert not store.exists()
