"""Graphs and parameter blocks a user could hand in wrong: each is refused, never run.

add_node's given output types must be its op's rule's; a fused program is checked whole by its
shape rule; and the fused kernel itself checks its parameter block before touching an element.
"""
import numpy as np
import pytest

import mgegraph.functional as F
from mgegraph import Graph
from mgegraph._kernels import lowering  # noqa: F401  registers the CPU lowerings
from mgegraph._kernels.lowering import fused as LF
from mgegraph.ir.errors import OpError
from mgegraph.ir.types import tensor_type
from mgegraph.ops.fused_program import Program


def test_add_node_refuses_types_that_are_not_the_ops_rule():
    g = Graph()
    x = g.input("x", (4,))
    with pytest.raises(OpError, match=r"neg\(f32\[4\]\): given output types f32\[400\].*"
                                      r"rule gives f32\[4\].*test_hostile_graphs"):
        g.add_node("neg", (x,), {}, types=(tensor_type((400,), "float32"),))
    with pytest.raises(OpError, match="given output types"):
        g.add_node("neg", (x,), {}, types=(tensor_type((4,), "float64"),))
    assert g.add_node("neg", (x,), {}, types=(tensor_type((4,), "float32"),)).outputs


def test_a_source_takes_exactly_one_type():
    g = Graph()
    with pytest.raises(OpError, match="input.*one output type"):
        g.add_node("input", (), {"name": "x"}, types=())
    with pytest.raises(OpError, match="input.*one output type"):
        g.add_node("input", (), {"name": "x"})


def _fused(g, inputs, code, constants=(), n_outputs=1):
    return g.add_node("fused_elementwise", inputs,
                      {"code": tuple(code), "constants": tuple(constants), "shape": (4,),
                       "dtype": "float32", "n_outputs": n_outputs})


GOOD = [("load", 0, 0), ("exp", 1, 0), ("store", 0, 1)]


@pytest.mark.parametrize("code, constants, n_outputs, message", [
    ([("load", 0, 0), ("exp", 1, 0), ("store", 5, 1)], (), 1, "output 5 is out of range"),
    ([("load", 0, 0), ("store", 0, 0), ("store", 0, 0)], (), 1, "stored twice"),
    ([("load", 0, 0), ("exp", 1, 0)], (), 1, r"outputs \[0\] are never stored"),
    ([("load", 0, 0), ("const", 1, 3), ("add", 2, 0, 1), ("store", 0, 2)], (1.0,), 1,
     "constant 3 of 1"),
    ([("load", 0, 0), ("leaky_relu", 1, 0, 7), ("store", 0, 1)], (0.1,), 1, "constant 7 of 1"),
    ([("load", 0, 0), ("load", 1, 1), ("store", 0, 1)], (), 1, "input 1 of 1"),
    ([("load", 0, 0), ("exp", 1, 9), ("store", 0, 1)], (), 1, "reads value 9 before"),
    ([("load", 0, 0), ("store", 0, 1), ("exp", 1, 0)], (), 1, "reads value 1 before"),
    ([("load", 0, 0), ("system", 1, 0), ("store", 0, 1)], (), 1, "not an op"),
    ([("load", 0, 0), ("exp", 0, 0), ("store", 0, 0)], (), 1, "defined twice"),
    ([("load", 0, 0), ("exp", -1, 0), ("store", 0, 0)], (), 1, "negative"),
    ([("load", 0, 0), ("exp", 1, 0.5), ("store", 0, 1)], (), 1, "must be ints"),
    (GOOD, (), -1, "n_outputs"),
])
def test_fused_programs_are_checked_whole_at_build_time(code, constants, n_outputs, message):
    g = Graph()
    x = g.input("x", (4,))
    with pytest.raises(OpError, match=f"fused_elementwise.*{message}.*test_hostile_graphs"):
        _fused(g, (x,), code, constants, n_outputs)
    assert _fused(g, (x,), GOOD).outputs[0].type == x.type


# -- the kernel's own checks: a corrupted parameter block gets a status, touches no memory ------
def _call(patch):
    program = Program([(16,)], (16,), "float32",
                      [("load", 0, 0), ("leaky_relu", 1, 0, 0, 0), ("store", 0, 1)], [0.1])
    ints, floats, ws = LF.encode(program, threads=1)
    ints = list(ints)
    head, ndim = len(LF.K.HEAD_FIELDS), ints[2]
    run = head + ndim + ints[0] * ndim
    steps = run + len(LF.K.RUN_FIELDS)
    patch(ints, run, steps)
    x = np.arange(16, dtype=np.float32)
    out = np.zeros(16, np.float32)
    status = LF.K.call_kernel("fused_f32", [x, out, np.empty(max(ws, 1), np.uint8)], ints, floats)
    return status, out


@pytest.mark.parametrize("patch", [
    lambda i, r, s: i.__setitem__(s + 5 * 2 + 1, 1),      # store to output 1 of 1
    lambda i, r, s: i.__setitem__(s + 5 * 2 + 1, -1),     # store to output -1
    lambda i, r, s: i.__setitem__(s + 5 * 2 + 2, 40),     # store from an unwritten register
    lambda i, r, s: i.__setitem__(s + 5 * 2 + 2, 1000),   # store from beyond the registers
    lambda i, r, s: i.__setitem__(s + 5 * 0 + 2, 3),      # load input 3 of 1
    lambda i, r, s: i.__setitem__(s + 5 * 1 + 2, 7),      # leaky_relu reads an unwritten register
    lambda i, r, s: i.__setitem__(s + 5 * 1 + 3, -5),     # its slope is floats[-5]
    lambda i, r, s: i.__setitem__(s + 5 * 1 + 0, 9999),   # an unknown opcode
    lambda i, r, s: i.__setitem__(s + 5 * 1 + 1, 64),     # writes register 64
    lambda i, r, s: i.__setitem__(r + 3, 2),              # n_code 2: the output is never stored
    lambda i, r, s: i.__setitem__(1, 2),                  # n_out 2: output 1 is never stored
])
def test_the_fused_kernel_refuses_a_bad_parameter_block(patch):
    status, out = _call(patch)
    assert status != 0
    assert not out.any()  # nothing written


def test_the_fused_kernel_runs_the_unpatched_block():
    status, out = _call(lambda i, r, s: None)
    assert status == 0 and out[3] == 3


def test_the_fused_kernel_refuses_a_constant_index_past_its_floats():
    # leaky_relu's slope is floats[0] of one: floats[1] and a block saying it has no floats
    # are refused before an element is read (n_floats, the Run field the lowering encodes)
    b = LF.K.STEP_FIELDS.index("b")
    for patch in (lambda i, r, s: i.__setitem__(s + 5 * 1 + b, 1),
                  lambda i, r, s: i.__setitem__(r + LF.K.RUN_FIELDS.index("n_floats"), 0)):
        status, out = _call(patch)
        assert status != 0 and not out.any()
    assert _call(lambda i, r, s: None)[0] == 0


# -- attributes are plain immutable values -------------------------------------------------------
@pytest.mark.parametrize("attrs", [{"shape": [3, 4]}, {"shape": np.array([3, 4])},
                                   {"shape": {3: 4}}, {"shape": ((3,), [4])}])
def test_add_node_refuses_attributes_that_are_not_plain_immutable_values(attrs):
    g = Graph()
    x = g.input("x", (2, 6))
    with pytest.raises(OpError, match=r"reshape\(f32\[2,6\]\): attribute shape=.*not a plain "
                                      r"immutable value.*test_hostile_graphs"):
        g.add_node("reshape", (x,), attrs)
    assert g.add_node("reshape", (x,), {"shape": (3, 4)}).outputs[0].shape == (3, 4)


# -- values of dtypes the engine has no kernels for --------------------------------------------
@pytest.mark.parametrize("value", [np.array([1, "a"], dtype=object), np.array(["a", "b"]),
                                   np.array([1 + 2j]), "abc", None, np.zeros(2, np.uint16)])
def test_sources_refuse_object_str_and_complex_values(value):
    from mgegraph.ir.errors import GraphError

    g = Graph()
    with pytest.raises(GraphError, match="dtype"):
        g.const(value)
    with pytest.raises(GraphError, match="dtype"):
        g.param("p", value)
    if isinstance(value, np.ndarray):
        with pytest.raises(GraphError, match="dtype"):
            g.input("x", (2,), dtype=value.dtype)
    assert not g.nodes


# -- every strided kernel checks its ndim before it reads a shape --------------------------------
_DIMS_CHECK = """
import numpy as np
from mgegraph._kernels import elementwise as E, linalg as L, movement as M, reduce as R
from mgegraph._kernels.runtime import Executor

def status(module, name, ints):
    bufs = [np.zeros(64, np.float64) for _ in range(4)]
    ints = list(ints) + [0] * 2000  # room for what an unchecked kernel would read
    ex = Executor([module.KERNELS[name]], [[b.ctypes.data for b in bufs]], [ints], [[0.0, 0.0]],
                  bufs)
    failure = ex.run()
    return None if failure is None else failure[1]

def head(fields, **values):
    return [values.get(f, 0) for f in fields]

cases = {
    "unary": (E, "unary_f32", [0, 100]), "binary": (E, "binary_f32", [0, 100]),
    "compare": (E, "compare_f32", [0, 100]), "where": (E, "where_f32", [0, 100]),
    "cast": (E, "cast_f32", [0, 100]),
    "strided": (M, "strided_f32", head(M.STRIDED_FIELDS, ndim=100)),
    "slice_backward": (M, "slice_backward_f32", head(M.STRIDED_FIELDS, ndim=100)),
    "gather": (M, "gather_f32", head(M.GATHER_FIELDS, ndim=100)),
    "scatter_add": (M, "scatter_add_f32", head(M.GATHER_FIELDS, ndim=100)),
    "pad": (M, "pad_f32", head(M.PAD_FIELDS, ndim=100)),
    "pad_backward": (M, "pad_backward_f32", head(M.PAD_FIELDS, ndim=100)),
    "matmul": (L, "matmul_f32", head(L.MATMUL_FIELDS, ndim=100)),
    "reduce_kept": (R, "reduce_f32", head(R.REDUCE_FIELDS, kept_ndim=100)),
    "reduce_reduced": (R, "reduce_f32", head(R.REDUCE_FIELDS, kept_ndim=1) + [1, 1, 100]),
}
for what, (module, name, ints) in cases.items():
    assert status(module, name, ints) == 3, what  # KERNEL_UNSUPPORTED
print("ok")
"""


def test_strided_kernels_refuse_more_dims_than_they_hold():
    import subprocess
    import sys

    # in a child: an unchecked kernel writes past its Odometer on the stack and may crash
    proc = subprocess.run([sys.executable, "-c", _DIMS_CHECK], capture_output=True, text=True,
                          check=False,
                          timeout=60)
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
