"""compile_module and compile_train_step with named dimensions (dynamic=): any batch size,
bitwise the numbers of fixed-shape plans of each size; and the demo's predictor."""
import io

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import demo, nn, optim
from mgegraph.jit import SymbolicShapeError
from mgegraph.symbolic_plan import SymbolicPlan

RNG = np.random.default_rng(5)
X = RNG.standard_normal((71, 6)).astype(np.float32)  # 71 = 2 batches of 32 and one of 7
Y = (np.arange(71) % 3).astype(np.int32)


def _model_and_adam():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    return model, optim.Adam(model.parameters(), lr=0.01)


@pytest.mark.parametrize("dynamic", [True, {"input0": {0: "batch"}}])
def test_a_predictor_with_a_named_batch_matches_fixed_plans_bitwise(dynamic):
    model, _ = _model_and_adam()
    model.eval()
    predict = mg.compile_module(model, (X[:5],), dynamic=dynamic)
    assert isinstance(predict.plan, SymbolicPlan)
    assert predict.plan.signature() == "input0: f32[batch, 6] -> f32[batch, 3]"
    for n in (1, 71, 1):
        fixed = mg.compile_module(model, (X[:n],))
        np.testing.assert_array_equal(predict(X[:n]), fixed(X[:n]))
    assert predict.plan.specialisations == 2
    assert not isinstance(mg.compile_module(model, (X[:5],)).plan, SymbolicPlan)


def test_compile_module_names_other_axes_and_passes_bounds_and_warm():
    model = nn.Linear(4, 2)
    predict = mg.compile_module(model, (np.ones((3, 5, 4), np.float32),),
                                dynamic={"input0": {0: "batch", 1: "seq"}},
                                warm=[{"batch": 1, "seq": 2}], bounds={"seq": (1, 8)})
    assert predict.plan.signature() == "input0: f32[batch, seq, 4] -> f32[batch, seq, 2]"
    assert [b for b, _ in predict.plan.plans] == [{"batch": 1, "seq": 2}]
    assert predict(np.ones((2, 7, 4), np.float32)).shape == (2, 7, 2)
    with pytest.raises(mg.FeedError, match="seq=9 is outside its bounds 1..8"):
        predict(np.ones((2, 9, 4), np.float32))


def test_dynamic_is_checked_naming_the_function():
    model = nn.Linear(4, 2)
    x = np.ones((3, 4), np.float32)
    refusals = {"batch": r"compile_module\(dynamic=...\): True .* or a dict",
                "x": r"'x' is not a tensor argument here \(those are input0\)",
                2: "input0 has 2 dimensions, so it has no axis 2",
                "b-1": "dimension name 'b-1' is not an identifier"}
    for given, words in refusals.items():
        dynamic = {"batch": "batch", "x": {"x": {0: "batch"}}, 2: {"input0": {2: "batch"}},
                   "b-1": {"input0": {0: "b-1"}}}[given]
        with pytest.raises(mg.GraphError, match=words):
            mg.compile_module(model, (x,), dynamic=dynamic)
    model, opt = _model_and_adam()
    with pytest.raises(mg.GraphError, match=r"compile_train_step\(dynamic=...\): b is 32 in "
                                            r"one argument and 7 in input1"):
        mg.compile_train_step(model, F.cross_entropy, opt, (X[:32], Y[:7]),
                              dynamic={"input0": {0: "b"}, "input1": {0: "b"}})


def _fixed_steps_per_size(epochs, loader):
    """The weights after ``epochs`` over ``loader`` with one fixed-shape step per batch size,
    all updating one model through one optimiser."""
    model, opt = _model_and_adam()
    steps, losses = {}, []
    for _ in range(epochs):
        for x, y in loader:
            if len(x) not in steps:
                steps[len(x)] = mg.compile_train_step(model, F.cross_entropy, opt, (x, y))
            losses.append(steps[len(x)](x, y))
    return model.state_dict(), losses, sorted(steps)


def test_a_last_short_batch_trains_the_same_weights_as_fixed_plans_per_size():
    model, opt = _model_and_adam()
    step = mg.compile_train_step(model, F.cross_entropy, opt, (X[:32], Y[:32]), dynamic=True)
    history = mg.fit(step, mg.DataLoader((X, Y), 32, shuffle=True, seed=1), 2, log=io.StringIO())
    assert isinstance(step.plan, SymbolicPlan)
    assert sorted(b["batch"] for b, _ in step.plan.plans) == [7, 32]  # the short batch ran
    state, losses, sizes = _fixed_steps_per_size(2, mg.DataLoader((X, Y), 32, shuffle=True,
                                                                  seed=1))
    assert sizes == [7, 32]
    assert history == [float(np.mean(losses[:3])), float(np.mean(losses[3:]))]
    got = model.state_dict()
    for name in state:
        np.testing.assert_array_equal(got[name], state[name], err_msg=name)


def test_a_fixed_step_still_skips_the_short_batch():
    model, opt = _model_and_adam()
    step = mg.compile_train_step(model, F.cross_entropy, opt, (X[:32], Y[:32]))
    assert isinstance(step.plan, mg.Plan)
    history = mg.fit(step, mg.DataLoader((X, Y), 32), 1, log=io.StringIO())
    _, losses, _ = _fixed_steps_per_size(1, mg.DataLoader((X, Y), 32, drop_last=True))
    assert history == [float(np.mean(losses))]


def test_the_demos_predictor_names_its_batch_and_takes_one_image():
    rng = np.random.default_rng(0)
    images = rng.random((64, 1, 8, 8), dtype=np.float32)
    labels = (np.arange(64) % 10).astype(np.int32)
    nn.init.manual_seed(0)
    model = demo.cnn()
    _, _, predict = demo.train("cnn", model, (images, labels, images[:20], labels[:20]),
                               1, 3e-3, io.StringIO())
    assert demo.signature(predict.plan) == ("input0: float32[batch, 1, 8, 8] -> "
                                            "output0: float32[batch, 10]")
    one = predict(images[:1])
    assert one.shape == (1, 10)
    np.testing.assert_array_equal(one, mg.compile_module(model, (images[:1],))(images[:1]))


class _RowLoop(nn.Module):
    def forward(self, x):
        return F.stack([x[i] * 2.0 for i in range(x.shape[0])])  # needs the batch's number


def test_a_model_whose_python_needs_the_batch_says_so_naming_its_line():
    x = np.ones((3, 4), np.float32)
    assert mg.compile_module(_RowLoop(), (x,))(x).shape == (3, 4)  # fixed shapes: fine
    with pytest.raises(SymbolicShapeError, match=r"compile_module\(dynamic=...\) needs the "
                                                 r"number of a named dimension \(batch\) at "
                                                 rf"{__file__}:\d+ \(return F.stack"):
        mg.compile_module(_RowLoop(), (x,), dynamic=True)
