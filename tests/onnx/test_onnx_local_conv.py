"""ONNX has no locally connected or region-restricted convolution: exporting local_conv2d or
region_restricted_conv (or their gradients) is a clear refusal naming the op."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")  # not "onnx": tests/onnx would import as it

import mgegraph as mg
import mgegraph.functional as F
import mgegraph.onnx as mo


def test_export_refuses_the_local_conv_ops_by_name():
    g = mg.Graph()
    x = g.input("x", (1, 2, 5, 5), "float32")
    local = F.local_conv2d(x, g.param("wl", np.ones((5, 5, 2, 3, 3, 2), np.float32)), padding=1)
    with pytest.raises(mo.OnnxExportError, match=r"without an ONNX form: local_conv2d \(x1\)"):
        mo.export((g, [local]))
    rin, rout = g.input("rin", (1, 5, 5), "int32"), g.input("rout", (1, 5, 5), "int32")
    region = F.region_restricted_conv(x, g.param("wr", np.ones((2, 1, 1, 3, 3), np.float32)),
                                      rin, rout, padding=1, groups=2)
    with pytest.raises(mo.OnnxExportError, match=r"region_restricted_conv \(x1\)"):
        mo.export((g, [region]))
    grads = mg.grad(F.sum(region), [x])
    with pytest.raises(mo.OnnxExportError, match=r"region_restricted_conv_backward \(x1\)"):
        mo.export((g, grads))
