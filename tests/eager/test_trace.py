"""trace and lazy: eager code run as plans, with the same numbers as eager mode and as
compile_train_step."""
import warnings

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn

RNG = np.random.default_rng(2)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.3, seed=1)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(self.drop(F.flatten(h, 1)))


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


MODELS = {"mlp": (_mlp, (8, 6)), "cnn": (CNN, (6, 1, 8, 8))}


def _train(make, shape, mode, steps=4):
    """Losses and final state of ``steps`` Adam steps in ``mode``: eager, trace, lazy or plan."""
    mg.nn.init.manual_seed(0)
    model = make()
    xv = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    yv = np.arange(shape[0]) % 3
    opt = mg.optim.Adam(model.parameters(), lr=0.01)
    if mode == "plan":
        step = mg.compile_train_step(model, F.cross_entropy, opt, (xv, yv))
        return [step(xv, yv) for _ in range(steps)], model.state_dict()
    gm = mg.GradManager().attach(model.parameters())

    def train_step(x, y):
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    if mode == "trace":
        train_step = mg.jit.trace(train_step)
    losses = []
    for _ in range(steps):
        if mode == "lazy":
            with mg.lazy():
                losses.append(float(train_step(mg.tensor(xv), mg.tensor(yv))))
        else:
            losses.append(float(train_step(mg.tensor(xv), mg.tensor(yv))))
    return losses, model.state_dict()


@pytest.mark.parametrize("model", sorted(MODELS))
def test_eager_trace_lazy_and_compile_train_step_agree_bitwise(model):
    make, shape = MODELS[model]
    runs = {mode: _train(make, shape, mode) for mode in ("eager", "trace", "lazy", "plan")}
    losses, state = runs["plan"]
    for mode, (other_losses, other_state) in runs.items():
        assert other_losses == losses, mode
        for name in state:
            np.testing.assert_array_equal(other_state[name], state[name], err_msg=f"{mode} {name}")
    assert losses[-1] < losses[0]


def test_a_data_dependent_loop_runs_eagerly_and_trains():
    # halve the input until its norm is small: the number of layers applied depends on the data
    lin = nn.Linear(4, 4)
    opt = mg.optim.SGD(lin.parameters(), lr=0.05)
    gm = mg.GradManager().attach(lin.parameters())
    x = mg.tensor(RNG.standard_normal((2, 4)).astype(np.float32) * 8)
    losses, depths = [], []
    for _ in range(5):
        with gm:
            h, depth = x, 0
            while float(F.sum(h * h)) > 1.0 and depth < 10:
                h = F.tanh(lin(h)) * 0.5
                depth += 1
            loss = F.sum((h - 0.1) ** 2)
            gm.backward(loss)
        opt.step().clear_grad()
        losses.append(float(loss))
        depths.append(depth)
    assert all(d >= 1 for d in depths) and losses[-1] < losses[0]


def test_trace_caches_a_plan_per_signature_and_exposes_it():
    calls = []

    @mg.trace
    def f(x, scale):
        calls.append(1)
        return F.relu(x) * scale

    a = mg.tensor(np.array([-1.0, 2.0], np.float32))
    assert f(a, 2.0).numpy().tolist() == [0.0, 4.0]
    assert f(mg.tensor(np.array([3.0, -4.0], np.float32)), 2.0).numpy().tolist() == [6.0, 0.0]
    assert len(calls) == 1  # the second call ran the plan, not the Python
    f(mg.tensor(np.ones(3, np.float32)), 2.0)  # a new shape records again
    f(a, 3.0)  # so does a new non-tensor argument
    assert len(calls) == 3 and len(f.plans) == 3
    assert isinstance(f.plan, mg.Plan) and "arena" in f.plan.memory_report()
    dot = f.plan.to_dot()
    assert dot.startswith("digraph plan {") and "relu" in dot and 'label="input x' in dot
    assert "<svg" in mg.planner.memory_svg(f.plan)
    f.clear_cache()
    f(a, 2.0)
    assert len(calls) == 4


def test_trace_options_reach_compile():
    @mg.jit.trace(optimize=0, memory="no_reuse")
    def f(x):
        return F.exp(x) + 1.0

    f(mg.tensor(np.zeros(4, np.float32)))
    g = mg.Graph()
    want = mg.compile([F.exp(g.input("x", (4,))) + 1.0], optimize=0, memory="no_reuse")
    assert f.plan.memory.options == want.memory.options and f.plan.passes == ()


def test_a_branch_on_a_value_warns_once_naming_the_line():
    @mg.trace
    def f(x):
        if float(x.sum()) > 0:
            return x * 2.0
        return x * -1.0

    with pytest.warns(mg.jit.TraceWarning, match=r"test_trace.py:\d+"):
        f(mg.tensor(np.ones(2, np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # the plan keeps the branch of the recording call
        assert f(mg.tensor(-np.ones(2, np.float32))).numpy().tolist() == [-2.0, -2.0]


def test_a_traced_function_must_return_tensors():
    @mg.trace
    def f(x):
        return "done"

    with pytest.raises(mg.GraphError, match="must return Tensors.*got str"):
        f(mg.tensor([1.0]))


def test_structured_outputs_and_numpy_arguments():
    @mg.trace
    def f(x, y):
        return {"sum": x + y, "pair": (x * y, None)}

    for _ in range(2):
        out = f(np.array([1.0, 2.0], np.float32), mg.tensor(np.array([3.0, 4.0], np.float32)))
        assert out["sum"].numpy().tolist() == [4.0, 6.0]
        assert out["pair"][0].numpy().tolist() == [3.0, 8.0] and out["pair"][1] is None


def test_capture_as_const_freezes_the_weights():
    lin = nn.Linear(3, 2)

    @mg.trace(capture_as_const=True)
    def predict(x):
        return lin(x)

    x = mg.tensor(np.ones((1, 3), np.float32))
    before = predict(x).numpy()
    lin.weight.value = lin.weight.numpy() + 1.0
    np.testing.assert_array_equal(predict(x).numpy(), before)  # the plan holds the old weights
    assert not predict.plan.shared  # no param is read in place


def test_symbolic_false_runs_eagerly_every_time():
    calls = []

    @mg.trace(symbolic=False)
    def f(x):
        calls.append(1)
        return x + 1.0

    f(mg.tensor([1.0]))
    f(mg.tensor([1.0]))
    assert len(calls) == 2


def test_a_traced_step_holds_no_more_memory_than_eager():
    xv = RNG.standard_normal((32, 64)).astype(np.float32)
    yv = RNG.integers(0, 10, 32)
    peaks = {}
    for mode in ("eager", "trace"):
        model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
        opt = mg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        gm = mg.GradManager().attach(model.parameters())

        def step(x, y, gm=gm, model=model, opt=opt):
            with gm:
                loss = F.cross_entropy(model(x), y)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        if mode == "trace":
            step = mg.trace(step)
        x, y = mg.tensor(xv), mg.tensor(yv)
        step(x, y)
        base = mg.memory_stats(reset_peak=True).current
        step(x, y)
        peaks[mode] = mg.memory_stats().peak - base
        if mode == "trace":
            plan = step.plan
    assert plan.arena_bytes + plan.persistent_bytes <= peaks["eager"] + sum(
        p.value.nbytes for p in model.parameters()) * 2
    assert plan.arena_bytes < peaks["eager"]


def test_lazy_runs_pending_ops_as_one_plan_when_a_value_is_needed():
    a = RNG.standard_normal((4, 5)).astype(np.float32)
    w = RNG.standard_normal((5, 3)).astype(np.float32)
    eager = F.relu(mg.tensor(a) @ mg.tensor(w) + 1.0) * 2.0
    with mg.lazy():
        y = F.relu(mg.tensor(a) @ mg.tensor(w) + 1.0) * 2.0
        assert y._value is None and y.shape == (4, 3)  # nothing ran; the type is known
        z = y.sum()
        total = float(z)  # runs y and z in one plan
        assert y._value is not None
        after = (y + 1.0).numpy()  # a new pending graph reads y in place
    np.testing.assert_allclose(y.numpy(), eager.numpy(), rtol=1e-6)
    assert total == pytest.approx(float(eager.sum()), rel=1e-6)
    np.testing.assert_array_equal(after, y.numpy() + np.float32(1.0))


def test_lazy_state_updates_land_when_the_block_ends():
    p = nn.Parameter(np.ones(3, np.float32))
    opt = mg.optim.SGD([p], lr=0.5)
    gm = mg.GradManager().attach(p)
    with mg.lazy():
        with gm:
            gm.backward(F.sum(p * 2.0))
        opt.step().clear_grad()
    assert p.numpy().tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(mg.GraphError, match="do not nest"), mg.lazy(), mg.lazy():
        pass


def test_switching_modules_to_eval_records_again_instead_of_rerunning_training():
    drop, bn = nn.Dropout(0.5, seed=1), nn.BatchNorm2d(2)

    @mg.trace
    def f(x):
        return bn(drop(x))

    x = mg.tensor(RNG.standard_normal((4, 2, 3, 3)).astype(np.float32))
    f(x)
    f(x)
    drop.eval()
    bn.eval()
    np.testing.assert_array_equal(f(x).numpy(), bn(drop(x)).numpy())
    assert len(f.plans) == 1 and len(next(iter(f.plans.values()))) == 2
    drop.train()
    bn.train()
    f(x)  # the training recording again: nothing new
    assert len(next(iter(f.plans.values()))) == 2
