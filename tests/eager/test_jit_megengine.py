"""``mgegraph.jit`` under MegEngine's names: the package and ``jit.tracing``, ``trace``'s
MegEngine options, ``exclude_from_trace``, ``partial_trace`` and ``trace.dump`` writing the
model file that ``mg.load`` runs."""
import io
import warnings

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.jit import (
    DumpWarning,
    GraphOptimizationConfig,
    TraceError,
    exclude_from_trace,
    partial_trace,
    trace,
)
from mgegraph.jit.tracing import set_symbolic_shape

RNG = np.random.default_rng(5)


def _x(*shape):
    return mg.tensor(RNG.standard_normal(shape).astype(np.float32))


def test_jit_tracing_is_the_same_trace():
    from mgegraph.jit import tracing

    assert tracing.trace is trace is mg.trace
    assert tracing.TraceError is TraceError and issubclass(TraceError, mg.GraphError)
    before = set_symbolic_shape(False)
    assert set_symbolic_shape(before) is False


def test_opt_level_is_the_planner_level_and_the_rest_are_accepted():
    for level in (0, 2):
        @trace(opt_level=level, imperative=True, without_host=True,
               graph_opt_config=GraphOptimizationConfig())
        def f(x):
            return F.exp(x) * 2.0 + 1.0

        x = _x(4)
        np.testing.assert_allclose(f(x).numpy(), np.exp(x.numpy()) * 2 + 1, rtol=1e-6)
        assert f.plan.source.options["optimize"] == level
    assert "UNSET" in repr(GraphOptimizationConfig())


def test_exclude_from_trace_makes_its_results_constants_of_the_recording():
    calls = []

    @trace
    def f(x):
        with exclude_from_trace():
            calls.append(1)
            offset = x * 0.0 + float(len(calls))  # not recorded: a constant of the plan
        return x + offset

    x = _x(3)
    np.testing.assert_allclose(f(x).numpy(), x.numpy() + 1.0)
    np.testing.assert_allclose(f(_x(3) * 0.0).numpy(), np.ones(3, np.float32))
    assert calls == [1]


def test_exclude_from_trace_keeps_a_grad_managers_tape():
    w = nn.Parameter(np.float32(3.0))
    gm = mg.GradManager().attach(w)
    with gm:
        with exclude_from_trace():
            y = w * w
        gm.backward(y)
    assert float(w.grad.numpy()) == 6.0


def test_capture_as_const_takes_tensor_positional_arguments_only():
    @trace(capture_as_const=True)
    def f(a):
        return a * 2.0

    with pytest.raises(TraceError, match="Only support tensor type args when capture_as_const"):
        f(1)


def test_a_function_that_returns_nothing_runs_and_cannot_be_dumped():
    @trace(capture_as_const=True)
    def f(x):
        x * x

    assert f(_x(3)) is None
    with pytest.raises(TraceError, match="without return values cannot be dumped"):
        f.dump(io.BytesIO())


def _model():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model.eval()
    return model


def test_dump_writes_a_model_file_that_load_runs(tmp_path):
    model = _model()

    @trace(capture_as_const=True)
    def predict(data):
        return F.softmax(model(data))

    x = _x(5, 4)
    expected = predict(x).numpy()
    path = tmp_path / "model.mgm"
    info = predict.dump(str(path), arg_names=["data"], output_names=["prob"])
    assert info.inputs == ["data"] and info.outputs == ["prob"] and info.nr_opr > 3
    assert info[4] == info.inputs and info[0] == info.nr_opr  # MegEngine's tuple order
    assert info.tot_bytes > info.tensor_value_bytes > 0
    loaded = mg.load(str(path))
    assert list(loaded.input_names) == ["data"] and list(loaded.output_names) == ["prob"]
    np.testing.assert_allclose(loaded(x.numpy()), expected, rtol=1e-6)

    buffer = io.BytesIO()  # a file object gets the file's bytes
    predict.dump(buffer, arg_names="data", output_names="prob")
    copy = tmp_path / "copy.mgm"
    copy.write_bytes(buffer.getvalue())
    np.testing.assert_allclose(mg.load(str(copy))(x.numpy()), expected, rtol=1e-6)


def test_dump_names_a_dict_results_outputs_by_its_keys_and_renames_inputs(tmp_path):
    @trace(capture_as_const=True)
    def f(a, b):
        return {"sum": a + b, "prod": a * b}

    a, b = _x(3), _x(3)
    f(a, b)
    path = str(tmp_path / "m.mgm")
    info = f.dump(path, arg_names=["arg_0", "arg_1"], optimize_for_inference=False)
    loaded = mg.load(path)
    assert info.outputs == ["sum", "prod"] == list(loaded.output_names)
    got = dict(zip(loaded.output_names, loaded.run({"arg_0": a.numpy(), "arg_1": b.numpy()})))
    np.testing.assert_allclose(got["prod"], a.numpy() * b.numpy(), rtol=1e-6)


def test_dump_refuses_what_it_cannot_write():
    @trace
    def not_const(x):
        return x + 1.0

    not_const(_x(2))
    with pytest.raises(TraceError, match="capture_as_const=True"):
        not_const.dump(io.BytesIO())

    @trace(capture_as_const=True)
    def f(x):
        return x + 1.0

    with pytest.raises(TraceError, match="has not been called"):
        f.dump(io.BytesIO())
    f(_x(2))
    with pytest.raises(mg.GraphError, match="wrong number of arg_names, should be 1"):
        f.dump(io.BytesIO(), arg_names=["a", "b"])
    with pytest.raises(mg.GraphError, match="wrong number of output_names, should be 1"):
        f.dump(io.BytesIO(), output_names=["a", "b"])
    with pytest.raises(TypeError, match="unexpected keyword arguments colour"):
        f.dump(io.BytesIO(), colour=1)
    with pytest.warns(DumpWarning, match="input_data"):
        f.dump(io.BytesIO(), input_data=["#rand(0, 255, 1)"], enable_io16xc32=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f.dump(io.BytesIO(), keep_var_name=1, dump_format=None)  # MegEngine's defaults


def test_partial_trace_records_into_a_grad_manager_and_runs_its_plan_outside():
    a = nn.Parameter(np.float32(2.0))

    @partial_trace
    def scaled(x):
        return F.exp(x * a)

    gm = mg.GradManager().attach(a)
    x = mg.tensor(np.float32(0.5))
    with gm:
        gm.backward(scaled(x))
    np.testing.assert_allclose(float(a.grad.numpy()), 0.5 * np.exp(1.0), rtol=1e-6)
    np.testing.assert_allclose(float(scaled(x).numpy()), np.exp(1.0), rtol=1e-6)
    assert scaled.plan is not None
    with pytest.raises(ValueError, match="backend='default'"):
        partial_trace(lambda x: x, backend="xla")


def test_profiling_keeps_the_latest_runs_chrome_trace():
    @trace(profiling=True)
    def f(x):
        return -x

    with pytest.raises(TraceError, match="profiling=True"):
        f.get_profile()
    f(_x(3))
    f(_x(3))
    events = f.get_profile()["profiler"]["traceEvents"]
    assert any(e.get("name") == "neg" for e in events)


def test_dump_of_a_symbolic_shape_trace_serves_every_batch_size(tmp_path):
    model = _model()

    @trace(capture_as_const=True, symbolic_shape=True)
    def predict(data):
        return model(data)

    predict(_x(2, 4))
    path = str(tmp_path / "sym.mgm")
    predict.dump(path, arg_names=["data"])
    loaded = mg.load(path)
    for batch in (1, 7):
        x = _x(batch, 4)
        np.testing.assert_allclose(loaded(x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)


def test_a_traced_call_of_a_module_twice_keeps_the_last_update_as_eager_does():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(2)

        def forward(self, x):
            return self.bn(self.bn(x))

    @trace
    def step(x, net):
        return net(x)

    x = _x(3, 2, 4, 4)
    traced, eager = Twice(), Twice()
    np.testing.assert_allclose(step(x, traced).numpy(), eager(x).numpy(), rtol=1e-5, atol=1e-6)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(traced.bn, name).numpy(),
                                   getattr(eager.bn, name).numpy(), rtol=1e-5, atol=1e-7)


def test_an_update_made_outside_a_module_call_is_read_by_the_ops_after_it():
    steps = nn.Buffer(np.zeros((), np.float32))

    def bump():  # an eager assign outside an optimiser step or a module call lands at once
        steps.graph.assign(steps, steps + 1)
        return steps * 10

    first = bump().numpy()
    traced = trace(bump)
    assert traced().numpy() == first + 10 == 20
    assert traced().numpy() == 30 and steps.numpy() == 3

    def bump_twice():
        bump()
        return bump()

    assert trace(bump_twice)().numpy() == 50 and steps.numpy() == 5


def test_topk_takes_the_whole_axis_when_k_is_larger_as_megengine():
    x = _x(7, 2)
    values, indices = F.topk(x, 3)
    expected = np.sort(x.numpy(), axis=-1)
    np.testing.assert_array_equal(values.numpy(), expected)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(x.numpy(), axis=-1, kind="stable"))
    traced = trace(lambda a: F.topk(a, 5, descending=True)[1])
    np.testing.assert_array_equal(traced(x).numpy(), np.argsort(-x.numpy(), -1, kind="stable"))
    with pytest.raises(mg.OpError, match="topk"):
        F.topk(x, 0)


def test_an_op_error_is_a_runtime_error_too_and_the_trace_records_again():
    @trace
    def add(a, b):
        return a + b

    a = mg.tensor(np.arange(8, dtype=np.int32).reshape(2, 4))
    add(a, a)
    with pytest.raises(RuntimeError, match=r"add\(i32\[2,4\], i32\[4,2\]\)") as info:
        add(a, a.transpose())
    assert isinstance(info.value, (mg.OpError, ValueError))
    np.testing.assert_array_equal(add(a, a).numpy(), 2 * a.numpy())


def test_profiling_an_eager_call_times_the_plans_it_runs():
    inner = trace(lambda x: -x)

    @trace(symbolic=False, profiling=True)
    def outer(x):
        return inner(x) * 2

    np.testing.assert_array_equal(outer(_x(3)).numpy().shape, (3,))
    events = outer.get_profile()["profiler"]["traceEvents"]
    assert any(e.get("name") == "neg" for e in events)


def test_capture_as_const_runs_a_state_update_with_a_warning_and_dump_refuses_it():
    bn = nn.BatchNorm2d(3)

    @trace(capture_as_const=True)
    def train_step(x):
        return bn(x).sum()

    x = _x(4, 3, 2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = train_step(x)
    assert [w.category for w in caught] == [mg.jit.TraceWarning] * 2
    assert "running_mean" in str(caught[0].message) and "running_var" in str(caught[1].message)
    assert "captured as a constant" in str(caught[0].message)
    np.testing.assert_allclose(out.numpy(), nn.BatchNorm2d(3)(x).sum().numpy(), atol=1e-4)
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros((1, 3, 1, 1)))
    with pytest.raises(RuntimeError, match="dump: .*updates .*running_mean.*eval"):
        train_step.dump(io.BytesIO())
    bn.eval()
    train_step(x)  # an eval-mode recording updates nothing: it dumps
    assert train_step.dump(io.BytesIO()).outputs == ["output0"]


@pytest.mark.parametrize("symbolic_shape", [False, True])
def test_a_grad_manager_attached_to_an_argument_sets_that_calls_grad(symbolic_shape):
    gm = mg.autodiff.GradManager()

    @trace(symbolic_shape=symbolic_shape)
    def step(x, w):
        with gm:
            y = x * w * x.shape[1] + F.zeros((x.shape[0], 1))  # (a named batch size)
            gm.backward(y, F.ones_like(y))
        return y, x.grad

    for rows in (3, 3, 5):
        x, w = _x(rows, 4), _x(rows, 4)
        gm.attach(x)
        y, dx = step(x, w)
        np.testing.assert_allclose(dx.numpy(), w.numpy() * 4, rtol=1e-6)
        np.testing.assert_allclose(y.numpy(), x.numpy() * dx.numpy(), rtol=1e-6)
        assert x.grad is not None and type(x) is mg.Tensor
        np.testing.assert_array_equal(x.grad.numpy(), dx.numpy())
        step(x, w)  # the grad adds up, as in eager mode
        np.testing.assert_allclose(x.grad.numpy(), 2 * dx.numpy(), rtol=1e-6)
    other = _x(5, 4)  # not attached: another plan, which sets no grad
    assert step(other, w)[1] is None and other.grad is None


@pytest.mark.parametrize("symbolic_shape", [False, True])
def test_a_traced_function_sees_its_arguments_name_and_device(symbolic_shape):
    seen = []

    @trace(symbolic_shape=symbolic_shape)
    def f(x, y):
        seen.append((x.name, str(x.device), y.name))
        return x + y

    f(mg.tensor([1.0], name="data", device="cpu0"), mg.tensor([2.0]))
    assert seen == [("data", "cpu0", "")]


def test_attaching_an_argument_inside_the_traced_call_is_refused_clearly():
    gm = mg.autodiff.GradManager()

    @trace
    def f(x):
        gm.attach(x)
        with gm:
            y = (x * x).sum()
            gm.backward(y)
        return y

    x = _x(2)
    with pytest.raises(TraceError, match="attached a tensor argument f32.2. .*before calling"):
        f(x)
    assert x.grad is None
    gm.attach(x)  # the supported way: attached before the call
    f(x)
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy(), rtol=1e-6)
