"""Issue 5's figures in one run: fusion-chain fused vs unfused vs NumPy vs the bandwidth limit,
op-overhead with fusion, and mlp-train / convnet-train steps with and without the passes.

    python benchmarks/fusion_figures.py

A script, not a pytest-benchmark suite yet: medians of a few runs, 2 threads.
"""
import os, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, "benchmarks")
import numpy as np, mgegraph as mg, mgegraph.functional as F
from mgegraph import nn, optim
from threadpoolctl import threadpool_limits
import workloads as W
def med(fn, n=9):
    fn(); ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); ts.append(time.perf_counter()-t)
    return float(np.median(ts))
with threadpool_limits(2):
    n = 4194304
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(n).astype(np.float32) for k in "xabc"}
    g = mg.Graph(); x,a,b,c = (g.input(k, (n,), "float32") for k in "xabc")
    y = F.relu(x*a+b)*c - F.tanh(x)/(1+F.exp(-x))
    pf, pu = mg.compile([y]), mg.compile([y], optimize=0)
    for p in (pf, pu): p.run(feeds)
    X,A,B,C = (feeds[k] for k in "xabc")
    big = np.empty(16*2**20, np.float32); src = np.ones_like(big)
    tcopy = med(lambda: np.copyto(big, src)); bw = 2*big.nbytes/tcopy
    r = {"fused": med(pf._executor.run), "unfused": med(pu._executor.run),
         "numpy": med(lambda: np.maximum(X*A+B,0)*C - np.tanh(X)/(1+np.exp(-X))),
         "limit": 5*n*4/bw}
    print("fusion-chain ms:", {k: round(v*1e3, 2) for k, v in r.items()})
    print("  fused vs unfused %.2fx, vs numpy %.2fx, over limit %.2fx" % (r["unfused"]/r["fused"], r["numpy"]/r["fused"], r["fused"]/r["limit"]))
    g = mg.Graph(); x = g.input("x", (16,), "float32"); y = x
    for i in range(1000): y = [lambda v: v + 1.0, lambda v: v * 0.5, F.relu][i % 3](y)
    pf, pu = mg.compile([y]), mg.compile([y], optimize=0)
    xv = {"x": np.ones(16, np.float32)}
    for p in (pf, pu): p.run(xv)
    print("op-overhead us/op: fused %.4f (%d instr) unfused %.4f" % (med(pf._executor.run)/1000*1e6, len(pf.instructions), med(pu._executor.run)/1000*1e6))
    for name, mk, shape in [("mlp-train", W._mlp_module, (128, 784)), ("convnet-train", W._convnet, (32, 3, 32, 32))]:
        res = {}
        for lvl in (0, 1):
            nn.init.manual_seed(0); model = mk(); xb, yb = W._batch(shape)
            step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), lr=0.01), example_batch=(xb, yb), optimize=lvl)
            res[lvl] = (med(lambda: step(xb, yb), 7), step.plan.arena_bytes)
        print(f"{name}: step ms optimize=0 {res[0][0]*1e3:.2f} optimize=1 {res[1][0]*1e3:.2f} ratio {res[0][0]/res[1][0]:.2f}; arena MiB {res[0][1]/2**20:.2f} -> {res[1][1]/2**20:.2f}")
