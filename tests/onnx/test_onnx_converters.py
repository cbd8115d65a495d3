"""The converter table: the families' tables merge into one, and an entry that names no ONNX
op, maps to something that is not a converter or repeats another family's op is refused by
name."""
import types

import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")

from mgegraph.onnx import (
    convert_attention,
    convert_linalg,
    convert_math,
    convert_ml,
    convert_nn,
    convert_quant,
    convert_recurrent,
    convert_resample,
    convert_rnn,
    convert_scan,
    convert_sequence,
    convert_shape,
    convert_sorting,
    convert_vision,
    converters,
)


def _family(name, table):
    family = types.ModuleType(name)
    family.CONVERTERS = table
    return family


def test_the_table_is_every_familys_entries():
    families = (convert_math, convert_nn, convert_shape, convert_vision, convert_resample,
                convert_sorting, convert_sequence,
                convert_attention, convert_scan, convert_recurrent, convert_linalg)  # the attention family and Scan
    families += (convert_rnn,)  # the recurrent layers
    families += (convert_quant,)  # QuantizeLinear, DequantizeLinear
    families += (convert_ml,)  # ai.onnx.ml: Binarizer, TreeEnsemble
    assert sum(len(f.CONVERTERS) for f in families) == len(converters.CONVERTERS)
    for family in families:
        for op, convert in family.CONVERTERS.items():
            assert converters.CONVERTERS[op] is convert


@pytest.mark.parametrize("table, message", [
    ({"Relu": lambda cx, ins, at: ins}, "'Relu' is converted in mgegraph.onnx.convert_math"),
    ({"Relux": lambda cx, ins, at: ins}, "'Relux' is no op of ONNX's default domain"),
    ({"Det": "det"}, "'Det' maps to 'det', which is not callable"),
])
def test_merge_refuses_a_bad_entry_by_name(table, message):
    with pytest.raises(ValueError, match=message) as info:
        converters.merge(convert_math, _family("extra", table))
    assert str(info.value).startswith("extra: ONNX op ")
