"""Gradient rules of the movement ops against central finite differences (mgegraph.testing).

Inputs stay small (gradcheck runs the graph twice per input element). Functions such as flip,
roll, tile, repeat and subscript are compositions of the ops, so checking them checks the rules
of slice, split, concat, broadcast_to and reshape in the combinations users meet.
"""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply, apply_multi
from mgegraph.testing import gradcheck

RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape)


def const(x, value):
    return x.graph.const(np.asarray(value))


def hvp(f):
    """A Hessian-vector product of sum(f(x)): gradchecking it checks the gradient of a
    gradient, so the rules used by the first backward pass need rules of their own."""
    return lambda x, v: F.sum(mg.grad(F.sum(f(x)), [x])[0] * v)


# -- views and strided copies ----------------------------------------------------------------
@pytest.mark.parametrize("shape, fn", [
    ((2, 3, 4), lambda x: F.reshape(x, (4, -1))), ((), lambda x: F.reshape(x, (1, 1))),
    ((1, 5), lambda x: F.reshape(x, (5,))), ((2, 3, 2), lambda x: F.flatten(x, 1)),
    ((3, 1, 2), lambda x: F.squeeze(x)), ((3, 2), lambda x: F.expand_dims(x, (0, -1))),
])
def test_reshape_family(shape, fn):
    gradcheck(lambda x: fn(x) * fn(x), rand(*shape))


@pytest.mark.parametrize("shape, pattern", [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (-1, 1, 0)),
                                            ((3, 4), None), ((2, 3, 1), ("x", 2, 0, "x", 1)),
                                            ((), ("x",)), ((4,), (0, "x"))])
def test_transpose(shape, pattern):
    gradcheck(lambda x: F.transpose(x, pattern), rand(*shape))


@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((), (2, 2)),
                                           ((2, 1, 3), (2, 4, 3)), ((4,), (1, 4)),
                                           ((2, 3), (2, 3))])
def test_broadcast_to(shape, target):
    gradcheck(lambda x: F.broadcast_to(x, target), rand(*shape))


@pytest.mark.parametrize("index", [
    (1,), (-1,), (slice(None, None, -1),), (slice(1, None, 2), slice(None, None, -2)),
    (Ellipsis, 0), (None, 1, Ellipsis, None), (slice(3, 0, -2), -2, slice(None)),
    (slice(10, 20),), (slice(-100, 100, 3), None, slice(-1, -4, -1)), (slice(2, 2),),
])
def test_subscript(index):
    gradcheck(lambda x: x[index], rand(4, 3, 3))


def test_slice_of_a_slice_adds_nothing_outside_the_window():
    g = mg.Graph()
    x = g.input("x", (3, 4), "float64")
    (dx,) = mg.grad(F.sum(x[::2, 1:] * x[1:, :0:-1]), [x])
    a = rand(3, 4)
    (got,) = mg.compile([dx]).run({"x": a})
    want = np.zeros((3, 4))
    want[::2, 1:] += a[1:, :0:-1]
    want[1:, :0:-1] += a[::2, 1:]
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize("axis", [0, -1, (0, 1)])
def test_flip_roll_tile_repeat(axis):
    a = rand(3, 4)
    gradcheck(lambda x: F.flip(x, axis), a)
    gradcheck(lambda x: F.roll(x, (1, -5) if isinstance(axis, tuple) else 2, axis), a)
    gradcheck(lambda x: F.tile(x, (2, 1, 2)), a)
    gradcheck(lambda x: F.repeat(x, 3, None if isinstance(axis, tuple) else axis), a)


# -- concat, stack, split --------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_and_stack(axis):
    shapes = [(2, 3, 2), (2, 3, 2), (2, 3, 2)]
    arrays = [rand(*(1 + i if d == axis % 3 else s for d, s in enumerate(shape)))
              for i, shape in enumerate(shapes)]
    gradcheck(lambda *xs: F.concat(xs, axis), *arrays)
    gradcheck(lambda a, b: F.stack([a, b * b], axis), rand(2, 3), rand(2, 3))


def test_concat_with_an_empty_part_and_an_integer_part():
    # the int32 part is cast by concat's promotion, and the cast's rule stops its gradient
    gradcheck(lambda a, b, c: F.concat([a, b, c], 1), rand(2, 0), rand(2, 3),
              np.arange(4, dtype=np.int32).reshape(2, 2))


@pytest.mark.parametrize("sections, axis, used", [(3, 0, (0, 1, 2)), (2, -1, (1,)),
                                                  ([1, 3], 1, (0, 2)), ([0, 5], 0, (1,))])
def test_split(sections, axis, used):
    # unused parts get no output gradient: the rule fills their place with zeros
    def fn(x):
        parts = F.split(x, sections, axis)
        return F.concat([F.flatten(parts[k] * (k + 1)) for k in used])
    gradcheck(fn, rand(6, 4))


@pytest.mark.parametrize("ranges", [((2, 4), (0, 2)), ((0, 1), (3, 4)), ((0, 3), (1, 4)),
                                    ((1, 3), (1, 3), (0, 0))])
def test_split_ranges_out_of_order_with_gaps_and_overlaps(ranges):
    def fn(x):
        parts = apply_multi("split", (x,), axis=1, ranges=ranges)
        return F.concat([p * (k + 1) for k, p in enumerate(parts)], 1)
    gradcheck(fn, rand(3, 4))


# -- pad -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("shape, width", [((3, 4), ((1, 2), (0, 3))), ((4,), ((6, 7),)),
                                          ((2, 2, 3), ((0, 0), (2, 1), (1, 0))),
                                          ((1, 3), ((2, 2), (1, 1))), ((2, 2), 0)])
def test_pad(mode, shape, width):
    # edge and reflect read border elements many times (and a size-1 axis only its element)
    gradcheck(lambda x: F.pad(x, width, mode=mode, constant_value=1.5), rand(*shape))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_backward(mode):
    gradcheck(lambda g: apply("pad_backward", (g,), pad_width=((2, 1), (3, 2)), mode=mode),
              rand(5, 7))


# -- gather, take and their adjoints -----------------------------------------------------------
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape, index, axis", [
    ((3, 4), [[0, 0, 3], [1, -1, 1], [2, 2, 2]], 1), ((3, 4), [[0, 1, 2, 0], [2, 2, 2, 2]], 0),
    ((1, 4), [[3, 0], [3, 3], [1, 1]], 1),           # x broadcast along axis 0: rows add up
    ((3, 4), [[1], [0], [-1]], -1), ((2, 3, 2), [[[0], [2], [2], [-1]]], 1),
])
def test_gather(index_dtype, shape, index, axis):
    index = np.asarray(index, index_dtype)
    index = index.reshape(index.shape + (1,) * (len(shape) - index.ndim))
    gradcheck(lambda x, i: F.gather(x, axis, i), rand(*shape), index)


@pytest.mark.parametrize("shape, index, axis", [((5,), [1, 1, -1, 4, 1], None),
                                                ((3, 4), [[0, -1], [1, 1]], 1), ((3, 4), 2, 0),
                                                ((2, 3, 2), [2, 0, 2, 2], -2),
                                                ((3, 2), [], None)])
def test_take(shape, index, axis):
    gradcheck(lambda x: F.take(x, index, axis), rand(*shape))
    if axis == 0:  # x[int array] is take along axis 0
        gradcheck(lambda x: x[np.asarray(index, np.int32)], rand(*shape))


def test_repeated_indices_accumulate():
    g = mg.Graph()
    x = g.input("x", (4,), "float64")
    i = g.input("i", (2, 1), "int64")
    loss = F.sum(F.take(x, [1, 1, 3, 1])) + F.sum(F.gather(F.reshape(x, (4, 1)), 0, i))
    (dx,) = mg.compile(mg.grad(loss, [x])).run({"x": rand(4), "i": np.array([[2], [2]])})
    np.testing.assert_array_equal(dx, [0.0, 3.0, 2.0, 1.0])


def test_scatter_add_and_index_add():
    idx = np.array([[0, 2, 2], [1, 1, -1]])
    gradcheck(lambda s, i: apply("scatter_add", (s, i), axis=1, shape=(2, 4)), rand(2, 3), idx)
    gradcheck(lambda s, i: apply("index_add", (s, i), axis=0, size=3), rand(2, 3, 2), idx)


def test_indices_get_no_gradient():
    g = mg.Graph()
    x, i = g.input("x", (3, 4), "float64"), g.input("i", (3, 2), "int64")
    y = F.gather(x, 1, i) + F.take(x, i, 1)[:, 0]
    for node in (y.node.inputs[0].node, F.take(x, i, 1).node):
        assert node.op.grad(node, (F.ones_like(node.outputs[0]),))[1] is None
    with pytest.raises(mg.GraphError, match="not differentiable"):
        mg.grad(F.sum(y), [i])
    one_hot = F.one_hot(i, 4).node
    assert one_hot.op.grad(one_hot, (None,)) == (None,)
    fill = F.zeros_like(x).node
    assert fill.op.grad(fill, (x,)) == ()


def test_fills_and_one_hot_in_a_loss():
    def fn(x, labels):
        rows = F.astype(F.one_hot(labels, 4), "float64")
        ramp = F.reshape(F.arange(4, dtype="float64", graph=x.graph), (1, 4))
        return x * rows + x * ramp + F.full_like(x, 2.0) + F.linspace(0, 1, 4, "float64",
                                                                     graph=x.graph)
    gradcheck(fn, rand(3, 4), np.array([0, 3, 1], np.int32))


# -- second order ------------------------------------------------------------------------------
@pytest.mark.parametrize("f", [
    lambda x: F.take(x, [2, 0, 2, -1], 1) ** 3,
    lambda x: F.gather(x, 0, const(x, [[0, 1, 1], [1, 1, 0]])) ** 3,
    lambda x: F.pad(x, ((1, 2), (2, 1)), mode="reflect") ** 3,
    lambda x: F.pad(x, ((0, 1), (2, 0)), mode="edge") ** 3,
    lambda x: x[::-1, 1::2] ** 3 + F.transpose(x, (1, 0))[::2, :1] ** 3,
    lambda x: F.concat(F.split(x, [1], 1)[::-1], 1) ** 3 * F.broadcast_to(x[:1], (2, 3)),
])
def test_hessian_vector_products(f):
    gradcheck(hvp(f), rand(2, 3), rand(2, 3), rtol=1e-4, atol=1e-6)
