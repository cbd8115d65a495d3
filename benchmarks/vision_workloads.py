"""The vision workloads of ``fresh_process.py``: a MobileNet-v2 inverted residual block, a
transposed convolution layer, bilinear resizing, group norm and a small U-Net, each built the
same way for mgegraph, ONNX Runtime and PyTorch eager on the same weights.

    python benchmarks/fresh_process.py --threads 1 2 --rounds 3 mobilenet conv-transpose \
        resize group-norm unet

Each ``*_call(impl, workload)`` returns the function a child process times. Inference rows:
mgegraph's ``freeze=True`` plan (rules' kernel ways), ONNX Runtime on the model mgegraph exports
(or one ONNX node where the op is alone) and PyTorch under ``inference_mode``; training rows: a
``compile_train_step`` (or one plan of the gradients) against PyTorch eager's forward, backward
and update.
"""
from __future__ import annotations

import os
import tempfile

import numpy as np

SEED = 0


def _threads() -> int:
    return int(os.environ["OMP_NUM_THREADS"])


def _weight(rng, *shape):
    fan_in = int(np.prod(shape[1:]))
    return (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32)


def _ort_session(model_or_path):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = _threads(), 1
    return ort.InferenceSession(model_or_path, options, providers=["CPUExecutionProvider"])


def _ort_of_graph(g, outputs, x):
    """ONNX Runtime on the model mgegraph exports from graph ``g``."""
    import mgegraph.onnx as mo
    path = os.path.join(tempfile.mkdtemp(), "case.onnx")
    mo.export((g, outputs), path)
    session = _ort_session(path)
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: x})


def _torch_infer(fn, *args):
    import torch

    def run():
        with torch.inference_mode():
            return fn(*args)
    return run


# -- MobileNet-v2 block and a transposed convolution ---------------------------------------------
# block: 1x1 expand 32 -> 192 + ReLU6, 3x3 depthwise (stride 1 or 2) + ReLU6, 1x1 project to 32,
# the residual add at stride 1 (batch norm left out: a frozen plan folds it, as ORT does)
BLOCKS = {"s1 56": ((1, 32, 56, 56), 1), "s2 56": ((1, 32, 56, 56), 2),
          "s1 28": ((1, 32, 28, 28), 1)}


def _block_weights(rng):
    return {"w1": _weight(rng, 192, 32, 1, 1), "b1": _weight(rng, 192, 1)[:, 0],
            "w2": _weight(rng, 192, 1, 3, 3), "b2": _weight(rng, 192, 1)[:, 0],
            "w3": _weight(rng, 32, 192, 1, 1), "b3": _weight(rng, 32, 1)[:, 0]}


def _block(F, p, x, stride):
    """The block, written once for mgegraph.functional and torch.nn.functional."""
    h = F.relu6(F.conv2d(x, p["w1"], p["b1"]))
    h = F.relu6(F.conv2d(h, p["w2"], p["b2"], stride=stride, padding=1, groups=192))
    y = F.conv2d(h, p["w3"], p["b3"])
    return x + y if stride == 1 else y


def _transpose(F, p, x, stride=2):
    """64 -> 32 channels, 3x3 stride 2, padding 1, output_padding 1: 32x32 -> 64x64."""
    return F.conv_transpose2d(x, p["w"], p["b"], stride=2, padding=1, output_padding=1)


def _layer_call(impl, shape, weights, forward, stride):
    x = np.random.default_rng(SEED + 1).standard_normal(shape, dtype=np.float32)
    if impl == "torch":
        import torch
        params = {k: torch.from_numpy(v) for k, v in weights.items()}
        return _torch_infer(forward, torch.nn.functional, params, torch.from_numpy(x), stride)
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph._kernels.lowering import conv as lowering
    if impl.endswith("im2col"):  # the depthwise layers on the path they took before theirs
        lowering._depthwise_applies = lambda op, groups_dims: False
    if impl.endswith("direct 1x1"):  # the 1x1 layers on the direct GEMM, before the tiles
        lowering._pointwise_applies = lambda op, dtype: False
    g = mg.Graph()
    y = forward(F, {k: g.param(k, v) for k, v in weights.items()}, g.input("x", shape), stride)
    if impl == "onnxruntime":
        return _ort_of_graph(g, [y], x)
    plan = mg.compile([y], freeze=True, tune="rules")
    return lambda: plan.run({"x": x})


def mobilenet_call(impl: str, workload: str):
    shape, stride = BLOCKS[workload.split(" ", 1)[1]]
    return _layer_call(impl, shape, _block_weights(np.random.default_rng(SEED)), _block, stride)


def conv_transpose_call(impl: str, workload: str):
    rng = np.random.default_rng(SEED)
    weights = {"w": _weight(rng, 64, 32, 3, 3), "b": _weight(rng, 32, 1)[:, 0]}
    return _layer_call(impl, (1, 64, 32, 32), weights, _transpose, 2)


# -- bilinear resizing (align_corners=False: ONNX Resize's half_pixel, linear) --------------------
RESIZES = {"up": ((1, 64, 128, 128), (256, 256)), "down": ((8, 3, 224, 224), (112, 112))}


def resize_call(impl: str, workload: str):
    shape, size = RESIZES[workload.split(" ", 1)[1]]
    x = np.random.default_rng(SEED).standard_normal(shape, dtype=np.float32)
    if impl == "torch":
        import torch
        return _torch_infer(torch.nn.functional.interpolate, torch.from_numpy(x), size, None,
                            "bilinear", False)
    if impl == "onnxruntime":
        from onnx import TensorProto, helper, numpy_helper
        sizes = numpy_helper.from_array(np.asarray(shape[:2] + size, np.int64), "sizes")
        node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, None)], [sizes])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
        session = _ort_session(model.SerializeToString())
        return lambda: session.run(None, {"x": x})
    import mgegraph as mg
    import mgegraph.functional as F
    g = mg.Graph()
    plan = mg.compile([F.vision.interpolate(g.input("x", shape), size=size, mode="bilinear")])
    return lambda: plan.run({"x": x})


# -- group norm of 8x64x56x56 in 32 groups --------------------------------------------------------
# "infer": the forward pass; "train": forward and the gradients of x, weight and bias for a
# given dy ("mgegraph eager": a GradManager step of sum(y * dy))
NORM_SHAPE, GROUPS, EPS = (8, 64, 56, 56), 32, 1e-5


def _norm_data():
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal(NORM_SHAPE, dtype=np.float32)
    w, b = rng.standard_normal((2, NORM_SHAPE[1]), dtype=np.float32)
    return x, w, b, rng.standard_normal(NORM_SHAPE, dtype=np.float32)


def group_norm_call(impl: str, workload: str):
    train = workload.endswith("train")
    x, w, b, dy = _norm_data()
    if impl == "torch":
        import torch
        tx, tw, tb, tdy = (torch.from_numpy(a) for a in (x, w, b, dy))
        group_norm = torch.nn.functional.group_norm
        if not train:
            return _torch_infer(group_norm, tx, GROUPS, tw, tb, EPS)
        tx, tw, tb = (t.requires_grad_() for t in (tx, tw, tb))

        def step():
            tx.grad = tw.grad = tb.grad = None
            group_norm(tx, GROUPS, tw, tb, EPS).backward(tdy)
        return step
    if impl == "onnxruntime":
        from onnx import TensorProto, helper, numpy_helper
        node = helper.make_node("GroupNormalization", ["x", "w", "b"], ["y"],
                                num_groups=GROUPS, epsilon=EPS)
        graph = helper.make_graph(
            [node], "group_norm",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, NORM_SHAPE)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, NORM_SHAPE)],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
        session = _ort_session(model.SerializeToString())
        return lambda: session.run(None, {"x": x})
    import mgegraph as mg
    import mgegraph.functional as F
    if impl == "mgegraph eager":
        xt, wt, bt, dyt = (mg.tensor(a) for a in (x, w, b, dy))

        def eager_step():
            with mg.GradManager().attach([xt, wt, bt]) as gm:
                gm.backward(F.sum(F.nn.group_norm(xt, GROUPS, True, wt, bt, EPS) * dyt))
        return eager_step
    g = mg.Graph()
    xv, wv, bv = g.input("x", NORM_SHAPE), g.param("w", w), g.param("b", b)
    y = F.nn.group_norm(xv, GROUPS, True, wv, bv, EPS)
    if not train:
        plan = mg.compile([y])
        return lambda: plan.run({"x": x})
    dyv = g.input("dy", NORM_SHAPE)
    plan = mg.compile([y, *mg.grad(y, [xv, wv, bv], seed=dyv)])
    return lambda: plan.run({"x": x, "dy": dy})


# -- a small U-Net -------------------------------------------------------------------------------
# Two levels (32 and 64 channels), group norm, max pooling, a transposed convolution and a
# bilinear upsampling joined to the skip connection: inference on 1x3x128x128, a training step
# (SGD, per-pixel cross-entropy over 2 classes) on 4x3x64x64.
def unet_class(nn, relu, max_pool, upsample, concat):
    """The U-Net as a module class of ``nn`` (mgegraph.nn or torch.nn: the same constructors)."""
    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.enc1, self.gn1 = nn.Conv2d(3, 32, 3, padding=1), nn.GroupNorm(8, 32)
            self.enc2, self.gn2 = nn.Conv2d(32, 64, 3, padding=1), nn.GroupNorm(8, 64)
            self.up, self.reduce = nn.ConvTranspose2d(64, 32, 2, stride=2), nn.Conv2d(64, 32, 1)
            self.dec, self.gn3 = nn.Conv2d(64, 32, 3, padding=1), nn.GroupNorm(8, 32)
            self.head = nn.Conv2d(32, 2, 1)

        def forward(self, x):
            skip = relu(self.gn1(self.enc1(x)))
            deep = relu(self.gn2(self.enc2(max_pool(skip, 2))))
            joined = concat([skip, self.up(deep) + upsample(self.reduce(deep))])
            return self.head(relu(self.gn3(self.dec(joined))))
    return UNet


def _unet_pair():
    """The mgegraph U-Net and PyTorch's with the same weights."""
    import torch

    import mgegraph.functional as F
    from mgegraph import nn
    ours = unet_class(nn, F.relu, F.max_pool2d,
                      lambda v: F.vision.interpolate(v, scale_factor=2, mode="bilinear"),
                      lambda vs: F.concat(vs, axis=1))()
    tf = torch.nn.functional
    theirs = unet_class(torch.nn, tf.relu, tf.max_pool2d,
                        lambda v: tf.interpolate(v, scale_factor=2, mode="bilinear"),
                        lambda vs: torch.cat(vs, 1))()
    state = ours.state_dict()
    with torch.no_grad():
        for name, param in theirs.named_parameters():
            param.copy_(torch.from_numpy(np.ascontiguousarray(state[name])).reshape(param.shape))
    return ours, theirs


def unet_call(impl: str, workload: str):
    import torch  # the twin's weights come from mgegraph's, so every row builds both
    train = workload.endswith("train")
    rng = np.random.default_rng(SEED + 1)
    x = rng.standard_normal((4, 3, 64, 64) if train else (1, 3, 128, 128), dtype=np.float32)
    labels = rng.integers(0, 2, (x.shape[0], *x.shape[2:])).astype(np.int32)
    ours, theirs = _unet_pair()
    if impl == "torch":
        tx, tl = torch.from_numpy(x), torch.from_numpy(labels).long()
        if not train:
            return _torch_infer(theirs, tx)
        opt = torch.optim.SGD(theirs.parameters(), lr=0.01, momentum=0.9)

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(theirs(tx), tl).backward()
            opt.step()
        return step
    import mgegraph as mg
    import mgegraph.functional as F
    from mgegraph import optim
    if train:
        opt = optim.SGD(ours.parameters(), lr=0.01, momentum=0.9)
        step = mg.compile_train_step(ours, F.cross_entropy, opt, example_batch=(x, labels))
        return lambda: step(x, labels)
    ours.eval()
    predict = mg.compile_module(ours, example_inputs=(x,), freeze=True, tune="rules")
    if impl == "onnxruntime":
        path = os.path.join(tempfile.mkdtemp(), "unet.onnx")
        mg.onnx.export(predict, path)
        session = _ort_session(path)
        name = session.get_inputs()[0].name
        return lambda: session.run(None, {name: x})
    return lambda: predict(x)
