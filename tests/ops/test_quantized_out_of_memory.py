"""The int8 convolution where its scratch memory cannot be had: a KernelMemoryError (also a
MemoryError) naming the op, never a crash or a wrong number. The process's address space is
capped (RLIMIT_AS) in a child so the kernel's malloc of its packed activations fails."""
import os
import subprocess
import sys
import textwrap

import pytest

resource = pytest.importorskip("resource")  # POSIX only

CHILD = textwrap.dedent("""
    import resource
    import numpy as np
    import mgegraph as mg
    from mgegraph.ir.errors import KernelMemoryError
    from mgegraph.ir.quant import QuantParams
    from mgegraph.ops import quantized as Q

    xp, wp = QuantParams((0.03,), (7,), None), QuantParams((0.01,), (0,), None)
    attrs = dict(stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1, out_dtype="uint8",
                 out_scale=0.4, out_zero_point=3, relu=True)
    x = np.ones((1, 64, 512, 512), np.uint8)  # 262,144 cells of K 576: 151 MB of patches
    w = np.ones((8, 64, 3, 3), np.int8)

    def plan(const_weight):
        g = mg.Graph()
        wv = g.const(w, quant=wp) if const_weight else g.input("w", w.shape, "int8", quant=wp)
        return mg.compile([Q.quantized_conv2d(g.input("x", x.shape, "uint8", quant=xp), wv,
                                              **attrs)])

    plans = [(plan(True), {"x": x}), (plan(False), {"x": x, "w": w})]
    for p, feeds in plans:
        p.run(feeds)  # the arena and the thread pool exist before the cap
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    cap = pages * resource.getpagesize() + (64 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    for p, feeds in plans:
        try:
            p.run(feeds)
        except KernelMemoryError as e:
            assert isinstance(e, MemoryError) and "quantized_conv2d" in str(e), e
            assert "could not allocate its scratch memory" in str(e), e
            print("refused")
""")


def test_a_conv_without_scratch_memory_raises_a_memory_error():
    run = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300,
                         check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["refused", "refused"]
