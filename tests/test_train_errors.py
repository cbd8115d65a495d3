"""A training step that fails does not count; a fit that runs no step says why."""
import io

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim


def _data(n=8, dim=4):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, dim)).astype(np.float32), rng.integers(0, 3, n).astype(np.int32)


def _step(opt_cls=optim.Adam, batch=4):
    nn.init.manual_seed(0)
    x, y = _data()
    model = nn.Linear(4, 3)
    opt = opt_cls(model.parameters(), lr=0.1)
    return mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(x[:batch], y[:batch])), opt


def test_a_feed_error_leaves_the_step_count_and_scalars_unchanged():
    step, opt = _step()
    x, y = _data()
    step(x[:4], y[:4])
    count, scalars = opt.step_count, opt.scalars.value.copy()
    with pytest.raises(mg.FeedError):
        step(x[:3], y[:3])
    with pytest.raises(mg.FeedError):
        step(x[:4].astype(np.float64), y[:4])
    assert opt.step_count == count
    np.testing.assert_array_equal(opt.scalars.value, scalars)
    step(x[:4], y[:4])
    assert opt.step_count == count + 1


def test_a_kernel_error_leaves_the_step_count_unchanged():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Embedding(5, 3), nn.Flatten())
    opt = optim.Adam(model.parameters(), lr=0.1)
    idx = np.array([[0], [1]], np.int64)
    labels = np.array([0, 2], np.int32)
    step = mg.compile_train_step(model, F.cross_entropy, opt, example_batch=(idx, labels))
    step(idx, labels)
    with pytest.raises(mg.KernelError):
        step(np.array([[0], [99]], np.int64), labels)
    assert opt.step_count == 1


def test_fit_with_every_batch_skipped_raises_naming_the_sizes():
    step, _ = _step(batch=4)
    x, y = _data(n=3)
    loader = mg.DataLoader((x, y), 4, drop_last=True)  # three samples: no batch of 4
    with pytest.raises(mg.FeedError, match="batches of 4.*3 samples"):
        mg.fit(step, loader, epochs=1, log=io.StringIO())
    loader = mg.DataLoader((x, y), 2)  # batches of 2 and 1, the step wants 4
    with pytest.raises(mg.FeedError, match="no step"):
        mg.fit(step, loader, epochs=1, log=io.StringIO())


def test_a_schedule_reaching_a_negative_lr_stops_with_a_project_error():
    step, opt = _step(optim.SGD)
    sched = optim.CosineAnnealingLR(opt, T_max=2, eta_min=0.0)
    sched.eta_min = -1.0  # a schedule that goes below zero
    x, y = _data()
    with pytest.raises(mg.GraphError, match="CosineAnnealingLR.*lr"):
        mg.fit(step, mg.DataLoader((x, y), 4), epochs=1, log=io.StringIO(), scheduler=sched)
    assert opt.lr >= 0
