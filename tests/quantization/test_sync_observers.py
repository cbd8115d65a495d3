"""MegEngine's names in mgegraph.quantization that MegEngine's own tests import: the observers
for distributed training, which in one process are the plain ones."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.quantization as Q


@pytest.mark.parametrize("sync, plain", [
    (Q.SyncMinMaxObserver, Q.MinMaxObserver),
    (Q.SyncExponentialMovingAverageObserver, Q.ExponentialMovingAverageObserver),
])
def test_a_sync_observer_in_one_process_is_the_plain_one(sync, plain):
    a, b = sync(), plain()
    for seed in range(3):
        x = mg.tensor(np.random.default_rng(seed).normal(size=(4, 5)).astype(np.float32))
        a(x), b(x)
    assert a.get_qparams() == b.get_qparams()
    assert Q.observer.SyncMinMaxObserver is Q.SyncMinMaxObserver
