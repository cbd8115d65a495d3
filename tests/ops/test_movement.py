"""Movement ops against NumPy: views, strided copies, concat/split, pad, indexing and fills."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.ops.builder import apply

RNG = np.random.default_rng(0)
DTYPES = [np.float32, np.float64, np.int32, np.int64, np.bool_]


def sample(shape, dtype=np.float32):
    x = RNG.standard_normal(shape) * 10
    return (x > 0) if dtype == np.bool_ else x.astype(dtype)


def run(fn, *arrays):
    """Build fn on one input per array, compile, run; returns the list of outputs."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    outs = fn(*xs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return mg.compile(outs).run({f"x{i}": a for i, a in enumerate(arrays)})


def check(fn, ref, *arrays):
    outs, refs = run(fn, *arrays), ref(*arrays)
    refs = list(refs) if isinstance(refs, (list, tuple)) else [refs]
    assert len(outs) == len(refs)
    for out, want in zip(outs, refs):
        want = np.asarray(want)
        assert out.shape == want.shape and out.dtype == want.dtype, (out.shape, want.shape)
        np.testing.assert_array_equal(out, want)


def build_error(fn, shape=(2, 3), dtype=np.float32, match=None):
    g = mg.Graph()
    x = g.input("x", shape, dtype)
    with pytest.raises(mg.OpError, match=match):
        fn(x)


# -- views -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, target", [((2, 3, 4), (4, -1)), ((6,), (1, 6, 1)),
                                           ((2, 0, 3), (-1, 3)), ((), (1, 1)), ((1,), ())])
def test_reshape(dtype, shape, target):
    check(lambda x: F.reshape(x, target), lambda a: a.reshape(target), sample(shape, dtype))


def test_reshape_is_a_view_without_kernel():
    g = mg.Graph()
    x = g.input("x", (2, 6))
    w = g.param("w", np.arange(12, dtype=np.float32))
    y = F.reshape(x, (3, 4)) + F.reshape(w, (3, 4))
    plan = mg.compile([y, F.reshape(x, -1)])
    assert [ins.op for ins in plan.instructions] == ["add"]
    views = [s for s in plan.slots if s.alias is not None]
    assert {plan.slots[s.alias].role for s in views} == {"input", "param"}
    for v in (np.ones((2, 6), np.float32), np.arange(12, dtype=np.float32).reshape(2, 6)):
        out, flat = plan.run({"x": v})
        np.testing.assert_array_equal(out, v.reshape(3, 4) + np.arange(12).reshape(3, 4))
        np.testing.assert_array_equal(flat, v.ravel())
    for s in views:
        assert np.shares_memory(plan.executable().buffers[s.index], plan.executable().buffers[s.alias])


def test_view_of_view_and_of_kernel_output():
    def fn(x):
        y = F.reshape(F.flatten(x * 2), (3, 2))
        return F.expand_dims(y, 0)[0, 1:] + 1
    check(fn, lambda a: (a * 2).ravel().reshape(3, 2)[1:] + 1, sample((2, 3), np.float64))


@pytest.mark.parametrize("start, end", [(0, -1), (1, 2), (-2, -1), (1, 1), (0, 0)])
@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 0, 4)])
def test_flatten(start, end, shape):
    s, st, e = shape, start % 3, end % 3
    want = s[:st] + (int(np.prod(s[st:e + 1])),) + s[e + 1:]
    check(lambda x: F.flatten(x, start, end), lambda a: a.reshape(want), sample(shape))
    check(lambda x: x.flatten(), lambda a: a.reshape(1), sample(()))


@pytest.mark.parametrize("axis", [0, -1, 2, (0, 3), (-1, 1)])
def test_expand_dims(axis):
    check(lambda x: F.expand_dims(x, axis), lambda a: np.expand_dims(a, axis), sample((2, 3)))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2), 2])
def test_squeeze(axis):
    check(lambda x: F.squeeze(x, axis), lambda a: np.squeeze(a, axis), sample((1, 3, 1, 1)))


def test_view_errors():
    build_error(lambda x: F.reshape(x, (4, 2)), match="reshape.*6 elements")
    build_error(lambda x: F.reshape(x, (-1, -1)), match="more than one -1")
    build_error(lambda x: F.reshape(x, (-1, 4)), match="cannot reshape")
    build_error(lambda x: F.reshape(x, (-1, 0)), shape=(0, 3), match="cannot reshape")
    build_error(lambda x: F.reshape(x, (2, 1.5)), match="reshape")
    build_error(lambda x: F.squeeze(x, 1), match="squeeze.*axis 1 of size 3")
    build_error(lambda x: F.squeeze(x, 5), match="squeeze.*out of range")
    build_error(lambda x: F.expand_dims(x, (1, 1)), match="expand_dims.*repeated")
    build_error(lambda x: F.expand_dims(x, 3), match="expand_dims")
    build_error(lambda x: F.flatten(x, 1, 0), match="flatten")
    build_error(lambda x: F.squeeze(x, 0), shape=(), match="squeeze.*out of range for 0-d")


# -- strided copies --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, pattern", [((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)),
                                            ((5, 1, 3), (-1, 1, 0)), ((4, 0, 2), (1, 2, 0)),
                                            ((3, 4), None), ((7,), (0,))])
def test_transpose(dtype, shape, pattern):
    check(lambda x: F.transpose(x, pattern), lambda a: np.transpose(a, pattern),
          sample(shape, dtype))


def test_transpose_inserts_new_axes_and_var_forms():
    a = sample((2, 3, 4), np.int64)
    check(lambda x: F.transpose(x, ("x", 2, "x", 0, 1)),
          lambda a: a.transpose(2, 0, 1)[None, :, None], a)
    check(lambda x: [x.T, x.transpose(1, 0, 2), x.transpose((2, 1, 0))],
          lambda a: [a.T, a.transpose(1, 0, 2), a.transpose(2, 1, 0)], a)
    check(lambda x: F.transpose(x, ("x",)), lambda a: a.reshape(1), sample((), np.float64))
    # eight non-mergeable axes after an 'x' still fit the kernel's dimension limit
    b = sample((2,) * 8)
    perm = (7, 6, 5, 4, 3, 2, 1, 0)
    check(lambda x: F.transpose(x, perm), lambda a: a.transpose(perm), b)


def test_transpose_errors():
    build_error(lambda x: F.transpose(x, (0, 0)), match="transpose.*exactly once")
    build_error(lambda x: F.transpose(x, (0,)), match="transpose")
    build_error(lambda x: F.transpose(x, (0, 2)), match="transpose.*out of range")
    build_error(lambda x: F.transpose(x, (0, "y")), match="transpose")


def test_transpose_over_too_many_dims_fails_at_compile():
    g = mg.Graph()
    x = g.input("x", (2,) * 9)
    y = F.transpose(x, tuple(reversed(range(9))))
    with pytest.raises(mg.OpError, match="transpose.*at most 8"):
        mg.compile([y])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, target", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((), (2, 2)),
                                           ((2, 1, 3), (2, 0, 3)), ((4,), (1, 4))])
def test_broadcast_to(dtype, shape, target):
    check(lambda x: F.broadcast_to(x, target), lambda a: np.broadcast_to(a, target),
          sample(shape, dtype))


def test_broadcast_to_errors():
    build_error(lambda x: F.broadcast_to(x, (2, 4)), match="broadcast_to.*cannot broadcast")
    build_error(lambda x: F.broadcast_to(x, (3,)), match="broadcast_to")
    build_error(lambda x: F.broadcast_to(x, (-2, 3)), match="broadcast_to")


INDICES = [
    (1,), (-1,), (slice(None, None, -1),), (slice(1, None, 2), slice(None, None, -2)),
    (Ellipsis, 0), (None, 1, Ellipsis, None), (slice(5, 1, -1), -2, slice(None)),
    (slice(10, 20),), (0, 0, 0), (Ellipsis,), (slice(-100, 100, 3), None, slice(-1, -5, -1)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index", INDICES)
def test_subscript(dtype, index):
    check(lambda x: x[index], lambda a: a[index], sample((4, 5, 3), dtype))


def test_subscript_edge_cases():
    check(lambda x: [x[()], x[None]], lambda a: [a[()], a[None]], sample((), np.float64))
    check(lambda x: x[1:1, 0], lambda a: a[1:1, 0], sample((3, 2)))
    check(lambda x: x[::-1, :], lambda a: a[::-1, :], sample((0, 2)))
    check(lambda x: x[[2, 0, -1]], lambda a: a[[2, 0, -1]], sample((3, 2)))
    g = mg.Graph()
    x = g.input("x", (3, 4))
    assert x[:, :] is x and x[...] is x  # no node for a full slice


def test_subscript_errors():
    build_error(lambda x: x[2], match="subscript.*index 2 is out of range for axis 0")
    build_error(lambda x: x[0, -4], match="subscript.*out of range for axis 1")
    build_error(lambda x: x[0, 0, 0], match="subscript.*too many indices")
    build_error(lambda x: x[..., ...], match="subscript.*single ellipsis")
    build_error(lambda x: x[::0], match="subscript.*zero")
    build_error(lambda x: x[1.5], match="subscript.*unsupported index")
    build_error(lambda x: x[True], match="subscript.*unsupported index")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_subscript_property(data):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    check(lambda x: x[index], lambda a: a[index], a)


@pytest.mark.parametrize("axis", [0, 1, -1, (0, 1)])
def test_flip_roll_tile_repeat(axis):
    a = sample((3, 4), np.int32)
    check(lambda x: F.flip(x, axis), lambda a: np.flip(a, axis), a)
    shift = (1, -5) if isinstance(axis, tuple) else 2
    check(lambda x: F.roll(x, shift, axis), lambda a: np.roll(a, shift, axis), a)
    check(lambda x: F.roll(x, 5), lambda a: np.roll(a, 5), a)
    check(lambda x: F.tile(x, (2, 1, 3)), lambda a: np.tile(a, (2, 1, 3)), a)
    check(lambda x: F.tile(x, 2), lambda a: np.tile(a, 2), a)
    if not isinstance(axis, tuple):
        check(lambda x: F.repeat(x, 3, axis), lambda a: np.repeat(a, 3, axis), a)
    check(lambda x: F.repeat(x, 2), lambda a: np.repeat(a, 2), a)


# -- concat, stack, split --------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_and_stack(dtype, axis):
    sizes = [(2, 3, 4), (2, 3, 4), (2, 3, 4)]
    arrays = [sample(tuple(0 if i == 1 and d == axis % 3 else s for d, s in enumerate(shape)),
                     dtype) for i, shape in enumerate(sizes)]
    check(lambda *xs: F.concat(xs, axis), lambda *a: np.concatenate(a, axis), *arrays)
    same = [sample((2, 3), dtype) for _ in range(3)]
    check(lambda *xs: F.stack(xs, axis), lambda *a: np.stack(a, axis), *same)


def test_concat_promotes_dtypes():
    a, b = sample((2, 2), np.int32), sample((2, 1), np.float32)
    check(lambda x, y: F.concat([x, y], 1), lambda a, b: np.concatenate([a, b], 1), a, b)
    check(lambda x: F.concat([x]), lambda a: a, a)


def test_concat_errors():
    g = mg.Graph()
    x, y = g.input("x", (2, 3)), g.input("y", (3, 3))
    with pytest.raises(mg.OpError, match="concat.*agree except on axis 1"):
        F.concat([x, y], axis=1)
    with pytest.raises(mg.OpError, match="concat.*out of range"):
        F.concat([x, x], axis=2)
    with pytest.raises(mg.OpError, match="stack.*same shape"):
        F.stack([x, y])
    with pytest.raises(ValueError, match="at least one"):
        F.concat([])
    s = g.input("s", ())
    with pytest.raises(mg.OpError, match="concat.*out of range for 0-d"):
        F.concat([s, s])
    with pytest.raises(mg.OpError, match="split.*out of range for 0-d"):
        F.split(s, 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sections, axis", [(3, 0), (2, -1), (1, 1), ([1, 3], 1), ([2], -1),
                                            ([0, 5], 0), ([-2, 4], 1), ([1, 1], 1)])
def test_split(dtype, sections, axis):
    a = sample((6, 4), dtype)
    outs = run(lambda x: F.split(x, sections, axis), a)
    want = np.split(a, sections, axis)
    assert len(outs) == len(want)
    for o, w in zip(outs, want):
        assert o.shape == w.shape and o.dtype == w.dtype
        np.testing.assert_array_equal(o, w)


def test_split_errors():
    build_error(lambda x: F.split(x, 4, axis=1), match="split.*3 cannot be split into 4")
    build_error(lambda x: F.split(x, 0), match="split")
    build_error(lambda x: F.split(x, 2, axis=2), match="split.*out of range")
    # MegEngine's rule, where numpy.split would give empty parts: points in order, in the axis
    build_error(lambda x: F.split(x, [3, 1], axis=1), match=r"split.*\[3, 1\] must be in order")
    build_error(lambda x: F.split(x, [2, 10], axis=1), match=r"split.*inside the axis of size 3")


# -- pad -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("shape, width", [((3, 4), ((1, 2), (0, 3))), ((4,), ((6, 7),)),
                                          ((2, 3, 4, 5), ((0, 0), (0, 0), (2, 1), (1, 0))),
                                          ((1, 3), ((2, 2), (1, 1))), ((2, 2), ((0, 0), (0, 0)))])
def test_pad(dtype, mode, shape, width):
    a = sample(shape, dtype)
    value = 1 if dtype == np.bool_ else -3
    kw = {"constant_values": value} if mode == "constant" else {}
    check(lambda x: F.pad(x, width, mode=mode, constant_value=value),
          lambda a: np.pad(a, width, mode=mode, **kw), a)


def test_pad_width_forms_and_empty_input():
    a = sample((2, 3), np.float64)
    check(lambda x: F.pad(x, 2), lambda a: np.pad(a, 2), a)
    check(lambda x: F.pad(x, (1, 2), "replicate"), lambda a: np.pad(a, (1, 2), "edge"), a)
    check(lambda x: F.pad(x, ((1, 1),), constant_value=2.5),
          lambda a: np.pad(a, ((1, 1), (0, 0)), constant_values=2.5), a)
    e = sample((0, 3))
    check(lambda x: F.pad(x, ((1, 1), (1, 0)), constant_value=7),
          lambda a: np.pad(a, ((1, 1), (1, 0)), constant_values=7), e)


def test_pad_errors():
    build_error(lambda x: F.pad(x, ((1, -1), (0, 0))), match="pad.*non-negative")
    build_error(lambda x: F.pad(x, ((1, 1),) * 3), match="pad.*2 pairs")
    build_error(lambda x: F.pad(x, 1, mode="symmetric"), match="pad.*mode")
    build_error(lambda x: F.pad(x, 1, mode="reflect"), shape=(0, 2), match="pad.*empty axis")


# -- gather, take, one_hot -------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape, index_shape, axis", [((3, 4), (3, 2), 1), ((3, 4), (5, 4), 0),
                                                      ((2, 3, 4), (2, 3, 4), -1),
                                                      ((2, 3, 4), (1, 6, 4), 1),
                                                      ((1, 4), (3, 2), 1), ((3, 4), (3, 0), 1)])
def test_gather(dtype, index_dtype, shape, index_shape, axis):
    a = sample(shape, dtype)
    n = shape[axis]
    idx = RNG.integers(-n, n, index_shape).astype(index_dtype)
    check(lambda x, i: F.gather(x, axis, i), lambda a, i: np.take_along_axis(a, i, axis), a, idx)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, index_shape, axis", [((5,), (3,), None), ((3, 4), (2, 2), 1),
                                                      ((3, 4), (), 0), ((2, 3, 4), (5,), -2),
                                                      ((3, 4), (0,), None), ((0, 4), (2,), 1)])
def test_take(dtype, shape, index_shape, axis):
    a = sample(shape, dtype)
    n = a.size if axis is None else shape[axis]
    idx = RNG.integers(-n, n, index_shape)
    check(lambda x, i: F.take(x, i, axis), lambda a, i: np.take(a, i, axis), a, idx)
    check(lambda x: F.take(x, idx.tolist(), axis), lambda a: np.take(a, idx, axis), a)


@pytest.mark.parametrize("bad", [4, -5])
def test_index_out_of_range_is_a_kernel_error(bad):
    a, idx = sample((2, 4)), np.array([[0, bad]], np.int64)
    with pytest.raises(mg.KernelError, match="gather.*out of range"):
        run(lambda x, i: F.gather(x, 1, i), a, np.repeat(idx, 2, 0))
    with pytest.raises(mg.KernelError, match="take.*out of range"):
        run(lambda x, i: F.take(x, i, 1), a, idx)
    with pytest.raises(mg.KernelError, match="one_hot.*out of range"):
        run(lambda i: F.one_hot(i, 4), idx.astype(np.int32))


def test_indexing_errors():
    g = mg.Graph()
    x, fi = g.input("x", (2, 3)), g.input("fi", (2, 3))
    i = g.input("i", (2, 1), "int32")
    with pytest.raises(mg.OpError, match="gather.*index dtype float32"):
        F.gather(x, 1, fi)
    with pytest.raises(mg.OpError, match="gather.*number of dims"):
        F.gather(x, 1, g.input("j", (2,), "int32"))
    with pytest.raises(mg.OpError, match="gather.*do not broadcast"):
        F.gather(x, 1, g.input("k", (3, 1), "int32"))
    with pytest.raises(mg.OpError, match="take.*out of range"):
        F.take(x, i, axis=2)
    with pytest.raises(mg.OpError, match="one_hot.*dtype float32"):
        F.one_hot(x, 3)
    with pytest.raises(mg.OpError, match="one_hot.*positive"):
        F.one_hot(i, 0)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape", [(5,), (2, 3), (0,), ()])
def test_one_hot(dtype, shape):
    idx = RNG.integers(0, 4, shape).astype(dtype)
    check(lambda i: F.one_hot(i, 4), lambda i: np.eye(4, dtype=dtype)[i], idx)


# -- fills ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_fills(dtype):
    a = sample((2, 0, 3) if dtype == np.int32 else (3, 4), dtype)
    check(lambda x: [F.zeros_like(x), F.ones_like(x), F.full_like(x, -2)],
          lambda a: [np.zeros_like(a), np.ones_like(a), np.full_like(a, -2)], a)
    g = mg.Graph()
    outs = [F.full((2, 3), 7.5, dtype, graph=g), F.zeros((4,), dtype, graph=g),
            F.ones((), dtype, graph=g)]
    plan = mg.compile(outs)
    assert all(ins.inputs == () for ins in plan.instructions)
    for out, want in zip(plan.run({}), [np.full((2, 3), 7.5).astype(dtype), np.zeros(4, dtype),
                                        np.ones((), dtype)]):
        assert out.dtype == want.dtype
        np.testing.assert_array_equal(out, want)


def test_fill_does_not_depend_on_its_like_input():
    g = mg.Graph()
    x = g.input("x", (2, 3))
    assert F.zeros_like(x).node.inputs == ()


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("args", [(5,), (2, 9, 3), (10, 0, -3), (0, 0), (-1.0, 1.0, 0.25),
                                  (3, 1)])
def test_arange(dtype, args):
    g = mg.Graph()
    (out,) = mg.compile([F.arange(*args, dtype=dtype, graph=g)]).run({})
    want = np.arange(*args, dtype=np.float64).astype(dtype)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("args", [(0, 1, 5), (-3, 7, 11), (2, 2, 1), (1, 0, 0), (0.1, 0.7, 7)])
def test_linspace(dtype, args):
    g = mg.Graph()
    (out,) = mg.compile([F.linspace(*args, dtype=dtype, graph=g)]).run({})
    want = np.linspace(*args).astype(dtype)
    assert out.dtype == dtype and out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-6 if dtype == np.float32 else 1e-13)
    if len(want) > 1:
        assert out[-1] == want[-1]


def test_fill_errors():
    g = mg.Graph()
    with pytest.raises(mg.OpError, match="arange.*step must not be zero"):
        F.arange(0, 5, 0, graph=g)
    with pytest.raises(mg.OpError, match="arange.*output dtype bool"):
        F.arange(5, dtype="bool", graph=g)
    with pytest.raises(mg.OpError, match="linspace.*num"):
        F.linspace(0, 1, -1, graph=g)
    with pytest.raises(mg.OpError, match="fill.*negative dimension"):
        F.full((2, -1), 0, graph=g)
    with pytest.raises(TypeError, match="graph="):
        F.arange(5, graph="g")  # not a graph; without graph= it is an eager Tensor
    assert isinstance(F.arange(5, graph=None), mg.Tensor)


# -- adjoint ops made by gradient rules: slice_backward, pad_backward, index_add, scatter_add ---
ADD_DTYPES = [np.float32, np.float64, np.int32, np.int64]


def check_twice(fn, ref, *arrays):
    """Run one plan on two feeds: an adjoint that does not zero its output would add the first
    run's result into the second."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    plan = mg.compile([fn(*xs)])
    for scale in (1, 3):
        feeds = [(arrays[0] * scale).astype(arrays[0].dtype), *arrays[1:]]
        (out,) = plan.run({f"x{i}": a for i, a in enumerate(feeds)})
        want = ref(*feeds)
        assert out.shape == want.shape and out.dtype == want.dtype, (out.shape, want.shape)
        np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, index", [((4, 5, 3), (slice(1, None, 2), slice(None, None, -2))),
                                          ((6,), (slice(5, 0, -3),)), ((3, 4), (slice(1, 1),)),
                                          ((2, 3, 4), (1, slice(None), slice(-1, 0, -1)))])
def test_slice_backward(dtype, shape, index):
    index = index + (slice(None),) * (len(shape) - len(index))
    index = tuple(i if isinstance(i, slice) else slice(i, i + 1) for i in index)
    attrs = {k: tuple(getattr(i, k[:-1]) for i in index) for k in ("starts", "stops", "steps")}
    g = sample(np.zeros(shape)[index].shape, dtype)

    def ref(a):
        out = np.zeros(shape, dtype)
        out[index] = a
        return out
    check_twice(lambda x: apply("slice_backward", (x,), shape=shape, **attrs), ref, g)


@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("shape, width", [((3, 4), ((1, 2), (0, 3))), ((4,), ((6, 7),)),
                                          ((2, 3, 4, 5), ((0, 0), (0, 0), (2, 1), (1, 0))),
                                          ((1, 3), ((2, 2), (1, 1))), ((2, 2), ((0, 0), (0, 0)))])
def test_pad_backward(dtype, mode, shape, width):
    # pad's adjoint: each padded element adds into the input element np.pad copied it from
    source = np.pad(np.arange(int(np.prod(shape))).reshape(shape), width, mode=mode,
                    **({"constant_values": -1} if mode == "constant" else {}))
    g = sample(source.shape, dtype)

    def ref(a):
        out = np.zeros(int(np.prod(shape)), dtype)
        np.add.at(out, source[source >= 0], a[source >= 0])
        return out.reshape(shape)
    check_twice(lambda x: apply("pad_backward", (x,), pad_width=width, mode=mode), ref, g)


@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("src_shape, index_shape, axis, size",
                         [((3, 6), (6,), 1, 4), ((5, 2), (5,), 0, 3), ((2, 2, 3, 4), (2, 3), -2, 3),
                          ((4, 2), (), 1, 4), ((2, 0), (0,), 1, 3), ((0, 2), (2,), 1, 5)])
def test_index_add(dtype, index_dtype, src_shape, index_shape, axis, size):
    # repeated and negative indices accumulate, as np.add.at
    src = sample(src_shape, dtype)
    idx = RNG.integers(-size, size, index_shape).astype(index_dtype)
    k = len(index_shape)
    nd = len(src_shape) - k + 1
    ax = axis % nd

    def ref(a, i):
        out = np.zeros(src_shape[:ax] + (size,) + src_shape[ax + k:], dtype)
        np.add.at(out, (slice(None),) * ax + (i,), a)
        return out
    check_twice(lambda x, i: apply("index_add", (x, i), axis=axis, size=size), ref, src, idx)


@pytest.mark.parametrize("dtype", ADD_DTYPES)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("shape, index_shape, axis", [((3, 4), (3, 6), 1), ((3, 4), (5, 4), 0),
                                                      ((2, 3, 4), (2, 3, 4), -1),
                                                      ((2, 3, 4), (1, 6, 4), 1),
                                                      ((1, 4), (3, 2), 1), ((3, 4), (3, 0), 1)])
def test_scatter_add(dtype, index_dtype, shape, index_shape, axis):
    # gather's adjoint: also adds over the axes along which gather broadcast its input
    n = shape[axis]
    idx = RNG.integers(-n, n, index_shape).astype(index_dtype)
    where = np.take_along_axis(np.arange(int(np.prod(shape))).reshape(shape), idx, axis)
    src = sample(where.shape, dtype)

    def ref(a, i):
        out = np.zeros(int(np.prod(shape)), dtype)
        np.add.at(out, where.ravel(), a.ravel())
        return out.reshape(shape)
    check_twice(lambda x, i: apply("scatter_add", (x, i), axis=axis, shape=shape), ref, src, idx)


def test_adjoint_op_errors():
    g = mg.Graph()
    x, i = g.input("x", (2, 3)), g.input("i", (3,), "int32")
    with pytest.raises(mg.OpError, match="slice_backward.*not the input's"):
        apply("slice_backward", (x,), shape=(4, 3), starts=(0, 0), stops=(3, 3), steps=(1, 1))
    with pytest.raises(mg.OpError, match="pad_backward.*wider"):
        apply("pad_backward", (x,), pad_width=((1, 2), (0, 0)), mode="edge")
    with pytest.raises(mg.OpError, match="pad_backward.*mode"):
        apply("pad_backward", (x,), pad_width=((0, 0), (1, 1)), mode="symmetric")
    with pytest.raises(mg.OpError, match="index_add.*indices' shape"):
        apply("index_add", (x, i), axis=0, size=4)
    with pytest.raises(mg.OpError, match="index_add.*size"):
        apply("index_add", (x, i), axis=1, size=-1)
    with pytest.raises(mg.OpError, match="index_add.*bool"):
        apply("index_add", (x > 0, i), axis=1, size=2)
    with pytest.raises(mg.OpError, match="scatter_add.*not the source's"):
        apply("scatter_add", (x, g.input("k", (1, 3), "int64")), axis=1, shape=(4, 5))
    ones = sample((2, 3))
    with pytest.raises(mg.KernelError, match="index_add.*out of range"):
        run(lambda x, i: apply("index_add", (x, i), axis=1, size=2), ones, np.arange(3))
    with pytest.raises(mg.KernelError, match="scatter_add.*out of range"):
        run(lambda x, j: apply("scatter_add", (x, j), axis=1, shape=(2, 2)), ones,
            np.array([[0, 1, -3]] * 2))


# -- the seam: what the ops mean apart from the CPU kernels that run them -----------------------
def _imported_modules(module) -> set[str]:
    """Absolute names of every module ``module``'s source imports, inside functions too."""
    import ast
    import inspect

    package = module.__name__.rsplit(".", 1)[0]
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0]
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_movement_ops_import_no_kernel_and_not_their_public_functions():
    from mgegraph.ops import movement, movement_api

    ops, functions = _imported_modules(movement), _imported_modules(movement_api)
    assert not [m for m in ops | functions if m.startswith("mgegraph._kernels")]
    # one way: the public functions build on the ops
    assert "mgegraph.ops.movement" in functions
    assert not {"mgegraph.ops.movement_api", "mgegraph.functional"} & ops


def test_cpu_lowering_checks_the_kernels_pad_modes_are_the_ops(monkeypatch):
    from mgegraph._kernels import movement as K
    from mgegraph._kernels.lowering import movement as lowering
    from mgegraph.backend import KernelTable
    from mgegraph.ops.movement import PAD_MODES

    assert sorted(K.PAD_MODES) == sorted(PAD_MODES)
    monkeypatch.setattr(K, "PAD_MODES", {**K.PAD_MODES, "symmetric": len(K.PAD_MODES)})
    with pytest.raises(ImportError, match="symmetric"):
        lowering.implement(KernelTable("test"))


def test_pad_over_more_dims_than_the_kernel_takes_fails_at_compile():
    # the shape rule accepts it; the CPU kernel's limit (LIMITS["dims"]) is the lowering's
    g = mg.Graph()
    y = F.pad(g.input("x", (2,) * 9), ((1, 0),) * 9)
    with pytest.raises(mg.OpError, match="pad needs 9 dimensions after merging; at most 8"):
        mg.compile([y])


def test_cpu_parameter_blocks_by_the_kernels_field_names():
    from mgegraph._kernels import movement as K

    g = mg.Graph()
    x, i = g.input("x", (2, 5, 3)), g.input("i", (4,), "int64")
    y = F.pad(x, ((0, 0), (1, 1), (0, 0)), mode="reflect")
    plan = mg.compile([F.take(x, i, axis=1), y, F.linspace(0, 1, 5, graph=g)])
    ins = {ins.op: ins for ins in plan.instructions}
    assert dict(zip(K.TAKE_FIELDS, ins["take"].ints)) == {
        "index64": 1, "outer": 2, "axis_length": 5, "row": 3 * 4, "count": 4}
    head = dict(zip(K.PAD_FIELDS, ins["pad"].ints))
    assert head == {"mode": K.PAD_MODES["reflect"], "ndim": 3, "fill_bits": 0}
    assert dict(zip(K.RANGE_FIELDS, ins["linspace"].ints)) == {"count": 5, "end_exact": 1}
    assert dict(zip(K.RANGE_FLOAT_FIELDS, ins["linspace"].floats)) == {
        "start": 0.0, "step": 0.25, "end": 1.0}
