"""The CPU lowerings of the reduce, nn, matmul, conv and pool families: parameter blocks packed
by the field names the kernel modules export, and the op layer's names kept equal to the
kernels' (a drift fails when the backend is built, not at the first run)."""
import ast
from pathlib import Path

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph._kernels import conv as KC
from mgegraph._kernels import linalg as KL
from mgegraph._kernels import nn as KN
from mgegraph._kernels import pool as KP
from mgegraph._kernels import reduce as KR
from mgegraph._kernels.lowering import conv, nn, pool, reduce
from mgegraph._kernels.lowering.matmul import tiles_rule
from mgegraph.backend import KernelTable
from mgegraph.kernel_abi import pool as abi_pool
from mgegraph.kernel_abi.layout import pack
from mgegraph.ops import conv as ops_conv
from mgegraph.ops import nn as ops_nn
from mgegraph.ops import reduce as ops_reduce


def test_pack_lays_fields_out_in_the_struct_order():
    assert pack(("m", "n", "k"), k=4, m=2, n=3) == (2, 3, 4)
    assert pack(("flag", "size"), flag=True, size=np.int64(7)) == (1, 7)
    assert all(type(v) is int for v in pack(("flag",), flag=np.True_))


def test_pack_names_missing_and_unknown_fields():
    with pytest.raises(ValueError, match=r"missing fields \['n'\], unknown fields \['x'\]"):
        pack(("m", "n"), m=1, x=2)
    with pytest.raises(ValueError, match=r"missing fields \[\], unknown fields \['z'\]"):
        pack(("m",), m=1, z=0)


def test_kernel_modules_export_their_structs_fields():
    # taken from the structs the kernels read, so they are what the kernels read
    assert KC.CONV_FIELDS[-7:] == ("has_bias", "path", "activation", "isa", "threads", "transposed",
                                   "packed")
    assert len(KC.CONV_FIELDS) == 23
    assert KP.POOL_FIELDS == ("mode", "planes", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw",
                              "ph", "pw", "dh", "dw", "eh", "ew", "threads")
    assert KL.MATMUL_FIELDS == ("m", "n", "k", "transpose_a", "transpose_b", "threads", "tiles",
                                "gemv_split", "ndim")
    assert KL.LINEAR_FIELDS == ("m", "n", "k", "has_bias", "activation", "threads", "tiles")
    assert KR.REDUCE_FIELDS == ("op", "kept_ndim")
    assert KN.CROSS_ENTROPY_FIELDS == ("outer", "classes", "inner", "with_logits", "reduction",
                                       "label_is_int64")


def instruction(outputs, op):
    (ins,) = [i for i in mg.compile(outputs).instructions if i.op == op]
    return ins


def fields(names, ints):
    return dict(zip(names, ints))


def test_conv_and_pool_parameters_by_name():
    g = mg.Graph()
    x, w = g.input("x", (2, 4, 9, 7), np.float32), g.input("w", (6, 2, 3, 3), np.float32)
    y = F.conv2d(x, w, stride=2, padding=(1, 0), dilation=(1, 2), groups=2)
    got = fields(KC.CONV_FIELDS, instruction([y], "conv2d").ints)
    assert (got["batch"], got["cin"], got["h"], got["w"], got["cout"]) == (2, 4, 9, 7, 6)
    assert (got["sh"], got["sw"], got["ph"], got["pw"], got["dh"], got["dw"]) == (2, 2, 1, 0, 1, 2)
    assert (got["groups"], got["has_bias"], got["activation"]) == (2, 0, 0)
    assert got["path"] == KC.CONV_PATHS["im2col"]
    pooled = F.avg_pool2d(x, 3, stride=2, padding=1, mode="average")
    got = fields(KP.POOL_FIELDS, instruction([pooled], "avg_pool2d").ints)
    assert got["mode"] == KP.POOL_MODES["average"] and got["planes"] == 8
    assert (got["oh"], got["ow"], got["kh"], got["sw"], got["ph"]) == (5, 4, 3, 2, 1)
    got = fields(KP.POOL_FIELDS, instruction([F.adaptive_max_pool2d(x, 2)],
                                             "adaptive_max_pool2d").ints)
    assert got["mode"] == KP.POOL_MODES["adaptive_max"] and got["kh"] == got["sw"] == 0


def test_matmul_linear_reduce_and_nn_parameters_by_name():
    g = mg.Graph()
    a, b = g.input("a", (3, 4, 5), np.float64), g.input("b", (3, 6, 5), np.float64)
    ints = instruction([F.matmul(a, b, transpose_b=True)], "matmul").ints
    head = fields(KL.MATMUL_FIELDS, ints)
    assert (head["m"], head["n"], head["k"], head["transpose_b"], head["ndim"]) == (4, 6, 5, 1, 1)
    assert ints[len(KL.MATMUL_FIELDS):] == (3, 20, 30)  # batch shape, then a's and b's strides
    x, wt, bias = (g.input(n, s, np.float32) for n, s in (("x", (8, 5)), ("w", (3, 5)),
                                                          ("bias", (3,))))
    got = fields(KL.LINEAR_FIELDS, instruction([F.linear(x, wt, bias)], "linear").ints)
    on_tiles = tiles_rule(np.dtype(np.float32), 8, 3, 5, True)  # this CPU's rule
    assert got == {"m": 8, "n": 3, "k": 5, "has_bias": 1, "activation": 0, "threads": 1,
                   "tiles": on_tiles}
    # a GEMM is planned in one column block per 2 MFLOP (at most the threads there are)
    from mgegraph._kernels import parallel
    from mgegraph._kernels.lowering.matmul import gemm_threads
    assert gemm_threads(np.dtype(np.float32), 128, 1024, 784) == min(2, parallel.max_threads())
    assert gemm_threads(np.dtype(np.int64), 128, 1024, 784) == 1  # the kernels' own loop
    ints = instruction([F.sum(a, axis=1)], "sum").ints
    assert fields(KR.REDUCE_FIELDS, ints) == {"op": KR.REDUCE_OPS["sum"], "kept_ndim": 2}
    logits, label = g.input("p", (4, 10, 3), np.float32), g.input("y", (4, 3), np.int64)
    ce = instruction([F.cross_entropy(logits, label, reduction="sum")], "cross_entropy")
    assert fields(KN.CROSS_ENTROPY_FIELDS, ce.ints) == {
        "outer": 4, "classes": 10, "inner": 3, "with_logits": 1,
        "reduction": KN.REDUCTIONS["sum"], "label_is_int64": 1}


@pytest.mark.parametrize("lowering,kernels,name,ops_names", [
    (reduce, KR, "REDUCE_OPS", ops_reduce.REDUCE_OPS),
    (nn, KN, "REDUCTIONS", ops_nn.REDUCTIONS),
    (conv, KC, "CONV_PATHS", conv.PATHS),
    (pool, KP, "POOL_MODES", abi_pool.MODES),
])
def test_op_layer_names_equal_the_kernels(monkeypatch, lowering, kernels, name, ops_names):
    codes = getattr(kernels, name)
    assert set(codes) == set(ops_names)
    lowering.implement(KernelTable("check"))
    drifted = {k: v for k, v in codes.items() if k != ops_names[-1]}
    monkeypatch.setattr(kernels, name, drifted)
    with pytest.raises(ImportError, match="differ"):
        lowering.implement(KernelTable("check"))


def test_pool_modes_cover_the_avg_mode_attribute():
    assert set(ops_conv.AVG_MODES) < set(KP.POOL_MODES)


@pytest.mark.parametrize("family", ["reduce", "nn", "matmul", "conv"])
def test_op_layer_imports_no_kernel_module(family):
    path = Path(ops_conv.__file__).with_name(f"{family}.py")
    imported = [node.module or "" for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.ImportFrom)]
    imported += [alias.name for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Import) for alias in node.names]
    assert not [m for m in imported if "_kernels" in m]
