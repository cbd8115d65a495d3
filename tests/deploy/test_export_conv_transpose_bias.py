"""The C runtime's transposed convolution with the bias the epilogue pass folds into it
(conv2d_backward_data_f32's has_bias, its own data_bias step): the exported plan against the
Python executor's, and a corrupt bias field or a bias buffer too short refused under the
sanitizers."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph.deploy import export_c

from .cbuild import SANITIZE, assert_refused, blob_calls, cc, exported_run, make, patched

HAS_BIAS, CIN = 16, 1  # kernel_abi/conv.py's FIELDS


def _plan(options, xs=(2, 4, 5, 6), wshape=(4, 3, 3, 3)):
    rng = np.random.default_rng(54)
    g = mg.Graph()
    x = g.input("x", xs, "float32")
    groups = options.get("groups", 1)
    w = g.param("w", rng.standard_normal(wshape, dtype=np.float32))
    b = g.param("b", rng.standard_normal(wshape[1] * groups, dtype=np.float32))
    plan = mg.compile([F.conv_transpose2d(x, w, b, **options)])
    (ins,) = [i for i in plan.instructions if i.op == "conv2d_backward_data"]
    assert len(plan.instructions) == 1 and ins.ints[HAS_BIAS] == 1  # the add folded in
    return plan, {"x": rng.standard_normal(xs, dtype=np.float32)}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("options", [
    {"stride": 2, "padding": 1, "output_padding": 1}, {"stride": 2, "groups": 2},
    {"padding": 1},
], ids=["strided", "grouped", "stride-1"])
def test_a_biased_transposed_convolution_matches(tmp_path, options, threads):
    cc()
    wshape = (4, 2, 2, 2) if options.get("groups") else (4, 3, 3, 3)
    plan, feeds = _plan(options, wshape=wshape)
    got = exported_run(tmp_path, plan, feeds, threads=threads)
    np.testing.assert_allclose(got[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-5)


def test_corrupt_bias_fields_are_refused_under_the_sanitizers(tmp_path):
    cc()
    plan, feeds = _plan({"stride": 2, "padding": 1})
    exported = export_c(plan, tmp_path / "out")
    make(exported.directory, cflags=SANITIZE)
    blob = (exported.directory / "model.mgr").read_bytes()
    ((_, at, _),) = [c for c in blob_calls(blob) if c[0] == "conv2d_backward_data_f32"]
    cases = {
        "no bias": (patched(blob, at + 8 * HAS_BIAS, 0), "wants buffers w, dy, [bias,] dx"),
        "two": (patched(blob, at + 8 * HAS_BIAS, 2), "has_bias must be 0 or 1"),
        # more channels than the bias holds: the bias is checked before dx's bytes
        "channels": (patched(blob, at + 8 * CIN, 12), "fewer than cin"),
    }
    got = assert_refused(exported.directory, cases, feeds, ["x"])
    np.testing.assert_allclose(got[0], plan.run(feeds)[0], rtol=1e-5, atol=1e-5)
