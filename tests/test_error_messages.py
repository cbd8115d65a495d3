"""Every error a user can trigger is one of mgegraph's types and names what the user wrote.

Each row is a bad call across the public API, the words its message must hold (the op or the
argument, the shape) and whether it builds a graph (then the message must also name this file's
line: the lambda's own line, where the user's code is).
"""
import numpy as np
import pytest

import mgegraph as mg
from mgegraph import functional as F
from mgegraph import nn, optim

PROJECT_ERRORS = (mg.GraphError, mg.OpError, mg.FeedError, mg.KernelError, mg.DispatchError)


class Ctx:
    """A fresh graph with a few inputs for each row."""

    def __init__(self):
        self.g = g = mg.Graph()
        self.x = g.input("x", (2, 3))
        self.img = g.input("img", (1, 3, 8, 8))
        self.labels = g.input("labels", (2,), "int64")
        self.flabels = g.input("flabels", (2,), "float32")
        self.lin = nn.Linear(2, 3)


def _plan():
    g = mg.Graph()
    return mg.compile([F.relu(g.input("x", (2, 3)))])


def _negative_pow():
    g = mg.Graph()
    plan = mg.compile([g.input("i", (2,), "int32") ** g.input("e", (2,), "int32")])
    return plan.run({"i": np.array([2, 2], np.int32), "e": np.array([1, -1], np.int32)})


# (id, call, words the message must contain, builds a graph: the message names the line)
CASES = [
    ("reshape_impossible", lambda c: F.reshape(c.x, (4, 2)), ["reshape", "(4, 2)", "f32[2,3]"], True),
    ("concat_mismatch", lambda c: F.concat([c.x, c.g.input("y", (2, 4))], axis=0), ["concat", "f32[2,4]"], True),
    ("sum_bad_axis", lambda c: F.sum(c.x, axis=5), ["sum", "axis 5"], True),
    ("softmax_bad_axis", lambda c: F.softmax(c.x, axis=-3), ["softmax", "axis"], True),
    ("conv_channels", lambda c: F.conv2d(c.img, c.g.input("w", (4, 2, 3, 3))), ["conv2d", "channel"], True),
    ("ce_float_labels", lambda c: F.cross_entropy(c.x, c.flabels), ["cross_entropy", "float32"], True),
    ("matmul_mismatch", lambda c: F.matmul(c.x, c.x), ["matmul", "f32[2,3]"], True),
    ("broadcast", lambda c: c.x + c.g.input("y", (4,)), ["add", "(4,)"], True),
    ("transpose_pattern", lambda c: F.transpose(c.x, (0, 0)), ["transpose", "(0, 0)"], True),
    ("take_float_index", lambda c: F.take(c.x, c.flabels, axis=0), ["take", "float32"], True),
    ("max_pool_kernel_0", lambda c: F.max_pool2d(c.img, 0), ["max_pool2d", "kernel_size"], True),
    ("layer_norm_shape", lambda c: F.layer_norm(c.x, (4,)), ["layer_norm", "(4,)"], True),
    ("dropout_prob", lambda c: F.dropout(c.x, 2.0), ["dropout", "drop_prob"], True),
    ("gelu_approximate", lambda c: F.gelu(c.x, approximate="foo"), ["gelu", "approximate", "'foo'"], True),
    ("astype_complex", lambda c: F.astype(c.x, "complex64"), ["complex64"], True),
    ("flatten_axis", lambda c: F.flatten(c.x, 3), ["flatten", "axis 3"], True),
    ("input_float_dim", lambda c: c.g.input("a", (2.0, 3)), ["(2.0, 3)", "2.0"], True),
    ("input_bool_dim", lambda c: c.g.input("a", (True, 3)), ["(True, 3)"], True),
    ("input_negative_dim", lambda c: c.g.input("a", (-1, 3)), ["(-1, 3)"], True),
    ("input_bad_dim_name", lambda c: c.g.input("a", ("n!", 3)), ["n!"], True),
    ("input_no_shape", lambda c: c.g.input("a", None), ["shape None"], True),
    ("input_huge", lambda c: c.g.input("a", (2**62, 3)), ["4611686018427387904", "bytes"], True),
    ("input_bad_dtype", lambda c: c.g.input("a", (2,), "complex64"), ["complex64"], True),
    ("input_duplicate_name", lambda c: c.g.input("x", (2,)), ["'x'"], False),
    ("input_name_none", lambda c: c.g.input(None, (2,)), ["None"], False),
    ("op_output_too_big", lambda c: F.matmul(c.g.input("a", (2**31, 1)), c.g.input("b", (1, 2**31))), ["matmul", "bytes"], True),
    ("batch_norm_weight_shape", lambda c: F.batch_norm(c.img, weight=c.g.input("w", (4,)), training=True), ["batch_norm", "(4,)", "(3,)"], True),
    ("compile_level", lambda c: mg.compile([F.relu(c.x)], optimize=7), ["optimisation level 7"], False),
    ("compile_memory", lambda c: mg.compile([F.relu(c.x)], memory="lots"), ["'lots'"], False),
    ("compile_device", lambda c: mg.compile([F.relu(c.x)], device="tpu"), ["'tpu'"], False),
    ("run_missing_feed", lambda c: _plan().run({}), ["'x'", "missing"], False),
    ("run_wrong_shape", lambda c: _plan().run({"x": np.zeros((3, 3), np.float32)}), ["x", "[3, 3]"], False),
    ("run_not_a_dict", lambda c: _plan().run(None), ["dict"], False),
    ("linear_zero", lambda c: nn.Linear(0, 3), ["Linear", "in_features", "0"], False),
    ("linear_float", lambda c: nn.Linear(2.5, 3), ["Linear", "in_features", "2.5"], False),
    ("conv_layer_groups", lambda c: nn.Conv2d(3, 4, 3, groups=2), ["Conv2d", "groups"], False),
    ("conv_layer_negative", lambda c: nn.Conv2d(3, -1, 3), ["Conv2d", "out_channels", "-1"], False),
    ("batchnorm_negative", lambda c: nn.BatchNorm2d(-1), ["BatchNorm2d", "num_features"], False),
    ("embedding_negative", lambda c: nn.Embedding(-1, 3), ["Embedding", "num_embeddings"], False),
    ("layernorm_float", lambda c: nn.LayerNorm(2.5), ["LayerNorm", "2.5"], False),
    ("dropout_layer", lambda c: nn.Dropout(1.5), ["Dropout", "drop_prob", "1.5"], False),
    ("sgd_nan_lr", lambda c: optim.SGD(c.lin.parameters(), lr=float("nan")), ["SGD", "lr", "nan"], False),
    ("sgd_negative_lr", lambda c: optim.SGD(c.lin.parameters(), lr=-0.1), ["SGD", "lr", "-0.1"], False),
    ("sgd_inf_lr", lambda c: optim.SGD(c.lin.parameters(), lr=float("inf")), ["SGD", "lr", "inf"], False),
    ("sgd_str_lr", lambda c: optim.SGD(c.lin.parameters(), lr="fast"), ["SGD", "lr", "'fast'"], False),
    ("sgd_momentum", lambda c: optim.SGD(c.lin.parameters(), lr=0.1, momentum=-1), ["SGD", "momentum"], False),
    ("sgd_no_params", lambda c: optim.SGD([], lr=0.1), ["SGD", "no parameters"], False),
    ("adam_betas", lambda c: optim.Adam(c.lin.parameters(), betas=(1.5, 0.9)), ["Adam", "betas[0]", "1.5"], False),
    ("adam_eps", lambda c: optim.Adam(c.lin.parameters(), eps=float("nan")), ["Adam", "eps"], False),
    ("steplr_step_size", lambda c: optim.StepLR(optim.SGD(c.lin.parameters(), 0.1), 0), ["StepLR", "step_size"], False),
    ("one_hot_float_classes", lambda c: F.one_hot(c.labels, 2.5), ["one_hot", "num_classes", "2.5"], True),
    ("dataloader_zero", lambda c: mg.DataLoader((np.zeros(4),), 0), ["DataLoader", "batch_size", "0"], False),
    ("dataloader_negative", lambda c: mg.DataLoader((np.zeros(4),), -2), ["DataLoader", "batch_size", "-2"], False),
    ("dataloader_float", lambda c: mg.DataLoader((np.zeros(4),), 1.5), ["DataLoader", "batch_size", "1.5"], False),
    ("reshape_bool_dim", lambda c: F.reshape(c.x, (True, 6)), ["reshape", "(True, 6)", "f32[2,3]"], True),
    ("reshape_bool_minus_one", lambda c: F.reshape(c.x, (-1, True)), ["reshape", "(-1, True)"], True),
    ("softmax_str_axis", lambda c: F.softmax(c.x, axis="a"), ["softmax", "f32[2,3]", "'a'"], True),
    ("softmax_float_axis", lambda c: F.softmax(c.x, axis=1.0), ["softmax", "f32[2,3]", "1.0"], True),
    ("log_softmax_str_axis", lambda c: F.log_softmax(c.x, axis="a"), ["log_softmax", "'a'"], True),
    ("const_huge_broadcast", lambda c: c.g.const(np.broadcast_to(np.float32(1), (1 << 40,))), ["(1099511627776,)", "4398046511104 bytes"], True),
    ("int_pow_negative", lambda c: _negative_pow(), ["pow", "integers to negative integer powers are not allowed", "test_error_messages.py"], False),
    ("arange_inf", lambda c: F.arange(0, float("inf"), graph=c.g), ["arange", "inf", "finite"], True),
    ("arange_int_overflow", lambda c: F.arange(2**31 - 3, 2**31 + 2, dtype="int32", graph=c.g), ["arange", "2147483649", "int32"], True),
    ("dataloader_lengths", lambda c: mg.DataLoader((np.zeros(4), np.zeros(3)), 2), ["DataLoader", "[4, 3]"], False),
]


@pytest.mark.parametrize("call,words,names_line", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_call_raises_a_project_error_naming_what_the_user_wrote(call, words, names_line):
    ctx = Ctx()
    with pytest.raises(PROJECT_ERRORS) as info:
        call(ctx)
    message = str(info.value)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    for leak in ("%0", "invalid literal", "NoneType' object", "division by zero"):
        assert leak not in message
    if names_line:
        assert f"{__file__}:{call.__code__.co_firstlineno}" in message, message


def test_numpy_ints_are_fine_dims():
    g = mg.Graph()
    assert g.input("x", (np.int64(2), np.int32(3))).shape == (2, 3)


def test_batch_norm_with_more_than_one_value_per_channel_trains():
    g = mg.Graph()
    nn.BatchNorm2d(3)(g.input("a", (2, 3, 1, 1)))  # two samples: batch statistics exist
    nn.BatchNorm2d(3)(g.input("b", (1, 3, 2, 1)))  # one sample of two positions
    bn = nn.BatchNorm2d(3)
    bn.eval()
    bn(g.input("c", (1, 3, 1, 1)))  # inference uses the running statistics


def test_a_scheduler_setting_a_bad_lr_is_refused_and_keeps_the_old_one():
    lin = nn.Linear(2, 3)
    opt = optim.SGD(lin.parameters(), lr=0.1)
    sched = optim.StepLR(opt, step_size=1, gamma=0.5)
    sched.base_lr = float("nan")  # as a bad schedule would compute
    with pytest.raises(mg.GraphError, match="StepLR.*lr.*nan"):
        sched.step()
    assert opt.lr == 0.1 and sched.epoch == 0
    with pytest.raises(mg.GraphError, match="SGD: lr"):
        opt.lr = -1.0
    assert opt.lr == 0.1


def test_assign_says_a_second_assign_of_a_param_is_refused():
    doc = mg.Graph.assign.__doc__
    assert "at most once" in doc and "refused" in doc
    g = mg.Graph()
    w = g.param("w", np.zeros(2, np.float32))
    g.assign(w, w + 1.0)
    g.assign(w, w + 2.0)
    with pytest.raises(mg.GraphError, match="'w' is assigned twice"):
        mg.compile([w + 0.0])


def test_integer_ranges_that_fit_still_build():
    g = mg.Graph()
    assert F.arange(2**31 - 3, 2**31 - 1, dtype="int32", graph=g).shape == (2,)
    assert F.arange(0, 3, 0.5, dtype="float32", graph=g).shape == (6,)
