"""trace as a hostile but realistic user calls it: nested traces, look-alike arguments,
namedtuples, the recording call's bits, traced functions under a tape or a lazy block."""
import collections
import functools

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

RNG = np.random.default_rng(7)


def test_a_traced_function_called_while_another_records_is_inlined():
    inner = mg.jit.trace(lambda x: x * 2)
    outer = mg.jit.trace(lambda x: inner(x) + 1)
    inner(mg.tensor(np.ones(3, np.float32)))  # inner has a plan for outer's input type
    for values in ([10, 20, 30], [1, 2, 3], [-4, 0, 4]):
        got = outer(mg.tensor(np.array(values, np.float32)))
        assert got.numpy().tolist() == [2 * v + 1 for v in values]
    assert len(inner.plans) == 1  # inlining recorded nothing of its own


def test_a_traced_function_under_a_gradient_tape_gives_its_gradient():
    w = nn.Parameter(np.array([1.0, 2.0, 3.0], np.float32))
    forward = mg.jit.trace(lambda x: (x * w * w).sum())
    x = mg.tensor(np.array([4.0, 5.0, 6.0], np.float32))
    forward(x)  # a plan exists: under the tape it must not hide the ops
    gm = mg.GradManager().attach(w)
    with gm:
        gm.backward(forward(x))
    np.testing.assert_array_equal(w.grad.numpy(), 2 * x.numpy() * w.numpy())


@pytest.mark.parametrize("first, second", [(1, True), (2, 2.0), (0.0, -0.0), (1.0, np.float32(1))])
def test_arguments_that_compare_equal_but_differ_in_type_or_sign_record_apart(first, second):
    @mg.jit.trace
    def f(x, k):  # the tensor of k has k's dtype; 1 / +-0 has its sign
        return x / mg.tensor(k) if k == 0 else x * mg.tensor(k)

    x = mg.tensor(np.array([3], np.int32)) if not isinstance(first, float) else \
        mg.tensor(np.array([3.0], np.float32))
    for k in (first, second, first):
        expected = f.function(x, k)
        got = f(x, k)
        assert got.dtype == expected.dtype, k
        np.testing.assert_array_equal(got.numpy(), expected.numpy())
    assert len(f.plans) == 2


def test_a_nan_argument_selects_one_plan():
    f = mg.jit.trace(lambda x, k: x + mg.tensor(k, "float32"))
    x = mg.tensor(np.ones(2, np.float32))
    for _ in range(3):
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert len(f.plans) == 1


def test_tensors_inside_tuples_lists_and_dicts_are_inputs_of_the_plan():
    f = mg.jit.trace(lambda batch, extra: batch[0] * batch[1] + extra["bias"])
    for scale in (1.0, 2.0, 3.0):
        x = mg.tensor(np.full(2, scale, np.float32))
        got = f((x, np.full(2, 10.0, np.float32)), {"bias": mg.tensor(np.ones(2, np.float32))})
        assert got.numpy().tolist() == [10 * scale + 1] * 2
    assert len(f.plans) == 1


def test_the_same_tensor_twice_and_two_tensors_record_apart():
    f = mg.jit.trace(lambda x, y: x - y)
    t = mg.tensor(np.ones(2, np.float32))
    assert f(t, t).numpy().tolist() == [0.0, 0.0]
    a, b = mg.tensor(np.full(2, 5.0, np.float32)), mg.tensor(np.ones(2, np.float32))
    assert f(a, b).numpy().tolist() == [4.0, 4.0]
    assert f((a, b)[0], (a, b)[1]).numpy().tolist() == [4.0, 4.0]


def test_a_traced_backward_adds_to_the_grad_of_each_call():
    # gradient accumulation over micro-batches: the grad a parameter has when the call starts
    # is an input of the plan, not a constant of the recording call
    w = nn.Parameter(np.ones(2, np.float32))
    gm = mg.GradManager().attach(w)

    @mg.jit.trace
    def accumulate(x):
        with gm:
            gm.backward((w * x).sum())

    x = mg.tensor(np.array([1.0, 2.0], np.float32))
    w.grad = mg.tensor(np.full(2, 100.0, np.float32))
    accumulate(x)
    assert w.grad.numpy().tolist() == [101.0, 102.0]
    accumulate(x)
    assert w.grad.numpy().tolist() == [102.0, 104.0]
    w.grad = None  # no grad: another plan, which starts from zero
    accumulate(x)
    accumulate(x)
    assert w.grad.numpy().tolist() == [2.0, 4.0]
    assert sum(len(plans) for plans in accumulate.plans.values()) == 2


def test_a_traced_function_may_return_a_namedtuple():
    Pair = collections.namedtuple("Pair", "total scaled")
    f = mg.jit.trace(lambda x: Pair(x.sum(), x * 2))
    x = mg.tensor(np.arange(3, dtype=np.float32))
    for _ in range(3):
        got = f(x)
        assert type(got) is Pair
        assert float(got.total) == 3.0 and got.scaled.numpy().tolist() == [0, 2, 4]


class ConvBN(nn.Module):
    def __init__(self):
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("case", ["linear", "conv_bn"])
def test_the_recording_call_gives_the_bits_of_the_later_calls(case):
    # passes change the arithmetic: a linear layer of >= 4 rows and >= 32 outputs becomes a
    # packed convolution, batch norm folds into the convolution
    if case == "linear":
        model, x = nn.Linear(64, 48), RNG.standard_normal((8, 64))
    else:
        model, x = ConvBN(), RNG.standard_normal((2, 3, 8, 8))
        model.bn.running_mean.value = RNG.standard_normal(8).astype(np.float32)
        model.bn.running_var.value = RNG.uniform(0.5, 2, 8).astype(np.float32)
        model.eval()
    f = mg.jit.trace(lambda v: model(v))
    x = mg.tensor(x.astype(np.float32))
    calls = [f(x).numpy() for _ in range(3)]
    for later in calls[1:]:
        np.testing.assert_array_equal(calls[0], later)


def test_the_recording_call_of_a_training_step_makes_one_step():
    mg.nn.init.manual_seed(3)
    model = nn.Linear(4, 2)
    opt = mg.optim.Adam(model.parameters(), lr=0.1)
    gm = mg.GradManager().attach(model.parameters())
    start = model.weight.numpy()

    @mg.jit.trace
    def step(x):
        with gm:
            loss = (model(x) ** 2).mean()
            gm.backward(loss)
        opt.step()
        return loss

    x = mg.tensor(RNG.standard_normal((3, 4)).astype(np.float32))
    step(x)
    assert opt.step_count == 1
    # Adam's first step moves every weight by lr (its bias-corrected ratio is +-1)
    np.testing.assert_allclose(np.abs(model.weight.numpy() - start), 0.1, rtol=1e-4)
    assert model.weight.grad is not None and model.weight.grad.shape == (2, 4)


def _sgd_on_ones(n):
    """A parameter of ``n`` ones, SGD at lr 1 over it and a GradManager attached to it."""
    p = nn.Parameter(np.ones(n, np.float32))
    return p, mg.optim.SGD([p], lr=1.0), mg.GradManager().attach(p)


def test_a_recording_call_that_raises_lands_no_state():
    p, opt, gm = _sgd_on_ones(2)

    @mg.jit.trace
    def step(x):
        with gm:
            gm.backward((p * x).sum())
        opt.step()
        raise RuntimeError("after the step")

    with pytest.raises(RuntimeError, match="after the step"):
        step(mg.tensor(np.ones(2, np.float32)))
    assert p.numpy().tolist() == [1.0, 1.0] and opt.step_count == 0
    assert not step.plans


def test_a_traced_step_in_a_lazy_block_leaves_pending_values_as_recorded():
    p, opt, gm = _sgd_on_ones(3)

    @mg.jit.trace
    def step(x):
        with gm:
            gm.backward((p * x).sum())
        opt.step().clear_grad()

    x = mg.tensor(np.full(3, 2.0, np.float32))
    step(x)  # p = -1
    with mg.lazy():
        before = p * 10  # pending: reads p as it is now
        step(x)          # p = -3
        assert before.numpy().tolist() == [-10.0] * 3
    assert p.numpy().tolist() == [-3.0] * 3


def test_compile_refuses_an_eager_tensor_naming_it():
    with pytest.raises(mg.GraphError, match="eager Tensor"):
        mg.compile([mg.tensor(np.ones(2, np.float32))])


def test_an_unhashable_argument_is_named():
    f = mg.jit.trace(lambda x, scales: x * scales["a"])
    with pytest.raises(mg.GraphError, match=r"'scales' \(a dict\) is not"):
        f(mg.tensor(np.ones(2, np.float32)), {"a": 2.0})


def test_a_list_argument_selects_the_plan_by_its_items():
    f = mg.jit.trace(lambda x, sections: F.split(x, sections)[0])
    x = mg.tensor(np.arange(6, dtype=np.float32))
    sections = [2]
    assert f(x, sections).numpy().tolist() == [0.0, 1.0]
    sections[0] = 4  # the same list, changed: another plan
    assert f(x, sections).numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert f(x, [2]).numpy().tolist() == [0.0, 1.0] and len(f.plans) == 2


def test_a_partial_traces_and_is_named_in_errors():
    f = mg.jit.trace(functools.partial(F.normalize, axis=1))
    x = np.array([[3.0, 4.0]], np.float32)
    np.testing.assert_allclose(f(mg.tensor(x)).numpy(), [[0.6, 0.8]], rtol=1e-6)
    with pytest.raises(mg.GraphError, match=r"trace: functools\.partial\(.*not been called"):
        mg.jit.trace(functools.partial(F.normalize, axis=0)).plan  # noqa: B018


def test_grad_of_an_eager_loss_says_to_use_a_grad_manager():
    p = nn.Parameter(np.ones(3, np.float32))
    with pytest.raises(mg.GraphError, match="GradManager"):
        mg.grad((p * 2).sum(), [p])


def test_a_traced_function_that_sets_a_parameters_value_is_refused():
    p = nn.Parameter(np.ones(2, np.float32))

    @mg.jit.trace
    def f(x):
        p.value = x.numpy()  # a Python-side write: the plan could not replay it
        return p * 2

    with pytest.warns(mg.jit.TraceWarning), \
            pytest.raises(mg.GraphError, match=r"writes Parameter.* from Python"):
        f(mg.tensor(np.full(2, 3.0, np.float32)))
    assert p.numpy().tolist() == [1.0, 1.0]


def test_a_traced_forward_leaves_the_parameters_grads_alone():
    layer = nn.Linear(2, 2)
    f = mg.jit.trace(lambda x: layer(x))
    x = mg.tensor(np.ones((1, 2), np.float32))
    f(x)
    grad = layer.weight.grad = mg.tensor(np.ones((2, 2), np.float32))  # from some backward
    f(x)
    assert layer.weight.grad is grad and len(f.plans) == 1
