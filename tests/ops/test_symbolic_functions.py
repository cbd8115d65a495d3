"""The public functions on a named batch: one symbolic plan run at several batch sizes gives
bitwise what a plan of the same graph built with the numbers gives, gradients included."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ir.dims import Dim
from mgegraph.ir.errors import FeedError, OpError

SHAPE = (4, 6)  # the input is (batch, 4, 6)


def _w(x):
    return x.graph.const(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6))


# name -> f(x), x of shape (batch, 4, 6) float32; each keeps or uses the batch
FUNCTIONS = {
    "reshape_minus_one": lambda x: F.reshape(x, (x.shape[0], -1)),
    "flatten": lambda x: F.flatten(x),
    "flatten_1": lambda x: F.flatten(x, 1),
    "expand_squeeze": lambda x: F.squeeze(F.expand_dims(x, (0, 2)), 0),
    "transpose": lambda x: F.transpose(x, (2, 0, 1)),
    "broadcast_to": lambda x: F.broadcast_to(x[:, :1], x.shape),
    "concat_batch": lambda x: F.concat([x, x * 2.0], axis=0),
    "concat_other": lambda x: F.concat([x, x[:, :2]], axis=1),
    "stack": lambda x: F.stack([x, -x], axis=1),
    "split_equal": lambda x: F.split(F.concat([x, x], 0), 2, axis=0)[1],
    "split_fixed_axis": lambda x: F.split(x, [1, 3], axis=1)[1],
    "split_points": lambda x: F.split(x, [1, -1], axis=0)[1] + F.split(x, [1], axis=0)[0],
    "pad": lambda x: F.pad(x, ((1, 2), (0, 1), (2, 0)), mode="reflect"),
    "pad_edge": lambda x: F.pad(x, ((0, 1), (0, 0), (1, 1)), mode="edge"),
    "drop_first": lambda x: x[1:],
    "drop_last_cols": lambda x: x[:, 1:],
    "negative_start": lambda x: x[-1:, :, ::2],
    "reversed": lambda x: x[::-1],
    "every_other": lambda x: x[::2, 1],
    "last_row": lambda x: x[-1],
    "flip": lambda x: F.flip(x, 0),
    "tile": lambda x: F.tile(x, (2, 1, 1)),
    "repeat": lambda x: F.repeat(x, 2, axis=0),
    "roll_fixed_axis": lambda x: F.roll(x, 2, axis=2),
    "take": lambda x: F.take(x, np.array([3, 0, 3]), axis=1),
    "take_flat": lambda x: F.take(x, np.array([5, 1])),
    "gather": lambda x: F.gather(x, 2, F.argmax(x, axis=2, keepdims=True)),
    "one_hot": lambda x: F.one_hot(F.argmax(x, axis=1), 6) * 1.5,
    "zeros_named": lambda x: x + F.zeros((x.shape[0], 4, 6), graph=x.graph),
    "ones_like": lambda x: x * F.ones_like(x),
    "full_named": lambda x: F.full((x.shape[0], 1, 1), 0.5, graph=x.graph) * x,
    "arange_named": lambda x: x * F.reshape(F.arange(x.shape[0], graph=x.graph), (-1, 1, 1)),
    "matmul": lambda x: x @ F.transpose(_w(x), (1, 0)),
    "matmul_batched": lambda x: F.matmul(x, F.transpose(x, (0, 2, 1))),
    "linear": lambda x: F.linear(x, _w(x)[:3]),
    "sum": lambda x: F.sum(x, axis=(0, 2)),
    "mean_batch": lambda x: F.mean(x, axis=0),
    "mean_all": lambda x: F.mean(x),
    "var_batch": lambda x: F.var(x, axis=(0, 1), keepdims=True),
    "max_min": lambda x: F.max(x, axis=0) - F.min(x, axis=2, keepdims=True),
    "prod": lambda x: F.prod(x * 0.5 + 1.0, axis=0),
    "softmax": lambda x: F.softmax(x, axis=-1),
    "log_softmax_batch": lambda x: F.log_softmax(x, axis=0),
    "layer_norm": lambda x: F.layer_norm(x, (6,)),
    "batch_norm_train": lambda x: F.batch_norm(x, training=True),
    "dropout": lambda x: F.dropout(x, 0.5, seed=1),
    "conv_pool": lambda x: F.max_pool2d(F.conv2d(F.expand_dims(x, 1), np.ones(
        (2, 1, 3, 3), np.float32), padding=1), 2),
    "avg_pool": lambda x: F.avg_pool2d(F.expand_dims(x, 1), 2, stride=1),
    "adaptive": lambda x: F.adaptive_avg_pool2d(F.expand_dims(x, 1), (2, 2))
    + F.adaptive_max_pool2d(F.expand_dims(x, 1), 2),
    "mse": lambda x: F.nn.mse_loss(x, x * 0.5),
    "l1_none": lambda x: F.nn.l1_loss(x, 0.0, reduction="none"),
    "bce": lambda x: F.nn.binary_cross_entropy_with_logits(x, F.sigmoid(x)),
    "cross_entropy": lambda x: F.cross_entropy(x[:, :, 0], F.argmax(x[:, :, 1], axis=1)),
    "nll": lambda x: F.nn.nll_loss(F.log_softmax(x[:, :, 1], 1), F.argmax(x[:, :, 0], axis=1)),
}
FUNCTIONS |= {  # resampling
    "interpolate": lambda x: F.vision.interpolate(F.expand_dims(x, 1), scale_factor=1.5,
                                                  mode="bicubic"),
    "pixel_shuffle": lambda x: F.pixel_unshuffle(F.pixel_shuffle(F.expand_dims(x, 1), 1), 2),
    "pad_wrap": lambda x: F.pad(x, ((0, 0), (1, 2), (3, 1)), mode="wrap"),
}
BATCHES = (1, 3, 5)


def _build(fn, batch, grads: bool):
    g = mg.Graph()
    x = g.input("x", (batch, *SHAPE))
    y = fn(x)
    outputs = [y]
    if grads and y.dtype.kind == "f":
        outputs += mg.grad(F.sum(y * y), [x])
    return outputs


def _feed(batch):
    return {"x": np.random.default_rng(batch).standard_normal((batch, *SHAPE), np.float32)}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_on_a_named_batch_is_bitwise_the_fixed_one(name):
    fn = FUNCTIONS[name]
    outputs = _build(fn, "batch", grads=True)
    assert any(v.type.symbolic for v in outputs), [str(v.type) for v in outputs]
    plan = mg.compile(outputs)
    compared = 0
    for batch in BATCHES:
        try:
            got = plan.run(_feed(batch))
        except FeedError:  # a fact this batch breaks (x[1:-1] needs 2 rows)
            continue
        fixed = _build(fn, batch, grads=True)
        want = mg.compile(fixed).run(_feed(batch))
        assert [a.shape for a in got] == [a.shape for a in want]
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        compared += 1
    assert compared >= 2, plan.constraints


def test_a_name_as_text_is_the_named_dimension():
    g = mg.Graph()
    x = g.input("x", ("batch", *SHAPE))
    assert F.reshape(x, ("batch", -1)).type == F.reshape(x, (x.shape[0], 24)).type
    assert F.zeros(("batch", 2), graph=g).shape == (Dim("batch"), 2)
    assert F.full("batch", 1.0, graph=g).shape == (Dim("batch"),)


@pytest.mark.parametrize("call", [
    lambda: F.zeros(("batch", 3)),
    lambda: F.arange(Dim("n")),
    lambda: F.reshape(F.ones((2, 3)), ("batch", 3)),
    lambda: F.broadcast_to(F.ones((1, 3)), ("batch", 3)),
])
def test_eager_tensors_refuse_named_sizes(call):
    with pytest.raises(OpError, match="an eager tensor's sizes are numbers") as caught:
        call()
    assert "test_symbolic_functions.py" in str(caught.value)


def test_stacking_two_names_records_that_they_agree():
    g = mg.Graph()
    x, y = g.input("x", ("batch", 4)), g.input("y", ("n", 4))
    assert str(F.stack([x, y], axis=1).type) == "f32[batch, 2, 4]"
    assert [str(c) for c in g.constraints] == ["batch == n"]
    plan = mg.compile([F.stack([x, y], axis=1) * 1.0])
    with pytest.raises(FeedError, match="batch == n"):
        plan.run({"x": np.ones((2, 4), np.float32), "y": np.ones((3, 4), np.float32)})


def test_linspace_of_a_named_count():
    g = mg.Graph()
    x = g.input("x", ("batch",))
    plan = mg.compile([x * F.linspace(0.0, 1.0, x.shape[0], graph=g)])
    for batch in (1, 4):
        want = np.linspace(0.0, 1.0, batch, dtype=np.float32)
        np.testing.assert_array_equal(plan.run({"x": np.ones(batch, np.float32)})[0], want)


def test_slicing_past_a_named_size_is_a_feed_error_naming_the_fact():
    g = mg.Graph()
    x = g.input("x", ("batch", 3))
    plan = mg.compile([x[-2:] * 2.0])
    assert plan.run({"x": np.ones((4, 3), np.float32)})[0].shape == (2, 3)
    with pytest.raises(FeedError, match="batch - 2 >= 0"):
        plan.run({"x": np.ones((1, 3), np.float32)})


@pytest.mark.parametrize("call, why", [
    (lambda x: F.split(x, 2, axis=0), "not known to be a multiple of 2"),
    (lambda x: F.split(x, [3, 1], axis=0), "splitting"),
    (lambda x: F.roll(x, 1, axis=0), "rolling axis 0 of named size batch"),
    (lambda x: F.reshape(x, (-1, 5)), "not known to be a multiple of 5"),
    (lambda x: F.squeeze(x, 0), "cannot squeeze axis 0 of size batch"),
])
def test_functions_that_cannot_take_a_name_say_why(call, why):
    g = mg.Graph()
    x = g.input("x", ("batch", *SHAPE))
    with pytest.raises(OpError, match=why) as caught:
        call(x)
    assert "test_symbolic_functions.py" in str(caught.value)


def test_fixed_shapes_make_the_same_nodes_as_before():
    """A fill's count stays a Python float where the shapes are numbers: no new nodes."""
    g = mg.Graph()
    x = g.input("x", (3, *SHAPE))
    mg.grad(F.mean(x) + F.var(x, axis=0).sum(), [x])
    ops = [n.op.name for n in g.nodes]
    assert ops.count("fill") == 1 and "cast" not in ops  # the seed; the counts are consts
    g2 = mg.Graph()
    x2 = g2.input("x", ("batch", *SHAPE))
    mg.grad(F.mean(x2) + F.var(x2, axis=0).sum(), [x2])
    counts = [n.attr["value"] for n in g2.nodes if n.op.name == "fill" and n.attr["shape"] == ()]
    assert Dim("batch") in counts and 24 * Dim("batch") in counts
