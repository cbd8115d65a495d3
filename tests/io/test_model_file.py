"""The model file: round trips (bitwise equal outputs), every refusal of a broken or hostile
file as one ModelFormatError, the runtime's import footprint, and fuzzing of real files."""
from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph.io import Limits
from mgegraph.io.graph_json import OP_VERSIONS
from mgegraph.ir.dims import evaluate
from mgegraph.ops import all_ops

ROOT = Path(__file__).resolve().parents[2]
RNG = np.random.default_rng(0)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def mlp_plan(share=False, **options):
    g = mg.Graph()
    x = g.input("x", (4, 3))
    w = g.param("w", rand(3, 5), share=share)
    b = g.param("b", rand(5), share=share)
    y = F.relu(x @ w + b) * 0.5
    z = F.softmax(y, axis=1)
    return mg.compile([z, (x[1:, ::2]).sum(axis=1)], **options)


def same(a, b):
    assert len(a) == len(b)
    for u, v in zip(a, b):
        assert u.dtype == v.dtype and u.shape == v.shape
        assert u.tobytes() == v.tobytes()


# -- round trips -----------------------------------------------------------------------------
@pytest.mark.parametrize("share", [False, True])
def test_a_plan_round_trips_bitwise(tmp_path, share):
    plan = mlp_plan(share)
    path = tmp_path / "m.mgm"
    mg.save(plan, path)
    predictor = runtime.load(path)
    x = rand(4, 3)
    same(predictor.run({"x": x}), plan.run({"x": x}))
    same(predictor.run([x]), plan.run({"x": x}))
    assert predictor.plan == plan  # the same kernels, slots, offsets and values
    assert predictor.input_names == ("x",) and predictor.input_shapes == ((4, 3),)
    assert predictor.input_dtypes == (np.dtype("float32"),)
    assert predictor.output_names == ("output0", "output1")
    assert predictor.output_shapes == ((4, 5), (3,))
    with pytest.raises(mg.FeedError):
        predictor.run([x, x])


def test_options_travel_with_the_model(tmp_path):
    memory = mg.planner.MemoryOptions(schedule="user", inplace=False)
    plan = mlp_plan(memory=memory, optimize=0, check_numerics=True)
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.load(tmp_path / "m.mgm").plan
    assert loaded.source.options == plan.source.options
    assert loaded.check_numerics and loaded == plan


def test_nan_and_infinite_attributes_and_consts(tmp_path):
    g = mg.Graph()
    x = g.input("x", (3,))
    y = F.clip(x, float("-inf"), float("inf")) * float("nan") + g.const(np.array([np.inf, -0.0, 1]))
    plan = mg.compile([y, F.leaky_relu(x, -0.0)])
    mg.save(plan, tmp_path / "m.mgm")
    x = rand(3)
    same(mg.load(tmp_path / "m.mgm").run([x]), plan.run({"x": x}))


def test_params_on_one_array_stay_one_array(tmp_path):
    g = mg.Graph()
    array = rand(3, 3)
    a, b = g.param("a", array, share=True), g.param("b", array, share=True)
    x = g.input("x", (3, 3))
    plan = mg.compile([x @ a + b])
    mg.save(plan, tmp_path / "m.mgm")
    with zipfile.ZipFile(tmp_path / "m.mgm") as zf:
        assert sorted(zf.namelist()) == ["arrays/0.npy", "model.json"]
    loaded = mg.load(tmp_path / "m.mgm")
    x = rand(3, 3)
    same(loaded.run([x]), plan.run({"x": x}))
    shared = [loaded.plan.values[s] for s in loaded.plan.shared]
    assert len(shared) == 2 and shared[0] is shared[1]


def test_state_updates_round_trip(tmp_path):
    g = mg.Graph()
    w = g.param("w", rand(4))
    x = g.input("x", (4,))
    g.assign(w, w + x)
    plan = mg.compile([w * 2.0])
    mg.save(plan, tmp_path / "m.mgm")
    loaded = mg.load(tmp_path / "m.mgm")
    x = rand(4)
    for _ in range(3):
        same(loaded.run([x]), plan.run({"x": x}))


def test_a_traced_function_round_trips_with_its_parameter_names(tmp_path):
    model = mg.nn.Sequential(mg.nn.Linear(6, 8), mg.nn.ReLU(), mg.nn.Linear(8, 3))
    model.eval()

    @mg.jit.trace
    def predict(features, scale):
        return F.softmax(model(features) * scale, axis=1)

    features, scale = rand(5, 6), np.float32(2.0) * np.ones((5, 1), np.float32)
    expected = predict(features, scale).numpy()
    mg.save(predict, tmp_path / "t.mgm")
    predictor = runtime.load(tmp_path / "t.mgm")
    assert predictor.input_names == ("features", "scale")
    (out,) = predictor.run({"features": features, "scale": scale})
    assert out.tobytes() == expected.tobytes()


class SmallCNN(mg.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = mg.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = mg.nn.BatchNorm2d(8)
        self.conv2 = mg.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = mg.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv(x)))
        x = F.relu(self.conv2(x))
        return self.fc(F.flatten(x, 1))



def small_cnn_plan():
    """SmallCNN in eval mode with batch-norm statistics that are not the defaults, compiled."""
    model = SmallCNN()
    for p in model.bn.parameters():
        p.value[...] = np.random.default_rng(11).uniform(0.5, 1.5, p.shape).astype(np.float32)
    model.eval()
    return mg.compile_module(model, (np.ones((2, 3, 8, 8), np.float32),)).plan

def test_a_compile_module_cnn_with_batch_norm_round_trips(tmp_path):
    model = SmallCNN()
    for p in model.bn.parameters():  # statistics that are not the defaults
        p.value[...] = RNG.uniform(0.5, 1.5, p.shape).astype(np.float32)
    model.eval()
    x = rand(2, 3, 8, 8)
    predict = mg.compile_module(model, (x,))
    mg.save(predict, tmp_path / "cnn.mgm")
    predictor = runtime.load(tmp_path / "cnn.mgm")
    assert predictor.input_names == ("input0",) and predictor.kind == "predictor"
    assert predictor(x).tobytes() == predict(x).tobytes()
    assert predictor.plan == predict.plan


def test_a_state_dict_round_trips(tmp_path):
    model = SmallCNN()
    state = model.state_dict()
    mg.save(state, tmp_path / "w.mgm")
    loaded = mg.load(tmp_path / "w.mgm")
    assert list(loaded) == list(state)
    for name in state:
        assert loaded[name].dtype == state[name].dtype
        assert loaded[name].tobytes() == state[name].tobytes()
    SmallCNN().load_state_dict(loaded)
    with pytest.raises(mg.ModelFormatError, match="state dict"):
        runtime.load(tmp_path / "w.mgm")


def test_unsaveable_objects_are_refused(tmp_path):
    with pytest.raises(mg.GraphError):
        mg.save(object(), tmp_path / "x.mgm")
    with pytest.raises(mg.GraphError, match=r"save\(\): dict\['a'\]\[1\] is a builtin_function"):
        mg.save({"a": [1, len]}, tmp_path / "x.mgm")  # nested numbers save; a function never
    assert not (tmp_path / "x.mgm").exists()


def test_every_op_has_a_version():
    assert set(all_ops()) <= set(OP_VERSIONS), sorted(set(all_ops()) - set(OP_VERSIONS))


def test_the_runtime_imports_no_autodiff_nn_or_optim(tmp_path):
    mg.save(mlp_plan(), tmp_path / "m.mgm")
    code = (f"import sys, numpy as np\nimport mgegraph.runtime as runtime\n"
            f"p = runtime.load({str(tmp_path / 'm.mgm')!r})\n"
            "p.run([np.ones((4, 3), np.float32)])\n"
            "bad = [m for m in ('mgegraph.autodiff', 'mgegraph.nn', 'mgegraph.optim', "
            "'mgegraph.train', 'mgegraph.eager') if m in sys.modules]\n"
            "assert not bad, bad\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]


def test_lazy_names_still_work():
    assert mg.nn.Linear is mg.module.Linear and mg.optim.SGD is mg.optimizer.SGD
    assert mg.trace is mg.jit.trace and mg.grad is mg.autodiff.grad
    assert F.nn.cross_entropy is F.cross_entropy
    assert set(mg.__all__) <= set(dir(mg))
    with pytest.raises(AttributeError):
        mg.no_such_name  # noqa: B018


# -- refusals ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("m") / "m.mgm"
    mg.save(mlp_plan(), path)
    return path.read_bytes()


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def rezip(files: dict, extra=(), method=zipfile.ZIP_DEFLATED, fix_sums=True) -> bytes:
    """A zip of ``files`` ({name: bytes or JSON object}); the JSON's checksums made to match."""
    files = dict(files)
    description = files["model.json"]
    if isinstance(description, bytes) and fix_sums:
        description = json.loads(description)
    if not isinstance(description, (bytes, str)):
        if fix_sums:
            description["members"] = {
                name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                for name, data in files.items() if name != "model.json"}
        files["model.json"] = json.dumps(description).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as zf:
        for name, data in list(files.items()) + list(extra):
            zf.writestr(name, data)
    return buffer.getvalue()


def description(data: bytes) -> dict:
    return json.loads(members(data)["model.json"])


def refused(tmp_path, data: bytes, match: str, limits=None):
    path = tmp_path / "bad.mgm"
    path.write_bytes(data)
    with pytest.raises(mg.ModelFormatError, match=match):
        mg.load(path, limits=limits)


def with_json(data: bytes, change) -> bytes:
    files = members(data)
    d = json.loads(files["model.json"])
    change(d)
    files["model.json"] = d
    return rezip(files)


def first(d, op):
    return next(n for n in d["graph"]["nodes"] if n["op"] == op)


def test_not_a_zip_or_wrong_magic_or_version(tmp_path, model_bytes):
    refused(tmp_path, b"hello", "not a zip")
    refused(tmp_path, with_json(model_bytes, lambda d: d.update(magic="onnx")), "wrong magic")
    refused(tmp_path, with_json(model_bytes, lambda d: d.update(format_version=3)),
            "unknown format version")
    refused(tmp_path, with_json(model_bytes, lambda d: d.update(format_version=True)),
            "unknown format version")
    refused(tmp_path, rezip({"other.txt": b"x", "model.json": b"{}"}), "unexpected member")


def test_truncated_and_corrupted_members(tmp_path, model_bytes):
    refused(tmp_path, model_bytes[: len(model_bytes) // 2], "not a zip|truncated|corrupted")
    files = members(model_bytes)
    files["arrays/0.npy"] = files["arrays/0.npy"][:-4]
    refused(tmp_path, rezip(files, fix_sums=False, method=zipfile.ZIP_STORED)
            .replace(b"x", b"x"), "truncated|bytes")
    # one flipped byte inside a stored array: the zip's CRC or our checksum catches it
    at = model_bytes.index(b"\x93NUMPY") + 140  # in the data of array 0
    flipped = model_bytes[:at] + bytes([model_bytes[at] ^ 0xFF]) + model_bytes[at + 1:]
    refused(tmp_path, flipped, "corrupted|checksum")


def test_checksum_mismatch(tmp_path, model_bytes):
    files = members(model_bytes)
    d = json.loads(files["model.json"])
    d["members"]["arrays/0.npy"]["sha256"] = "0" * 64
    files["model.json"] = d
    refused(tmp_path, rezip(files, fix_sums=False), "checksum mismatch")
    files["arrays/0.npy"] = files["arrays/0.npy"][:-4] + b"\0\0\0\0"  # same size, new bytes
    refused(tmp_path, rezip(files, fix_sums=False), "checksum mismatch")


def test_unknown_op_or_op_version(tmp_path, model_bytes):
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(op="evil")),
            "unknown op 'evil'")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(version=2)),
            "op version 2 is unknown")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(op="assign")),
            "unknown op")
    # an op that is not a string (found by the fuzzer: a list or an object was looked up or
    # sliced, a TypeError)
    for op in (["matmul"], {"op": "matmul"}, 3, None):
        refused(tmp_path, with_json(model_bytes, lambda d, op=op: first(d, "matmul").update(op=op)),
                "op must be a string")


def test_wrong_attribute_and_input_types(tmp_path, model_bytes):
    def attr(value):
        return lambda d: first(d, "softmax")["attrs"].update(axis=value)
    refused(tmp_path, with_json(model_bytes, attr("one")), "softmax")
    refused(tmp_path, with_json(model_bytes, attr([1])), "not an attribute value")
    refused(tmp_path, with_json(model_bytes, attr({"tuple": [{"tuple": [1]}]})), "softmax")
    refused(tmp_path, with_json(model_bytes, attr(9)), "axis")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "softmax")["attrs"].update(
        bogus=1)), "unknown attribute")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(inputs=[0, 0])),
            "matmul")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(inputs=[0, 99])),
            "earlier value")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(inputs=["0", 1])),
            "earlier value")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul")["outputs"][0].update(
        shape=[4, 6])), "the op's rule gives")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "param")["outputs"][0].update(
        dtype="float64")), "holds float32")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "input")["outputs"][0].update(
        dtype="complex64")), "dtype")
    refused(tmp_path, with_json(model_bytes, lambda d: d["options"].update(memory=[1])),
            "options.memory")
    refused(tmp_path, with_json(model_bytes, lambda d: d["options"].update(evil=1)), "options")
    # how this machine chooses its kernels' ways, and the compiler's private store, are not a
    # file's to say: a file cannot make loading it measure anything
    refused(tmp_path, with_json(model_bytes, lambda d: d["options"].update(tune="measure")),
            "options")
    refused(tmp_path, with_json(model_bytes, lambda d: d["options"].update(_prologues=True)),
            "options")
    refused(tmp_path, with_json(model_bytes, lambda d: d["outputs"][0].update(var=10**6)),
            "unknown value")


def test_shapes_and_sizes_over_the_limits(tmp_path, model_bytes):
    def huge_input(d):
        first(d, "input")["outputs"][0]["shape"] = [2**40, 2**20]
    refused(tmp_path, with_json(model_bytes, huge_input), "over the limit")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "input")["outputs"][0].update(
        shape=[1] * 40)), "at most 32")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "input")["outputs"][0].update(
        shape=[-1, 3])), "non-negative")
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "input")["outputs"][0].update(
        shape=[4.0, 3])), "non-negative ints")
    refused(tmp_path, model_bytes, "over the limit", Limits(max_file_bytes=100))
    refused(tmp_path, model_bytes, "over the limit", Limits(max_member_bytes=64))
    refused(tmp_path, model_bytes, "over the limit", Limits(max_plan_bytes=64))
    refused(tmp_path, model_bytes, "at most 2 nodes", Limits(max_nodes=2))


def test_member_names_with_dots_or_absolute_paths(tmp_path, model_bytes):
    files = members(model_bytes)
    for name in ("../evil.npy", "/etc/passwd", "arrays/../x.npy", "arrays/0.npy/", "C:\\x.npy",
                 "arrays/01.npy"):
        refused(tmp_path, rezip(files, extra=[(name, b"x")]), "unexpected member")
    d = json.loads(files["model.json"])
    first(d, "param")["array"] = "../arrays/0.npy"
    files["model.json"] = d
    refused(tmp_path, rezip(files), "not one of the listed members")


def test_duplicate_members_and_unlisted_or_unused_ones(tmp_path, model_bytes):
    files = members(model_bytes)
    with pytest.warns(UserWarning):  # zipfile warns of the duplicate name it writes
        data = rezip(files, extra=[("arrays/0.npy", files["arrays/0.npy"])])
    refused(tmp_path, data, "appears twice")
    refused(tmp_path, rezip(files, extra=[("arrays/9.npy", b"x")], fix_sums=False), "differ")
    refused(tmp_path, rezip({**files, "arrays/9.npy": files["arrays/0.npy"]}),
            "nothing uses them")


def test_zip_bomb(tmp_path, model_bytes):
    files = members(model_bytes)
    bomb = b"\0" * (64 << 20)
    refused(tmp_path, rezip({**files, "arrays/9.npy": bomb}), "zip bomb")
    d = json.loads(files["model.json"])
    refused(tmp_path, rezip({**files, "model.json": b" " * (80 << 20)}, fix_sums=False),
            "zip bomb|limit")
    # a central directory that lies about the size: zipfile never reads past what it says,
    # and the CRC check fails
    assert d["magic"] == "mgegraph-model"


def test_json_tricks(tmp_path, model_bytes):
    files = members(model_bytes)
    text = files["model.json"].decode()
    for bad, match in [(text.replace('"magic"', '"magic":"x","magic"', 1), "repeats the key"),
                       (text[:-1], "not valid JSON"), ("[1]", "not a JSON object"),
                       (text.replace('"shape":[4,3]', '"shape":[NaN,3]', 1), "constant NaN"),
                       ("[" * 100000 + "]" * 100000, "not valid JSON"),
                       (text.replace('"shape":[4,3]', '"shape":[' + "9" * 5000 + ",3]", 1),
                        "not valid JSON"),
                       (b"\xff\xfe".decode("latin-1"), "not valid JSON")]:
        data = rezip({**files, "model.json": bad.encode("latin-1") if bad.startswith("\xff")
                      else bad.encode()}, fix_sums=False)
        refused(tmp_path, data, match)


def test_refused_files_run_nothing(tmp_path, model_bytes, monkeypatch):
    from mgegraph import compiler
    calls = []
    monkeypatch.setattr(compiler, "compile", lambda *a, **k: calls.append(a))
    refused(tmp_path, with_json(model_bytes, lambda d: first(d, "matmul").update(version=9)),
            "version")
    assert not calls


# -- fuzzing -------------------------------------------------------------------------------------
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
FUZZ_LIMITS = Limits(max_tensor_bytes=1 << 24, max_plan_bytes=1 << 26, max_member_bytes=1 << 22,
                     max_total_bytes=1 << 23)


def fuzz_load(tmp_path, data: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(data)
    try:
        loaded = mg.load(path, limits=FUZZ_LIMITS)
    except mg.ModelFormatError:
        return
    if isinstance(loaded, dict):
        return
    if not loaded.symbolic:  # a mutation that still makes a valid model runs
        loaded.run([np.zeros(s, d) for s, d in zip(loaded.input_shapes, loaded.input_dtypes)])
        return
    # a symbolic one runs at every name = 2, or says in a FeedError why that binding is not
    # one it takes (a bound, a recorded fact, a size over the limits)
    two = {name: 2 for name in loaded.plan.names}
    try:
        loaded.run([np.zeros([evaluate(d, two) for d in s], d)
                    for s, d in zip(loaded.input_shapes, loaded.input_dtypes)])
    except mg.FeedError:
        pass


@st.composite
def byte_mutations(draw, data: bytes):
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "set":
            data[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del data[at:at + draw(st.integers(1, 64))]
        else:
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        if not data:
            break
    return bytes(data)


# what a named dimension's text may become: other names, expressions, garbage, code
DIM_TEXTS = st.sampled_from(["batch", "n", "2*batch", "batch - 9", "-1", "0", "batch//0",
                             "(batch + 1)//2", "__import__('os')", "batch*" * 17 + "1",
                             "(" * 40 + "batch" + ")" * 40, "9" * 25]) | st.text(max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(["float32", "int64", "relu", "arrays/0.npy", "x"])
    | st.builds(lambda text: {"dim": text}, DIM_TEXTS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["tuple", "float", "shape", "dtype", "op", "name", "dim"]), inner,
        max_size=3),
    max_leaves=8)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


@st.composite
def json_mutations(draw, files: dict):
    d = json.loads(files["model.json"])
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(list(paths(d))[1:]))
        parent = d
        for key in where[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "number", "duplicate"]))
        if action == "delete":
            del parent[where[-1]]
        elif action == "number" and type(parent[where[-1]]) is int:
            parent[where[-1]] += draw(st.sampled_from([-1, 1, 2**31, -2**62, 10**6]))
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(parent[where[-1]])
        else:
            parent[where[-1]] = draw(JSON_VALUES)
        if not isinstance(d, dict) or not d:
            break
    return rezip({**files, "model.json": d}, fix_sums=draw(st.booleans()))


@pytest.fixture(scope="module")
def fuzz_models(tmp_path_factory) -> list[bytes]:
    folder = tmp_path_factory.mktemp("fuzz")
    model = SmallCNN()
    model.eval()
    g = mg.Graph()  # the CNN again, its batch named, with a recorded fact (batch == n)
    x, scale = g.input("x", ("batch", 3, 8, 8)), g.input("scale", ("n", 1))
    symbolic = mg.compile([model(x) * scale], bounds={"batch": (1, 64)})
    saved = [(mlp_plan(), "mlp"), (mg.compile_module(model, (rand(1, 3, 8, 8),)), "cnn"),
             (model.state_dict(), "state"), (symbolic, "symbolic")]
    out = []
    for obj, name in saved:
        mg.save(obj, folder / name)
        out.append((folder / name).read_bytes())
    return out


def run_fuzz(tmp_path, fuzz_models, examples: int):
    settings = hypothesis.settings(max_examples=examples, deadline=None, database=None,
                                   suppress_health_check=list(hypothesis.HealthCheck))

    @settings
    @hypothesis.given(st.data())
    def bytes_case(data):
        original = data.draw(st.sampled_from(fuzz_models))
        fuzz_load(tmp_path, data.draw(byte_mutations(original)), "b.mgm")

    @settings
    @hypothesis.given(st.data())
    def json_case(data):
        original = data.draw(st.sampled_from(fuzz_models))
        fuzz_load(tmp_path, data.draw(json_mutations(members(original))), "j.mgm")

    bytes_case()
    json_case()


def test_fuzz_loader_raises_only_model_format_errors(tmp_path, fuzz_models):
    run_fuzz(tmp_path, fuzz_models, 250)


@pytest.mark.slow
def test_fuzz_loader_thousands_of_cases(tmp_path, fuzz_models, request):
    # the default run stays short: this runs when asked for, ``pytest -m slow tests/io``
    if "slow" not in (request.config.getoption("markexpr") or "").replace("not slow", ""):
        pytest.skip("thousands of fuzz cases: run with -m slow")
    run_fuzz(tmp_path, fuzz_models, 2500)
