"""``mg.save`` / ``mg.load`` of MegEngine's objects (a Module, a tensor, nested state) to names
and file objects, stored without pickling; hostile object files are refused."""
import io

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.module as M
from mgegraph.io.container import write

RNG = np.random.default_rng(0)


class Shared(M.Module):
    def __init__(self):
        super().__init__()
        self.conv0 = M.Conv2d(1, 2, 3, bias=False)
        self.conv1 = M.Conv2d(1, 2, 3, bias=False)
        self.conv1.weight = self.conv0.weight
        self.bn = M.BatchNorm2d(2)
        self.blocks = [M.Linear(2, 2), {"act": M.ReLU()}]
        self.scale = 0.5

    def forward(self, x):
        return self.bn(self.conv0(x) + self.conv1(x)) * self.scale


def _round_trip(obj, **load):
    with io.BytesIO() as f:
        mg.save(obj, f)
        f.seek(0)
        return mg.load(f, **load)


def test_a_module_loads_as_the_same_class_with_shared_weights_shared(tmp_path):
    net = Shared().eval()
    net.bn.running_mean[...] = RNG.standard_normal((1, 2, 1, 1)).astype(np.float32)
    x = mg.tensor(RNG.standard_normal((2, 1, 6, 6)).astype(np.float32))
    for loaded in (_round_trip(net), _path_round_trip(net, tmp_path)):
        assert type(loaded) is Shared and not loaded.training and loaded.scale == 0.5
        assert loaded.conv0.weight is loaded.conv1.weight
        assert loaded.conv0.weight is not net.conv0.weight
        assert isinstance(loaded.blocks[1]["act"], M.ReLU)
        np.testing.assert_array_equal(loaded(x).numpy(), net(x).numpy())
    # two files, two weights (as MegEngine's saving of each conv alone)
    assert _round_trip(net.conv0).weight is not _round_trip(net.conv1).weight


def _path_round_trip(obj, tmp_path):
    mg.save(obj, tmp_path / "obj.mgm")
    return mg.load(str(tmp_path / "obj.mgm"))


def test_nested_state_and_tensors_keep_their_values_and_types():
    state = {"name": "simple", "step": 3, "lr": 0.1, "nan": float("nan"), "none": None,
             "pair": (1, "a"), 7: [np.arange(3), np.float32(2.5), True],
             "weights": {"w": np.ones((2, 2), np.float16)},
             "t": mg.tensor(np.array([1, 2], np.int32))}
    loaded = _round_trip(state, map_location="cpu0")
    assert loaded["name"] == "simple" and loaded["step"] == 3 and loaded["pair"] == (1, "a")
    assert np.isnan(loaded["nan"]) and loaded["none"] is None and loaded[7][2] is True
    np.testing.assert_array_equal(loaded[7][0], np.arange(3))
    assert loaded[7][1] == np.float32(2.5) and isinstance(loaded[7][1], np.float32)
    assert loaded["weights"]["w"].dtype == np.float16
    assert isinstance(loaded["t"], mg.Tensor) and loaded["t"].dtype == np.int32
    # a flat dict of arrays (a state dict) loads as a dict of arrays, as before
    assert set(_round_trip(Shared().state_dict())) >= {"bn.running_mean", "conv0.weight"}


def test_what_is_not_data_is_refused_when_saving_naming_where_it_sits():
    with pytest.raises(mg.GraphError, match=r"save\(\): dict\['fn'\] is a function"):
        mg.save({"fn": lambda: 0}, io.BytesIO())

    class Local(M.Module):
        def forward(self, x):
            return x

    with pytest.raises(mg.GraphError, match=r"defined inside a function"):
        mg.save(Local(), io.BytesIO())


def _hostile(tmp_path, obj, arrays=()):
    path = tmp_path / "bad.mgm"
    write(path, {"kind": "object", "object": obj}, list(arrays))
    return path


@pytest.mark.parametrize("obj, message", [
    ({"module": "os:system", "attributes": {"dict": []}, "id": 0}, r"'os:system' is not a Module"),
    ({"module": "no_such_module_anywhere:Net", "attributes": {"dict": []}, "id": 0},
     r"is not a Module class of a module imported now"),
    ({"ref": 3}, r"a reference to 3"),
    ({"list": [{"tensor": 1, "id": "x"}]}, r"object\[0\]: a tensor or module needs a new id"),
    ({"eval": "print(1)"}, r"unknown node \['eval'\]"),
    ({"dict": [[{"list": [1]}, 2]]}, r"a dict key must be hashable"),
    ([1, 2], r"list is not a value of a saved object"),
])
def test_a_hostile_object_file_is_refused_before_anything_runs(tmp_path, obj, message):
    with pytest.raises(mg.ModelFormatError, match=message):
        mg.load(_hostile(tmp_path, obj))


def test_an_array_that_is_not_the_described_one_is_refused(tmp_path):
    node = {"ndarray": {"array": "arrays/0.npy", "shape": [3], "dtype": "float32"}}
    with pytest.raises(mg.ModelFormatError, match=r"holds float32\[2\]"):
        mg.load(_hostile(tmp_path, node, [np.zeros(2, np.float32)]))


def test_load_refuses_a_device_and_a_text_file_and_load_predictor_an_object(tmp_path):
    with pytest.raises(mg.GraphError, match=r"map_location='gpu0'"):
        _round_trip([1], map_location="gpu0")
    path = tmp_path / "x.mgm"
    mg.save([1, 2], path)
    with open(path, encoding="latin-1") as text, pytest.raises(mg.ModelFormatError,
                                                               match="binary mode"):
        mg.load(text)
    with pytest.raises(mg.ModelFormatError, match="holds a state dict or a saved object"):
        mg.io.load_predictor(path)


def test_dtypes_round_trip_quantized_ones_with_their_scale():
    from mgegraph.dtype import get_scale, get_zero_point, qint8, quint8
    saved = {"plain": np.dtype(np.float32), "q": qint8(0.25), "u": quint8(0.5, 7)}
    loaded = _round_trip(saved)
    assert loaded == saved
    assert get_scale(loaded["q"]) == 0.25 and get_zero_point(loaded["u"]) == 7
    assert loaded["plain"].metadata is None


@pytest.mark.parametrize("node, message", [
    ({"dtype": "complex128"}, r"is not a dtype a file may hold"),
    ({"dtype": "int8", "mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.1,
                                     "zero_point": 3}}, r"not a quantized dtype stored as int8"),
    ({"dtype": "uint8", "mgb_dtype": {"name": "Quantized8Asymm", "scale": -1.0,
                                      "zero_point": 3}}, r"scale must be positive"),
    ({"dtype": "uint8", "mgb_dtype": {"name": "Quantized8Asymm", "scale": 0.1,
                                      "zero_point": 300}}, r"zero_point should be within"),
    ({"dtype": "int8", "mgb_dtype": {"name": "QuantizedS8", "scale": 0.1, "code": 1}},
     r"fields are name, scale and zero_point"),
])
def test_a_malformed_dtype_is_refused(tmp_path, node, message):
    with pytest.raises(mg.ModelFormatError, match=message):
        mg.load(_hostile(tmp_path, node))
