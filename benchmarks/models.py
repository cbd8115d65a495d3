"""The graphs of the planner-suite (shared/BENCHMARKS.md), each compiled to a Plan and not run.

Every builder takes ``memory`` (passed to ``mg.compile``) and returns the compiled plan, so that
the suite can plan one graph under several memory options. ``SUITE`` names them all; ``CHAIN``
names those whose values form a single chain (each value read only by the next op).

>>> plan = SUITE["resnet18-infer b1 224"]()
>>> plan.arena_bytes / plan.lower_bound_bytes
"""
from __future__ import annotations

import numpy as np

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from workloads import (MLP_LAYERS, OP_CHAIN, SEED, _batch, _convnet, _mlp_module, mlp_weights,
                       op_chain_graph)


# -- ResNet-18 -------------------------------------------------------------------------------------
def _conv_bn(cin, cout, kernel, stride=1):
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2,
                                   bias=False), nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    """conv3x3-bn-relu-conv3x3-bn plus the input (1x1 conv-bn when the shape changes), relu."""

    def __init__(self, cin, cout, stride):
        self.body = nn.Sequential(_conv_bn(cin, cout, 3, stride), nn.ReLU(),
                                  _conv_bn(cout, cout, 3))
        self.skip = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x):
        return F.relu(self.body(x) + (x if self.skip is None else self.skip(x)))


def resnet18(classes=1000) -> nn.Module:
    """ResNet-18: stem conv7x7/2-bn-relu, maxpool 3x3/2, 4 stages x 2 basic blocks, avg pool, fc.

    >>> resnet18().eval()
    """
    layers = [_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1)]
    cin = 64
    for i, width in enumerate((64, 128, 256, 512)):
        for b in range(2):
            layers.append(BasicBlock(cin, width, 2 if i and not b else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


# -- ResNet-50 (bottlenecks) -----------------------------------------------------------------------
class Bottleneck(nn.Module):
    """1x1 reduce, 3x3, 1x1 expand (x4), each conv-bn, relu between; the input added."""

    def __init__(self, cin, width, stride):
        self.body = nn.Sequential(_conv_bn(cin, width, 1), nn.ReLU(),
                                  _conv_bn(width, width, 3, stride), nn.ReLU(),
                                  _conv_bn(width, width * 4, 1))
        self.skip = _conv_bn(cin, width * 4, 1, stride) if stride != 1 or cin != width * 4 \
            else None

    def forward(self, x):
        return F.relu(self.body(x) + (x if self.skip is None else self.skip(x)))


def resnet50_step():
    """One SGD step of a ResNet-50-shaped network (3-4-6-3 bottlenecks) on 2x3x32x32: ~2,000
    graph nodes (the plan viewer's large graph)."""
    nn.init.manual_seed(0)
    layers, cin = [_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, padding=1)], 64
    for i, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            layers.append(Bottleneck(cin, width, 2 if i and not b else 1))
            cin = width * 4
    model = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))
    x, y = np.zeros((2, 3, 32, 32), np.float32), np.zeros(2, np.int64)
    return mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.01),
                                 example_batch=(x, y))


# -- MobileNet v2 ----------------------------------------------------------------------------------
class ReLU6(nn.Module):
    def forward(self, x):
        return F.relu6(x)


def _conv_bn_relu6(cin, cout, kernel, stride=1, groups=1):
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2,
                                   groups=groups, bias=False), nn.BatchNorm2d(cout), ReLU6())


class InvertedResidual(nn.Module):
    """1x1 expand conv-bn-relu6, 3x3 depthwise conv-bn-relu6 (groups = channels), 1x1 project
    conv-bn; the input is added when the stride is 1 and the channels stay the same."""

    def __init__(self, cin, cout, stride, expand):
        hidden = cin * expand
        layers = [_conv_bn_relu6(cin, hidden, 1)] if expand != 1 else []
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   _conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.body(x) if self.residual else self.body(x)


# (expansion t, channels c, blocks n, first stride s) of the width-1.0 network
MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(classes=1000) -> nn.Module:
    """MobileNet v2, width 1.0: stem conv3x3/2 to 32, 17 inverted residual blocks, conv1x1 to
    1280, avg pool, fc. Depthwise convolutions are real grouped convs (groups = channels).

    >>> mobilenet_v2().eval()
    """
    layers, cin = [_conv_bn_relu6(3, 32, 3, 2)], 32
    for t, c, n, s in MOBILENET_V2:
        for b in range(n):
            layers.append(InvertedResidual(cin, c, s if b == 0 else 1, t))
            cin = c
    layers += [_conv_bn_relu6(cin, 1280, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
               nn.Linear(1280, classes)]
    return nn.Sequential(*layers)


def _inference(make, shape, memory):
    nn.init.manual_seed(SEED)
    model = make().eval()
    x = np.random.default_rng(SEED + 1).standard_normal(shape, dtype=np.float32)
    return mg.compile_module(model, example_inputs=(x,), memory=memory).plan


def resnet_infer(batch=1, size=224, memory=None) -> mg.Plan:
    """resnet-infer, eval mode: ``resnet_infer(8, 64)`` is the 8x3x64x64 variant."""
    return _inference(resnet18, (batch, 3, size, size), memory)


def mobilenet_infer(size=224, memory=None) -> mg.Plan:
    """MobileNet v2 inference at 1x3xSIZExSIZE, eval mode."""
    return _inference(mobilenet_v2, (1, 3, size, size), memory)


# -- the workloads of benchmarks/workloads.py, compiled only ------------------------------------
def op_chain(ops=OP_CHAIN, memory=None) -> mg.Plan:
    """op-overhead: ``ops`` elementwise ops (add, mul, relu cycled) on 16 elements."""
    return mg.compile([op_chain_graph(ops)], memory=memory)


def mlp_infer(batch, memory=None) -> mg.Plan:
    """mlp-infer: 784-1024-1024-10 with ReLU, forward only."""
    g = mg.Graph()
    h = g.input("x", (batch, MLP_LAYERS[0]), "float32")
    weights = mlp_weights()
    for k, (w, b) in enumerate(weights):
        h = h @ g.param(f"w{k}", w) + g.param(f"b{k}", b)
        if k < len(weights) - 1:
            h = F.relu(h)
    return mg.compile([h], memory=memory)


def fusion_chain_graph(n=4_194_304) -> mg.Var:
    """fusion-chain: ``relu(x * a + b) * c - tanh(x) / (1 + exp(-x))`` on n-element inputs
    named x, a, b, c."""
    g = mg.Graph()
    x, a, b, c = (g.input(name, (n,), "float32") for name in "xabc")
    return F.relu(x * a + b) * c - F.tanh(x) / (1.0 + F.exp(-x))


def fusion_chain(n=4_194_304, memory=None) -> mg.Plan:
    return mg.compile([fusion_chain_graph(n)], memory=memory)


def train_step(model, batch_shape, memory=None) -> mg.Plan:
    """The plan of one SGD (lr 0.01) cross-entropy training step of ``model``."""
    x, y = _batch(batch_shape)
    opt = optim.SGD(model.parameters(), lr=0.01)
    return mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x, y),
                                 memory=memory).plan


def mlp_train(memory=None) -> mg.Plan:
    """mlp-train: one SGD step of the 784-1024-1024-10 MLP at batch 128."""
    nn.init.manual_seed(SEED)
    return train_step(_mlp_module(), (128, MLP_LAYERS[0]), memory)


def convnet_train(memory=None) -> mg.Plan:
    """convnet-train: one SGD step of the small CNN at 32x3x32x32."""
    nn.init.manual_seed(SEED)
    return train_step(_convnet(), (32, 3, 32, 32), memory)


def deep_mlp(depth, width, inputs, classes) -> nn.Module:
    """``depth`` hidden Linear-ReLU layers of ``width`` between ``inputs`` and ``classes``."""
    layers, cin = [], inputs
    for _ in range(depth):
        layers += [nn.Linear(cin, width), nn.ReLU()]
        cin = width
    return nn.Sequential(*layers, nn.Linear(cin, classes))


def deep_mlp_train(depth=64, width=512, batch=512, memory=None) -> mg.Plan:
    """deep-mlp-remat without remat: 64 hidden layers of 512, batch 512, input 512, 10 classes."""
    nn.init.manual_seed(SEED)
    return train_step(deep_mlp(depth, width, width, 10), (batch, width), memory)


SUITE = {
    "mlp-infer b1": lambda memory=None: mlp_infer(1, memory),
    "mlp-infer b128": lambda memory=None: mlp_infer(128, memory),
    "op-overhead": op_chain,
    "fusion-chain": fusion_chain,
    "mlp-train": mlp_train,
    "convnet-train": convnet_train,
    "deep-mlp-remat": deep_mlp_train,
    "resnet18-infer b1 224": resnet_infer,
    "resnet18-infer b8 64": lambda memory=None: resnet_infer(8, 64, memory),
    "mobilenet-v2-infer 224": mobilenet_infer,
}
CHAIN = ("mlp-infer b1", "mlp-infer b128", "op-overhead", "fusion-chain")
