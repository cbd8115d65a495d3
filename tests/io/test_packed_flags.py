"""The flags word of packed int8 weights held as a const (a model file, a hand-built graph).
The kernels trust it: QG_PAIRS_FIT runs AVX2's vpmaddubsw tile, which saturates on weights whose
k pairs do not fit int16, and QG_ZERO_POINTS says whether the zero points are read. So a word
its bytes do not bear out is refused when the graph is compiled (or the file loaded), naming the
op; a word without PAIRS_FIT on weights that fit (packs from before it) still runs, bitwise."""
import io

import numpy as np
import pytest
from quant_reference import quantized_conv2d
from test_model_file import members, rezip
from test_quantized_pack_model_file import WP, XP

import mgegraph as mg
from mgegraph.ir.errors import GraphError
from mgegraph.ops.builder import apply
from mgegraph.ops.quantized_pack import PAIRS_FIT, ZERO_POINTS, pack_weight_array, pairs_fit

RNG = np.random.default_rng(5)
ATTRS = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1,
         "out_dtype": "uint8", "out_scale": 0.4, "out_zero_point": 3, "relu": False}
# full-range weights (a k pair of 127s: 255 x 254 overflows int16) and 7-bit ones
FULL = RNG.integers(-128, 128, (20, 6, 3, 3)).astype(np.int8)
FULL[:, 0, 0, :2] = 127
SEVEN = RNG.integers(-64, 64, (20, 6, 3, 3)).astype(np.int8)
X = RNG.integers(200, 256, (1, 6, 9, 9)).astype(np.uint8)  # large: a saturation would show


def packed_of(w):
    return pack_weight_array(w, (0,), None, 1, x_zero_point=7, x_dtype="uint8")


def with_flags(packed, flags):
    forged = packed.copy()
    forged[-1] = flags
    return forged


def plan_of(packed):
    g = mg.Graph()
    y = apply("quantized_conv2d_packed", (g.input("x", X.shape, "uint8", quant=XP),
                                          g.const(packed)),
              weight_shape=FULL.shape, weight_scales=WP.scales, x_zero_point=7,
              x_dtype="uint8", **ATTRS)
    return mg.compile([y])


def test_the_packs_say_what_their_bytes_prove():
    assert packed_of(FULL)[-1] == 0 and packed_of(SEVEN)[-1] == PAIRS_FIT
    assert not pairs_fit(FULL.reshape(20, -1)) and pairs_fit(SEVEN.reshape(20, -1))


@pytest.mark.parametrize("flags, says", [
    (PAIRS_FIT, "claim that every k pair's products fit int16"),
    (ZERO_POINTS, "disagrees with their zero points"),
    (4, "bits no kernel knows"),
])
def test_a_forged_flags_word_is_refused_naming_the_op(flags, says):
    with pytest.raises(GraphError, match=f"quantized_conv2d_packed.*{says}"):
        plan_of(with_flags(packed_of(FULL), flags))


@pytest.mark.parametrize("w", [FULL, SEVEN], ids=["full", "7-bit"])
def test_a_word_without_pairs_fit_runs_bitwise(w):
    want = quantized_conv2d(X, XP, w, WP, None, **ATTRS)
    np.testing.assert_array_equal(plan_of(packed_of(w)).run({"x": X})[0], want)
    np.testing.assert_array_equal(plan_of(with_flags(packed_of(w), 0)).run({"x": X})[0], want)


def test_a_model_file_with_a_forged_word_is_refused(tmp_path):
    mg.save(plan_of(packed_of(FULL)), tmp_path / "m.mgm")
    files = members((tmp_path / "m.mgm").read_bytes())
    (name,) = [k for k in files if k.startswith("arrays/")]
    packed = np.load(io.BytesIO(files[name]))
    buffer = io.BytesIO()
    np.save(buffer, with_flags(packed, PAIRS_FIT))
    (tmp_path / "bad.mgm").write_bytes(rezip({**files, name: buffer.getvalue()}))
    with pytest.raises(mg.ModelFormatError, match="quantized_conv2d_packed.*PAIRS_FIT"):
        mg.load(tmp_path / "bad.mgm")
