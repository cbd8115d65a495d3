"""nn modules in graph mode on a named batch: every layer builds on ``("batch", ...)`` and one
symbolic plan gives bitwise what plans built with the numbers give, training-mode state updates
(BatchNorm's running statistics, Dropout's step) included; ResNet-18 and MobileNet v2 serve
batch 1 and 3 from one plan."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import mobilenet_v2, resnet18  # the benchmarks' models

IMAGE = (3, 6, 6)
# name -> (make the module, the input's shape without the batch, train mode)
MODULES = {
    "sequential": (lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(),
                                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 5)),
                   IMAGE, False),
    "conv_stride_groups": (lambda: nn.Conv2d(3, 6, 3, stride=2, padding=1, groups=3), IMAGE,
                           False),
    "batch_norm_eval": (lambda: nn.BatchNorm2d(3), IMAGE, False),
    "batch_norm_train": (lambda: nn.BatchNorm2d(3), IMAGE, True),
    "avg_pool": (lambda: nn.AvgPool2d(3, stride=2, padding=1), IMAGE, False),
    "adaptive_avg_pool": (lambda: nn.AdaptiveAvgPool2d((2, 1)), IMAGE, False),
    "flatten_linear": (lambda: nn.Sequential(nn.Flatten(), nn.Linear(108, 4), nn.GELU()),
                       IMAGE, False),
    "layer_norm": (lambda: nn.LayerNorm((6,)), IMAGE, False),
    "dropout": (lambda: nn.Dropout(0.3, seed=2), IMAGE, True),
    "activations": (lambda: nn.Sequential(nn.Sigmoid(), nn.Tanh()), IMAGE, False),
}


def _forward(model, shape, batch):
    g = mg.Graph()
    return [model(g.input("x", (batch, *shape)))]


def _twins(make, train):
    """Two modules with the same weights, one for the symbolic plan and one for the fixed
    plans, where a training step updates state; else one module serves both."""
    if not train:
        nn.init.manual_seed(5)
        model = make().eval()
        return model, model
    models = []
    for _ in range(2):
        nn.init.manual_seed(5)
        models.append(make().train())
    return models


def _state(model) -> list:
    return list(model.state_dict().values())


def _check(make, shape, train, batches):
    named, fixed = _twins(make, train)
    outputs = _forward(named, shape, "batch")
    assert outputs[0].type.symbolic, outputs[0].type
    plan = mg.compile(outputs)
    for batch in batches:
        x = np.random.default_rng(batch).standard_normal((batch, *shape), np.float32)
        got = plan.run({"x": x})
        want = mg.compile(_forward(fixed, shape, batch)).run({"x": x})
        np.testing.assert_array_equal(got[0], want[0])
        for a, b in zip(_state(named), _state(fixed)):  # running statistics, step counters
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_on_a_named_batch_is_bitwise_the_fixed_one(name):
    make, shape, train = MODULES[name]
    _check(make, shape, train, (2, 5, 1))


def test_embedding_and_losses_on_a_named_batch():
    nn.init.manual_seed(1)
    table = nn.Embedding(7, 3)

    def build(batch):
        g = mg.Graph()
        ids = g.input("ids", (batch, 2), "int64")
        target = g.input("t", (batch, 2, 3))
        h = table(ids)
        return [nn.mse_loss(h, target), nn.l1_loss(h, target, reduction="sum"),
                F.cross_entropy(F.flatten(h, 1), ids[:, 0])]

    plan = mg.compile(build("batch"))
    for batch in (1, 4):
        rng = np.random.default_rng(batch)
        feeds = {"ids": rng.integers(0, 3, (batch, 2)),
                 "t": rng.standard_normal((batch, 2, 3)).astype(np.float32)}
        for a, b in zip(plan.run(feeds), mg.compile(build(batch)).run(feeds)):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("make", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_benchmark_models_serve_batch_1_and_3_from_one_plan(make):
    _check(lambda: make(classes=10), (3, 16, 16), False, (1, 3))
