"""The fused kernel's streaming mode (_kernels/fused_body.pxi: non-temporal stores): chosen by the
bytes a call moves, and bitwise the plain mode's results whatever the block, threads, alignment
or layout."""
import numpy as np
import pytest

from mgegraph._kernels import fused as K
from mgegraph._kernels.lowering import fused as LF
from mgegraph.ops.fused_program import Program

RNG = np.random.default_rng(3)
CHAIN = [("load", 0, 0), ("load", 1, 1), ("mul", 2, 0, 1), ("load", 3, 2), ("add", 4, 2, 3),
         ("store", 1, 4), ("relu", 5, 4), ("load", 6, 3), ("mul", 7, 5, 6), ("tanh", 8, 0),
         ("neg", 9, 0), ("exp", 10, 9), ("const", 11, 0), ("add", 12, 11, 10),
         ("div", 13, 8, 12), ("sub", 14, 7, 13), ("store", 0, 14)]


def chain(shapes, out, dtype):
    return Program(shapes, out, dtype, CHAIN, [1.0])


def unaligned(shape, dtype, offset):
    """An output array whose data starts ``offset`` elements past a 64-byte line."""
    n = int(np.prod(shape))
    base = np.empty(n + 64, dtype)
    skip = (-base.ctypes.data % 64) // base.itemsize + offset
    return base[skip:skip + n].reshape(shape)


def run_into(program, inputs, offset, **kw):
    outs = [unaligned(program.output_shape, program.dtype, offset)
            for _ in range(program.n_outputs)]
    return LF.run(program, inputs, outputs=outs, **kw)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("block", [1, 7, 256, None])
@pytest.mark.parametrize("offset", [0, 3])
def test_streaming_gives_the_plain_bits(dtype, threads, block, offset):
    shapes = [(61, 97), (97,), (61, 1), (61, 97)]  # broadcast rows and columns beside plain
    inputs = [RNG.standard_normal(s).astype(dtype) for s in shapes]
    inputs[3] = np.ascontiguousarray(inputs[3].T).T  # a transposed input, gathered
    program = chain(shapes, (61, 97), dtype)
    plain = run_into(program, inputs, offset, threads=threads, block=block, stream=False)
    streamed = run_into(program, inputs, offset, threads=threads, block=block, stream=True)
    for a, b in zip(plain, streamed):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(plain[1], inputs[0] * inputs[1] + inputs[2], rtol=1e-6)


def test_streaming_is_chosen_above_the_last_level_cache(monkeypatch):
    program = chain([(1000,)] * 4, (1000,), np.float32)  # moves 6 x 4000 bytes
    fields = K.RUN_FIELDS

    def run_block(ints):
        start = len(K.HEAD_FIELDS) + 1 + 4  # the head, the shape, one stride per input
        return dict(zip(fields, ints[start:start + len(fields)]))

    monkeypatch.setattr(LF, "last_level_cache_bytes", lambda: 24_000)
    assert not LF.streams(program)
    assert run_block(LF.encode(program)[0])["stream"] == 0
    monkeypatch.setattr(LF, "last_level_cache_bytes", lambda: 23_999)
    assert LF.streams(program)
    streamed = run_block(LF.encode(program)[0])
    assert streamed["stream"] == 1
    plain = run_block(LF.encode(program, stream=False)[0])
    assert plain["stream"] == 0
    # streaming, the registers fit the smaller budget (L1), in a smaller block
    assert streamed["block"] * streamed["n_regs"] * 4 <= LF.STREAM_REGISTER_BYTES
    assert plain["block"] * plain["n_regs"] * 4 > LF.STREAM_REGISTER_BYTES


def test_last_level_cache_is_read_or_defaulted():
    size = LF.last_level_cache_bytes()
    assert size >= 1 << 16 and size % 1024 == 0


@pytest.mark.parametrize("value", [2, -1])
def test_bad_stream_field_is_refused(value):
    program = Program([(8,)], (8,), np.float32, [("load", 0, 0), ("exp", 1, 0), ("store", 0, 1)])
    ints, floats, ws = LF.encode(program)
    ints = list(ints)
    ints[len(K.HEAD_FIELDS) + 1 + 1 + K.RUN_FIELDS.index("stream")] = value
    x, out = np.ones(8, np.float32), np.full(8, 5.0, np.float32)
    assert K.call_kernel("fused_f32", [x, out, np.empty(ws, np.uint8)], ints, floats) != 0
    assert (out == 5.0).all()  # refused before any element is written
