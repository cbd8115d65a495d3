"""RNN, LSTM, GRU and their cells (nn/rnn.py): PyTorch's numbers with its weights copied (every
option, odd sizes), gradients against finite differences and PyTorch, eager, traced (one trace
for two batch sizes) and graph modes, one fused kernel per step in the plan, the model file,
MegEngine's own checks of the shapes, and bad input named."""
import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn
from mgegraph.ir.errors import GraphError
from mgegraph.testing import gradcheck


def wide(x):
    """A tensor of x keeping its NumPy dtype (mg.tensor makes float64 data float32, as
    MegEngine's does)."""
    return mg.tensor(x, dtype=np.asarray(x).dtype)

torch = pytest.importorskip("torch")

SEQ, BATCH, INPUT, HIDDEN = 4, 3, 5, 7
KINDS = ["RNN", "LSTM", "GRU"]


def _pair(kind, **options):
    """(mgegraph module, torch module) with the same weights."""
    nonlinearity = options.pop("nonlinearity", None)
    extra = {"nonlinearity": nonlinearity} if nonlinearity else {}
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(INPUT, HIDDEN, **options, **extra).double()
    ours = getattr(nn, kind)(INPUT, HIDDEN, **options, **extra)
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    assert sorted(state) == sorted(ours.state_dict())  # PyTorch's names
    for name, p in ours.named_parameters():
        p.value = state[name]  # float64 before any graph used them
    return ours, theirs


def _inputs(kind, options, with_state, rng):
    d = 2 if options.get("bidirectional") else 1
    layers = options.get("num_layers", 1)
    shape = (BATCH, SEQ, INPUT) if options.get("batch_first") else (SEQ, BATCH, INPUT)
    x = rng.standard_normal(shape)
    if not with_state:
        return x, None
    h = rng.standard_normal((d * layers, BATCH, HIDDEN))
    return x, ((h, rng.standard_normal(h.shape)) if kind == "LSTM" else h)


def _flat(out, state):
    return [out, *state] if isinstance(state, tuple) else [out, state]


OPTIONS = [{}, {"num_layers": 2}, {"bias": False}, {"batch_first": True},
           {"bidirectional": True}, {"num_layers": 2, "bidirectional": True, "batch_first": True},
           {"num_layers": 3, "bidirectional": True, "bias": False}]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("with_state", [False, True])
def test_layers_match_pytorch_with_its_weights(kind, options, with_state):
    ours, theirs = _pair(kind, **options)
    x, hx = _inputs(kind, options, with_state, np.random.default_rng(1))
    wrap = lambda s: None if s is None else (tuple(map(wide, s)) if isinstance(s, tuple)
                                             else wide(s))
    twrap = lambda s: None if s is None else (tuple(map(torch.tensor, s)) if isinstance(s, tuple)
                                              else torch.tensor(s))
    got = _flat(*ours(wide(x), wrap(hx)))
    want = _flat(*theirs(torch.tensor(x), twrap(hx)))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_relu_rnn_matches_pytorch():
    ours, theirs = _pair("RNN", num_layers=2, nonlinearity="relu")
    x = np.random.default_rng(2).standard_normal((SEQ, BATCH, INPUT))
    out, h = ours(wide(x))
    tout, th = theirs(torch.tensor(x))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.numpy(), th.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("with_state", [False, True])
def test_cells_match_pytorch(kind, bias, with_state):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, kind)(INPUT, HIDDEN, bias=bias).double()
    ours = getattr(nn, kind)(INPUT, HIDDEN, bias=bias)
    for name, p in ours.named_parameters():
        p.value = theirs.state_dict()[name].numpy()
    rng = np.random.default_rng(3)
    x, h, c = (rng.standard_normal(s) for s in ((BATCH, INPUT), (BATCH, HIDDEN), (BATCH, HIDDEN)))
    if kind == "LSTMCell":
        state = ((wide(h), wide(c)), (torch.tensor(h), torch.tensor(c)))
    else:
        state = (wide(h), torch.tensor(h))
    got = ours(wide(x), state[0] if with_state else None)
    want = theirs(torch.tensor(x), state[1] if with_state else None)
    for a, b in zip(*(v if isinstance(v, tuple) else (v,) for v in (got, want)), strict=True):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_pytorch(kind):
    options = {"num_layers": 2, "bidirectional": True}
    ours, theirs = _pair(kind, **options)
    x, hx = _inputs(kind, options, True, np.random.default_rng(4))
    xs = wide(x)
    states = tuple(map(wide, hx)) if kind == "LSTM" else wide(hx)
    weights = np.random.default_rng(5).standard_normal((SEQ, BATCH, 2 * HIDDEN))
    gm = mg.GradManager().attach(ours.parameters() + [xs])
    with gm:
        out, _ = ours(xs, states)
        gm.backward(F.sum(out * wide(weights)))
    tx = torch.tensor(x, requires_grad=True)
    tstates = tuple(map(torch.tensor, hx)) if kind == "LSTM" else torch.tensor(hx)
    (theirs(tx, tstates)[0] * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(xs.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)
    for name, p in ours.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), dict(theirs.named_parameters())[name].grad,
                                   rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_finite_differences(kind):
    layer = getattr(nn, kind)(3, 2, bidirectional=True)
    rng = np.random.default_rng(6)
    names = [n for n, _ in layer.named_parameters()]
    arrays = [rng.standard_normal((3, 2, 3))] + [rng.uniform(-0.8, 0.8, p.shape)
                                                  for _, p in layer.named_parameters()]
    state = [rng.standard_normal((2, 2, 2)) for _ in range(2 if kind == "LSTM" else 1)]

    def fn(x, *rest):
        weights, given = rest[:len(names)], rest[len(names):]
        for name, w in zip(names, weights):
            layer.__dict__[name] = w  # a graph Var in the Parameter's place
        out, final = layer(x, tuple(given) if kind == "LSTM" else given[0])
        h = final[0] if kind == "LSTM" else final
        return F.concat([F.reshape(out, (-1,)), F.reshape(h, (-1,))])

    saved = dict(layer.__dict__)
    try:
        gradcheck(fn, *arrays, *state)
    finally:
        layer.__dict__.update(saved)


def test_lstm_trains_in_graph_mode_as_in_eager_mode():
    nn.init.manual_seed(0)
    model = nn.LSTM(INPUT, HIDDEN, num_layers=2)
    x = np.random.default_rng(7).standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    g = mg.Graph()
    out, (h, c) = model(g.input("x", x.shape))
    plan = mg.compile([out, h, c])
    eager = _flat(*model(wide(x)))
    for a, b in zip(plan.run({"x": x}), eager):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_one_trace_serves_two_batch_sizes(kind):
    """The batch is symbolic under trace(symbolic_shape=True); the sequence length is fixed by
    the unrolled graph."""
    nn.init.manual_seed(0)
    model = getattr(nn, kind)(INPUT, HIDDEN, batch_first=True, bidirectional=True)
    calls = []

    def run(x):
        calls.append(x.shape)
        return model(x)[0]

    traced = mg.jit.trace(run, symbolic_shape=True)
    for n in (2, 5):
        x = np.random.default_rng(n).standard_normal((n, SEQ, INPUT)).astype(np.float32)
        np.testing.assert_allclose(traced(wide(x)).numpy(), model(wide(x))[0].numpy(),
                                   rtol=1e-6, atol=1e-6)
    assert len(traced.plans) == 1 and len(calls) == 1


def test_each_step_fuses_into_one_kernel():
    """Per step after the first: the hidden GEMM adding into the step's input projection (an
    addmm: optimize=2 absorbs every add of a product), the split of its gates and ONE fused
    kernel of the whole gate arithmetic (the cell state of the step before included)."""
    model = nn.LSTM(INPUT, HIDDEN)
    g = mg.Graph()
    out, _ = model(g.input("x", (SEQ, BATCH, INPUT)))
    plan = mg.compile([out], optimize=2)
    ops = [i.op for i in plan.instructions]
    assert ops.count("fused_elementwise") == SEQ and ops.count("addmm") == SEQ - 1
    assert not {"sigmoid", "tanh", "add", "mul", "transpose"} & set(ops)


@pytest.mark.skipif("avx512" not in __import__("mgegraph._kernels.conv").
                    _kernels.conv.blocked_isas(), reason="the addmm tiles need AVX-512")
def test_at_level_1_a_training_step_adds_the_hidden_gemm_into_the_projection_bitwise():
    """Where the product runs on the tiles (32 rows, 64 columns) the addmm rounds as eager
    mode's add, so a training step at optimize=1 makes one a step and its losses are the eager
    steps' bitwise."""
    x = np.random.default_rng(3).standard_normal((SEQ, 32, INPUT)).astype(np.float32)
    y = (np.arange(32) % 2).astype(np.int32)

    class Model(nn.Module):
        def __init__(self):
            nn.init.manual_seed(0)
            self.lstm, self.head = nn.LSTM(INPUT, 16), nn.Linear(16, 2)

        def forward(self, v):
            return self.head(self.lstm(v)[1][0][-1])

    model = Model()
    opt, gm = mg.optim.Adam(model.parameters(), lr=0.01), mg.GradManager()
    gm.attach(model.parameters())
    eager = []
    for _ in range(3):
        with gm:
            loss = F.cross_entropy(model(wide(x)), wide(y))
            gm.backward(loss)
        opt.step().clear_grad()
        eager.append(float(loss))
    model = Model()
    step = mg.compile_train_step(model, F.cross_entropy, mg.optim.Adam(model.parameters(),
                                                                       lr=0.01),
                                 example_batch=(x, y))
    assert [i.op for i in step.plan.instructions].count("addmm") >= SEQ - 1
    assert [float(step(x, y)) for _ in range(3)] == eager


def test_a_training_step_copies_no_transpose_of_the_gates():
    """The steps are whole rows of the input projection (T*B, 4H): the forward splits them off
    as they lie and the backward concatenates their gradients straight back, with no
    transpose either way."""
    nn.init.manual_seed(0)
    model = nn.LSTM(INPUT, HIDDEN)
    x = np.random.default_rng(4).standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    step = mg.compile_train_step(model, lambda out, _: F.mean(out[0] ** 2),
                                 mg.optim.SGD(model.parameters(), lr=0.1),
                                 example_batch=(x, np.zeros(1, np.float32)))
    assert "transpose" not in {i.op for i in step.plan.instructions}


def test_model_file_round_trip(tmp_path):
    nn.init.manual_seed(1)
    model = nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True, batch_first=True)
    x = np.random.default_rng(8).standard_normal((BATCH, SEQ, INPUT)).astype(np.float32)
    g = mg.Graph()
    out, (h, c) = model(g.input("x", x.shape))
    plan = mg.compile([out, h, c])
    mg.save(plan, tmp_path / "lstm.mgm")
    for a, b in zip(mg.load(tmp_path / "lstm.mgm").run([x]), plan.run({"x": x})):
        np.testing.assert_array_equal(a, b)


def test_dropout_between_layers_in_training_only():
    nn.init.manual_seed(0)
    model = nn.LSTM(INPUT, HIDDEN, num_layers=2, dropout=0.5)
    plain = nn.LSTM(INPUT, HIDDEN, num_layers=2)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "dropouts" not in k})
    x = mg.tensor(np.random.default_rng(9).standard_normal((SEQ, BATCH, INPUT)).astype(
        np.float32))
    trained = model(x)[0].numpy()
    assert not np.allclose(trained, plain(x)[0].numpy())
    model.eval()
    np.testing.assert_array_equal(model(x)[0].numpy(), plain(x)[0].numpy())


# MegEngine's own test_rnn.py checks these shapes
@pytest.mark.parametrize("kind", ["RNN", "LSTM"])
@pytest.mark.parametrize("batch_first", [True, False])
def test_megengine_shapes(kind, batch_first):
    layer = getattr(nn, kind)(10, 20, batch_first=batch_first, num_layers=2)
    shape = (3, 6, 10) if batch_first else (6, 3, 10)
    out, state = layer(mg.tensor(np.zeros(shape, np.float32)))
    assert out.shape == shape[:2] + (20,)
    for s in (state if kind == "LSTM" else (state,)):
        assert s.shape == (2, 3, 20)
    assert nn.LSTMCell(10, 20)(mg.tensor(np.zeros((1, 10), np.float32)))[1].shape == (1, 20)


def test_bad_input_is_named():
    lstm = nn.LSTM(INPUT, HIDDEN, num_layers=2)
    x = mg.tensor(np.zeros((SEQ, BATCH, INPUT + 1), np.float32))
    with pytest.raises(GraphError, match=r"LSTM: input is float32\[4, 3, 6\], it must be "
                                         r"\(seq, batch, input_size\) with input_size=5"):
        lstm(x)
    x = mg.tensor(np.zeros((SEQ, BATCH, INPUT), np.float32))
    h = mg.tensor(np.zeros((1, BATCH, HIDDEN), np.float32))
    with pytest.raises(GraphError, match=r"LSTM: h_0 is float32\[1, 3, 7\], it must be "
                                         r"float32\[2, 3, 7\]"):
        lstm(x, (h, h))
    with pytest.raises(GraphError, match=r"LSTM: hx must be a pair"):
        lstm(x, h)
    with pytest.raises(GraphError, match=r"GRUCell: input is float32\[4, 3, 5\], it must be "
                                         r"\(batch, input_size=5\)"):
        nn.GRUCell(INPUT, HIDDEN)(x)
    with pytest.raises(GraphError, match=r"RNN: nonlinearity must be 'tanh' or 'relu'"):
        nn.RNN(INPUT, HIDDEN, nonlinearity="sigmoid")
    with pytest.raises(GraphError, match=r"GRU: dropout must be a number in \[0, 1\]"):
        nn.GRU(INPUT, HIDDEN, dropout=2)
    with pytest.raises(GraphError, match=r"RNN: input must be floating point|RNN: input "
                                         r"int32"):
        nn.RNN(INPUT, HIDDEN)(mg.tensor(np.zeros((SEQ, BATCH, INPUT), np.int32)))


def test_remat_recomputes_steps_of_a_training_step_with_the_same_losses():
    """The unrolled steps are ordinary nodes: remat may drop and recompute them."""
    x = np.random.default_rng(10).standard_normal((8, 24, INPUT)).astype(np.float32)
    y = (np.arange(8) % 2).astype(np.int32)

    class Model(nn.Module):
        def __init__(self):
            self.lstm, self.head = nn.LSTM(INPUT, 16, batch_first=True), nn.Linear(16, 2)

        def forward(self, v):
            return self.head(self.lstm(v)[1][0][-1])

    runs = {}
    for remat in (None, "sqrt"):
        nn.init.manual_seed(0)
        model = Model()
        step = mg.compile_train_step(model, F.cross_entropy, mg.optim.Adam(
            model.parameters(), lr=0.01), example_batch=(x, y), remat=remat)
        runs[remat] = ([float(step(x, y)) for _ in range(3)], step.plan.arena_bytes)
    assert runs["sqrt"][0] == runs[None][0]
    assert runs["sqrt"][1] < runs[None][1]


def test_a_traced_training_step_gives_the_eager_steps_losses():
    x = np.random.default_rng(11).standard_normal((SEQ, BATCH, INPUT)).astype(np.float32)
    y = (np.arange(BATCH) % 2).astype(np.int32)

    def losses(traced: bool):
        nn.init.manual_seed(0)
        lstm, head = nn.GRU(INPUT, HIDDEN, num_layers=2), nn.Linear(HIDDEN, 2)
        params = lstm.parameters() + head.parameters()
        opt, gm = mg.optim.Adam(params, lr=0.01), mg.GradManager().attach(params)

        def step(xs, ys):
            with gm:
                loss = F.cross_entropy(head(lstm(xs)[1][-1]), ys)
                gm.backward(loss)
            opt.step().clear_grad()
            return loss

        run = mg.jit.trace(step) if traced else step
        return [float(run(wide(x), wide(y))) for _ in range(4)]

    eager = losses(False)
    assert eager[-1] < eager[0]
    assert losses(True) == eager  # the same kernels in the same order: bitwise
