"""The C runtime has no int8 transposed convolution or batched matmul yet: export_c refuses a
plan with them, naming each kernel and its op, and writes nothing."""
from __future__ import annotations

import numpy as np
import pytest

import mgegraph as mg
from mgegraph.deploy import ExportError, export_c
from mgegraph.ir.quant import per_tensor
from mgegraph.ops.quantize import dequantize, quantize
from mgegraph.ops.quantized import quantized_batch_matmul, quantized_conv_transpose2d


def test_the_int8_transposed_and_batched_ops_are_refused_by_name(tmp_path):
    g = mg.Graph()
    xq = quantize(g.input("x", (1, 4, 3, 3)), 0.05, 0, "int8")
    w = g.const(np.ones((4, 2, 2, 2), np.int8), quant=per_tensor(0.01))
    y = quantized_conv_transpose2d(xq, w, stride=2, out_scale=0.1)
    a = g.const(np.ones((1, 3, 6), np.int8), quant=per_tensor(0.01))
    z = quantized_batch_matmul(a, y.reshape((1, 6, 12)), out_scale=0.1)
    with pytest.raises(ExportError, match=r"quantized_batch_matmul_i8 \(op quantized_batch_matmul"
                                          r"\); quantized_conv_transpose2d_i8 \(op "
                                          r"quantized_conv_transpose2d\)"):
        export_c(mg.compile([dequantize(z)]), tmp_path / "out")
    assert not (tmp_path / "out").exists()
