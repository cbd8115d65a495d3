"""docs/ops.md is the registries' own table: a new op (or a kernel, a dtype, an ONNX writer)
changes the page, which must be written again."""
import pytest

from mgegraph.tools import ops_table

pytest.importorskip("onnx")


def test_the_page_matches_the_registries():
    assert ops_table.PAGE.read_text() == ops_table.render(), (
        "docs/ops.md is out of date: run python -m mgegraph.tools.ops_table --write")


def test_every_op_has_one_row():
    from mgegraph.ops.registry import all_ops

    text = ops_table.render()
    for name in all_ops():
        assert text.count(f"| `{name}` |") == 1, name
