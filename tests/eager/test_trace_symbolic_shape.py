"""trace(symbolic_shape=...): one recording for every batch size, bitwise the fixed-shape
traces' numbers, and clear errors where the Python needs a number."""
import inspect

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.eager.dispatch import MODE
from mgegraph.ir.dims import Dim, UndecidedDimError
from mgegraph.jit import SymbolicShapeError
from mgegraph.symbolic_plan import SymbolicPlan

SIZES = (32, 7, 32)


class CNN(nn.Module):
    """Convolution, pooling, flatten, dropout and a linear layer (batch norm's running-stat
    update computes n / (n - 1) in Python: nn/layers.py, not traceable with a named batch)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.drop = nn.Dropout(0.3, seed=1)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        h = self.pool(F.relu(self.conv(x)))
        return self.fc(self.drop(F.flatten(h, 1)))


def _mlp():
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))


MODELS = {"mlp": (_mlp, (6,)), "cnn": (CNN, (1, 8, 8))}


def _batches(sample, sizes=SIZES):
    rng = np.random.default_rng(0)
    return [(rng.standard_normal((n, *sample)).astype(np.float32),
             (np.arange(n) % 3).astype(np.int32)) for n in sizes]


def _train(make, sample, symbolic_shape):
    """Losses, final state, number of recordings and the traced step of Adam steps over
    batches of SIZES."""
    mg.nn.init.manual_seed(0)
    model = make()
    opt = mg.optim.Adam(model.parameters(), lr=0.01)
    gm = mg.GradManager().attach(model.parameters())
    recordings = []

    @mg.jit.trace(symbolic_shape=symbolic_shape)
    def train_step(x, y):
        recordings.append(x.shape)
        with gm:
            loss = F.cross_entropy(model(x), y)
            gm.backward(loss)
        opt.step().clear_grad()
        return loss

    losses = [float(train_step(mg.tensor(x), mg.tensor(y))) for x, y in _batches(sample)]
    return losses, model.state_dict(), recordings, train_step


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_training_step_records_once_for_every_batch_size_bitwise(model):
    make, sample = MODELS[model]
    losses, state, recordings, step = _train(make, sample, True)
    fixed_losses, fixed_state, fixed_recordings, _ = _train(make, sample, False)
    assert losses == fixed_losses
    for name in state:
        np.testing.assert_array_equal(state[name], fixed_state[name], err_msg=name)
    assert len(fixed_recordings) == 2  # a fixed-shape trace records per batch size
    assert recordings == [(Dim("batch"), *sample)] and len(step.plans) == 1
    plan = step.plan
    assert isinstance(plan, SymbolicPlan) and plan.specialisations == 2
    assert plan.signature().startswith(f"x: f32[batch, {', '.join(map(str, sample))}], "
                                       "y: i32[batch] -> ")
    assert [b for b, _ in plan.plans] == [{"batch": 7}, {"batch": 32}]  # 32 used last


def test_an_mlp_function_serves_every_batch_with_the_fixed_traces_bits():
    mg.nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    calls = []

    def predict(x):
        calls.append(x.shape)
        return F.softmax(model(x.reshape(x.shape[0], -1)), axis=1)

    symbolic, fixed = mg.jit.trace(predict, symbolic_shape=True), mg.jit.trace(predict)
    for n in SIZES:
        x = mg.tensor(np.random.default_rng(n).standard_normal((n, 8, 8)).astype(np.float32))
        got, want = symbolic(x), fixed(x)
        assert got.shape == (n, 10)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert len(symbolic.plans) == 1 and len(fixed.plans) == 2
    assert calls.count((Dim("batch"), 8, 8)) == 1
    text = str(symbolic.plan.graph)
    assert "%0:f32[batch, 8, 8] = input[name=x]" in text
    assert "reshape[shape=(batch,-1)]" in text or "reshape[shape=(batch,64)]" in text
    # the cache's key holds the name, not the size
    (key,) = symbolic.plans
    assert key == (("x", (Dim("batch"), 8, 8), np.dtype(np.float32), "x"),)
    assert isinstance(symbolic.plan.latest, mg.Plan) and "arena" in \
        symbolic.plan.latest.memory_report()


def test_tensors_are_plain_again_after_the_recording():
    kept = []

    @mg.jit.trace(symbolic_shape=True)
    def f(x):
        y = F.relu(x) * 2.0
        kept.append(y)
        return y

    x = mg.tensor(np.ones((5, 3), np.float32))
    out = f(x)
    assert type(kept[0]) is mg.Tensor and kept[0].shape == (5, 3)
    assert type(out) is mg.Tensor and out.shape == (5, 3)
    assert type(x) is mg.Tensor and MODE.symbolic_trace is None


def _line_of(function, text: str) -> int:
    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_python_that_needs_the_number_says_the_trace_is_symbolic_and_where():
    def rows(x):
        return sum(x[i] for i in range(x.shape[0]))

    def branch(x):
        if x.shape[0] > 3:
            return x * 2.0
        return x

    def halve(x):
        return x * (x.shape[0] / 2.0)

    x = mg.tensor(np.ones((4, 3), np.float32))
    cases = ((rows, "range(x.shape[0])"), (branch, "if x.shape[0] > 3"),
             (halve, "x.shape[0] / 2.0"))
    for function, text in cases:
        traced = mg.jit.trace(function, symbolic_shape=True)
        with pytest.raises(SymbolicShapeError) as info:
            traced(x)
        message = str(info.value)
        assert isinstance(info.value, UndecidedDimError)
        assert message.startswith(f"trace(symbolic_shape=...): {function.__qualname__} needs "
                                  "the number of a named dimension (batch) at ")
        assert f"{__file__}:{_line_of(function, text)} (" in message and text in message
        assert not traced.plans and MODE.symbolic_trace is None
        assert mg.jit.trace(function)(x) is not None  # a fixed-shape trace takes it


def test_a_named_dimension_used_as_a_value_is_refused_in_words():
    f = mg.jit.trace(lambda x: x / x.shape[0], symbolic_shape=True)
    with pytest.raises(mg.GraphError, match=r"the named dimension batch is used as a "
                                            r"tensor's value \(at .*test_trace_symbolic"):
        f(mg.tensor(np.ones((4, 3), np.float32)))


def test_equal_first_sizes_share_a_name_and_another_grouping_records_again():
    calls = []

    @mg.jit.trace(symbolic_shape=True)
    def f(x, y):
        calls.append((x.shape, y.shape))
        return F.sum(x) + F.sum(y)

    def call(n, m):
        x, y = np.ones((n, 2), np.float32), np.ones((m, 3), np.float32)
        return float(f(mg.tensor(x), mg.tensor(y)))

    batch, batch1 = Dim("batch"), Dim("batch1")
    assert call(4, 4) == 20.0
    assert call(9, 9) == 45.0
    assert calls == [((batch, 2), (batch, 3))]
    assert call(6, 1) == 15.0  # sizes that differ: names of their own
    assert call(2, 5) == 19.0
    assert calls[1:] == [((batch, 2), (batch1, 3))] and len(f.plans) == 2


def test_a_dict_names_the_dimensions_given():
    calls = []

    @mg.jit.trace(symbolic_shape={"x": {-1: "seq"}})
    def f(x):
        calls.append(x.shape)
        return F.sum(x, axis=1)

    for shape in ((2, 5), (2, 9), (3, 9)):
        assert f(mg.tensor(np.ones(shape, np.float32))).numpy().tolist() == [shape[1]] * shape[0]
    assert calls == [(2, Dim("seq")), (3, Dim("seq"))]  # a new batch records again


def test_symbolic_shape_is_checked():
    with pytest.raises(mg.GraphError, match="True .* or a dict"):
        mg.jit.trace(lambda x: x, symbolic_shape="batch")
    with pytest.raises(mg.GraphError, match="x's dimension name '2b' is not an identifier"):
        mg.jit.trace(lambda x: x, symbolic_shape={"x": {0: "2b"}})
    with pytest.raises(mg.GraphError, match="x's dimension name 3 is not an identifier"):
        mg.jit.trace(lambda x: x, symbolic_shape={"x": {0: 3}})
    with pytest.raises(mg.GraphError, match="x's axis '0' is not an int"):
        mg.jit.trace(lambda x: x, symbolic_shape={"x": {"0": "b"}})
    f = mg.jit.trace(lambda x, k: x * k, symbolic_shape={"k": {0: "b"}})
    with pytest.raises(mg.GraphError, match=r"'k' is not a tensor argument here \(those are x\)"):
        f(mg.tensor(np.ones(2, np.float32)), 2.0)
    g = mg.jit.trace(lambda x: x, symbolic_shape={"x": {2: "b"}})
    with pytest.raises(mg.GraphError, match="x has 2 dimensions, so it has no axis 2"):
        g(mg.tensor(np.ones((2, 3), np.float32)))
    h = mg.jit.trace(lambda x, y: x + y, symbolic_shape={"x": {0: "b"}, "y": {0: "b"}})
    with pytest.raises(mg.GraphError, match=r"b is 2 in one argument and 3 in y \(3,\)"):
        h(mg.tensor(np.ones(2, np.float32)), mg.tensor(np.ones(3, np.float32)))


def test_scalars_and_empty_first_dimensions_keep_their_sizes():
    @mg.jit.trace(symbolic_shape=True)
    def f(x, s):
        return x * s

    f(mg.tensor(np.ones((0, 2), np.float32)), mg.tensor(np.float32(3.0)))
    (key,) = f.plans
    assert key[0][1] == (0, 2) and key[1][1] == ()
    assert not isinstance(f.plan, SymbolicPlan)


def test_detach_inside_a_trace_records_the_value_not_a_constant():
    @mg.jit.trace
    def f(x):
        return x.detach() * 2.0

    assert f(mg.tensor(np.ones(3, np.float32))).numpy().tolist() == [2.0] * 3
    assert f(mg.tensor(np.full(3, 5.0, np.float32))).numpy().tolist() == [10.0] * 3

    @mg.jit.trace(symbolic_shape=True)
    def g(x):
        return x.detach().reshape(x.shape[0], -1)

    assert g(mg.tensor(np.ones((2, 2, 2), np.float32))).shape == (2, 4)
    assert g(mg.tensor(np.ones((3, 2, 2), np.float32))).shape == (3, 4)
    assert len(g.plans) == 1


def test_an_op_refusing_a_name_is_told_which_dimensions_were_named():
    @mg.jit.trace(symbolic_shape=True)
    def f(x, table):
        return F.roll(x, 1, 0) @ table  # roll refuses a named axis

    x, table = np.ones((4, 3), np.float32), np.ones((3, 2), np.float32)
    with pytest.raises(mg.OpError, match="roll") as info:
        f(mg.tensor(x), mg.tensor(table))
    assert info.value.__notes__ == [
        ("trace(symbolic_shape=...): test_an_op_refusing_a_name_is_told_which_dimensions_were_"
        "named.<locals>.f named x's axis 0 as batch; table's axis 0 as batch1: a dimension that "
        "is not a batch can stay a number when only the others are named ({argument: {axis: "
        "name}})")]
    only_table = mg.jit.trace(f.function, symbolic_shape={"table": {1: "n"}})
    assert only_table(mg.tensor(x), mg.tensor(table)).shape == (4, 2)
    assert only_table(mg.tensor(x), mg.tensor(table[:, :1])).shape == (4, 1)
    assert len(only_table.plans) == 1
