"""nn.Conv1d, nn.ConvTranspose2d and nn.ConvTranspose1d: PyTorch's weight layouts, so PyTorch's
state dicts load and give PyTorch's outputs, eagerly and compiled; their initialisation bounds;
a training step; and errors naming the layer."""
import math

import numpy as np
import pytest

import mgegraph as mg
from mgegraph import nn

RNG = np.random.default_rng(0)

LAYERS = [
    # mgegraph layer, torch layer name, constructor arguments, input shape
    (nn.ConvTranspose2d, "ConvTranspose2d", (4, 6, 3),
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}, (2, 4, 5, 7)),
    (nn.ConvTranspose2d, "ConvTranspose2d", (3, 2, (2, 3)),
     {"stride": (1, 2), "dilation": (2, 1), "bias": False}, (1, 3, 4, 5)),
    (nn.ConvTranspose1d, "ConvTranspose1d", (4, 3, 4), {"stride": 2, "padding": 1}, (2, 4, 9)),
    (nn.Conv1d, "Conv1d", (4, 6, 5), {"stride": 2, "padding": 2, "groups": 2}, (2, 4, 11)),
    (nn.Conv1d, "Conv1d", (3, 5, 3), {"dilation": 2, "bias": False}, (1, 3, 8)),
    (nn.Conv3d, "Conv3d", (4, 6, (3, 2, 3)),
     {"stride": (2, 1, 1), "padding": (1, 0, 1), "groups": 2}, (2, 4, 5, 4, 6)),
]


@pytest.mark.parametrize("layer,torch_name,args,kwargs,xs", LAYERS)
def test_torch_state_dict_gives_torch_output(layer, torch_name, args, kwargs, xs):
    torch = pytest.importorskip("torch")
    ref = getattr(torch.nn, torch_name)(*args, **kwargs)
    module = layer(*args, **kwargs)
    state = {k: v.detach().numpy() for k, v in ref.state_dict().items()}
    assert {k: v.shape for k, v in module.state_dict().items()} == \
        {k: v.shape for k, v in state.items()}
    module.load_state_dict(state)
    x = RNG.standard_normal(xs).astype(np.float32)
    expected = ref(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(module(mg.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-5)
    predict = mg.compile_module(module, example_inputs=(x,))
    np.testing.assert_allclose(predict(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer,args,fan_in", [
    (nn.ConvTranspose2d, (8, 6, 3, 1, 0, 0, 1, 2), 3 * 9),   # fan-in from dim 1: out/groups
    (nn.ConvTranspose1d, (4, 10, 5), 10 * 5),
    (nn.Conv1d, (4, 10, 5), 4 * 5),
    (nn.Conv3d, (4, 10, 3), 4 * 27),
])
def test_initialisation_bounds_follow_pytorch(layer, args, fan_in):
    mg.module.init.manual_seed(5)  # the draws of this test, whatever ran before it
    module = layer(*args)
    bound = 1 / math.sqrt(fan_in)   # kaiming_uniform(a=sqrt(5)) and the bias share it
    weight, bias = np.abs(module.weight.numpy()), np.abs(module.bias.numpy())
    assert weight.max() <= bound and weight.max() > 0.9 * bound  # hundreds of draws reach it
    assert bias.max() <= bound  # a few draws (6 biases) need not come near the bound


def _decoder():
    return nn.Sequential(nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1),
                         nn.ReLU(), nn.Conv2d(4, 1, 3, padding=1))


def test_upsampling_decoder_learns_a_teacher():
    model, teacher = _decoder(), _decoder()
    x = RNG.standard_normal((8, 2, 5, 5)).astype(np.float32)
    target = teacher(mg.tensor(x)).numpy()
    before = model.state_dict()["0.weight"].copy()
    step = mg.compile_train_step(model, mg.nn.mse_loss,
                                 mg.optim.SGD(model.parameters(), lr=0.2), (x, target))
    losses = [float(step(x, target)) for _ in range(60)]
    assert losses[-1] < 0.7 * losses[0]
    assert not np.array_equal(model.state_dict()["0.weight"], before)


@pytest.mark.parametrize("call,match", [
    (lambda: nn.ConvTranspose2d(4, 6, 3, groups=4), "divisible by groups 4"),
    (lambda: nn.ConvTranspose2d(4, 6, 3, stride=2, output_padding=2),
     r"ConvTranspose2d: output_padding \(2, 2\) must be smaller"),
    (lambda: nn.ConvTranspose1d(4, 6, (3, 3)), "ConvTranspose1d: kernel_size must be"),
    (lambda: nn.Conv1d(4, 6, 0), "Conv1d: kernel_size must be an int >= 1"),
    (lambda: nn.Conv3d(4, 6, (3, 3)), "Conv3d: kernel_size must be an int or 3 ints"),
])
def test_bad_arguments_name_the_layer(call, match):
    with pytest.raises(mg.GraphError, match=match):
        call()


def test_repr_names_the_geometry():
    text = repr(nn.ConvTranspose2d(64, 32, 3, stride=2, padding=1, output_padding=1))
    assert "64, 32, kernel_size=(3, 3), stride=(2, 2)" in text and "output_padding=(1, 1)" in text


def test_dynamic_batch():
    module = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
    module.eval()
    x = RNG.standard_normal((3, 4, 5, 5)).astype(np.float32)
    predict = mg.compile_module(module, (x,), dynamic=True)
    for batch in (2, 3):
        np.testing.assert_array_equal(predict(x[:batch]), module(mg.tensor(x[:batch])).numpy())
