"""mg.lazy() as a hostile but realistic user meets it: pending values against later writes,
blocks that raise, runs that fail."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn


def _sgd_step(p, opt, grad=1.0):
    p.grad = mg.tensor(np.full(p.shape, grad, np.float32))
    opt.step().clear_grad()


def test_a_pending_value_reads_the_parameters_of_its_recording():
    p = nn.Parameter(np.ones(3, np.float32))
    opt = mg.optim.SGD([p], lr=1.0)
    with mg.lazy():
        y = p * 2
    _sgd_step(p, opt)  # p = 0, after the block
    assert y.numpy().tolist() == [2.0] * 3
    with mg.lazy():
        z = p + 1
        p.value = np.full(3, 5.0, np.float32)  # a write that is no op of the block
        assert z.numpy().tolist() == [1.0] * 3
    assert p.numpy().tolist() == [5.0] * 3


def test_a_block_that_raises_after_a_step_leaves_nothing_pending():
    p = nn.Parameter(np.ones(3, np.float32))
    opt = mg.optim.SGD([p], lr=1.0)
    with pytest.raises(RuntimeError, match="late"), mg.lazy():
        y = p * 2
        _sgd_step(p, opt)
        raise RuntimeError("late")
    assert p.numpy().tolist() == [1.0] * 3
    with pytest.raises(mg.GraphError, match="block that recorded this value raised RuntimeError"):
        y.numpy()
    assert p.numpy().tolist() == [1.0] * 3  # reading a value of the block ran no step
    with mg.lazy():
        assert (p * 3).numpy().tolist() == [3.0] * 3


def test_one_failed_op_fails_only_the_values_that_depend_on_it():
    x = mg.tensor(np.array([2, 3], np.int32))
    exponent = mg.tensor(np.array([-1, 1], np.int32))  # integers to negative powers: refused
    with mg.lazy():
        fine = x + 1
        bad = x ** exponent
        also_bad = bad * 2
        with pytest.raises(mg.KernelError, match="negative integer powers"):
            also_bad.numpy()
        assert fine.numpy().tolist() == [3, 4]
        with pytest.raises(mg.GraphError, match="could not be computed: KernelError"):
            bad.numpy()
        assert (x * 2).numpy().tolist() == [4, 6]
    with mg.lazy():  # a later block uses a value of the failed run that did compute
        assert (fine * 10).numpy().tolist() == [30, 40]
        with pytest.raises(mg.GraphError, match="could not be computed"):
            (also_bad + 1).numpy()


def test_the_state_updates_of_a_failed_run_never_run_again():
    p = nn.Parameter(np.ones(2, np.float32))
    opt = mg.optim.SGD([p], lr=1.0)
    x = mg.tensor(np.array([2, 3], np.int32))
    with mg.lazy():
        _sgd_step(p, opt)
        fine = x * 2
        bad = x ** mg.tensor(np.array([-1, 1], np.int32))
        with pytest.raises(mg.KernelError):
            bad.numpy()
        after_failure = p.numpy()
        assert fine.numpy().tolist() == [4, 6]
        assert (fine + 1).numpy().tolist() == [5, 7]
    assert p.numpy().tolist() == after_failure.tolist()


def test_a_compiled_train_step_in_a_lazy_block_leaves_pending_values_as_recorded():
    model = nn.Linear(2, 2)
    opt = mg.optim.SGD(model.parameters(), lr=0.5)
    batch = (np.ones((4, 2), np.float32), np.array([0, 1, 0, 1]))
    step = mg.compile_train_step(model, F.cross_entropy, opt, batch)
    before = model.weight.numpy()
    with mg.lazy():
        doubled = model.weight * 2  # pending: reads the weights in place
        step(*batch)
        assert not np.array_equal(model.weight.numpy(), before)
        np.testing.assert_array_equal(doubled.numpy(), before * 2)


def test_a_plans_run_that_writes_a_weight_runs_the_pending_work_first():
    # the pending p * 2 reads p in place: it must see p as it was recorded, before the plan's
    # assign (it saw the plan's write: [4, 4, 4])
    p = nn.Parameter(np.ones(3, np.float32))
    g = mg.Graph()
    w = g.bind(p)
    g.assign(w, w + 1.0)
    plan = mg.compile([w * 1.0])
    with mg.lazy():
        y = p * 2.0
        plan.run({})
        assert y.numpy().tolist() == [2.0, 2.0, 2.0]
    assert p.numpy().tolist() == [2.0, 2.0, 2.0]
    with mg.lazy():  # a block whose own plan assigns (an optimiser step) runs it once
        p.grad = mg.tensor(np.ones(3, np.float32))
        mg.optim.SGD([p], lr=1.0).step()
        z = p * 1.0  # as in any plan, a read after the step sees the value from before it
        assert z.numpy().tolist() == [2.0, 2.0, 2.0]
    assert p.numpy().tolist() == [1.0, 1.0, 1.0]
