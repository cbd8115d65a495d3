"""Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` and their cells, MegEngine's names and argument
order (``megengine.module.rnn``) with PyTorch's meaning, gate order and parameter names, so a
PyTorch state dict loads as it is (``weight_ih_l0``, ``bias_hh_l1_reverse``, ...).

Design: the time loop is unrolled into the graph, one step of nodes per time step, for the
sequence length the graph is built with (a traced or compiled model serves that length only;
the batch may be a named, symbolic dimension). Unrolled, the planner schedules and places every
step like any other node, fuses each step's gate arithmetic into one kernel, and remat can drop
and recompute steps; a loop construct would need control flow in the IR, which it does not have.
The work is arranged for that: the input projection of every time step is ONE GEMM
``(T*B, I) x (I, G*H)`` before the loop (with ``b_hh`` folded into its bias where the gates
allow), so a step is one ``h @ W_hh^T`` and its fused gate chain; the first step, whose state is
zero when no initial state is given, has no hidden GEMM at all. The LSTM takes each step's rows
of the projection whole, (B, 4H) as they lie in (T*B, 4H), and adds the hidden product to them
before splitting the gates: the accumulate pass makes that add the GEMM's own (an addmm), and
neither the forward nor the gradient has to transpose (T, B, G, H) to (T, G, B, H).

Design: no new op. These are compositions of linear, split and the elementwise ops; a fused
cell op (gates and their backward in one kernel) could replace only the fused gate kernel and
the split around it. Profiled, the LSTM classifier's training step (``benchmarks/lstm.py``:
batch 64, seq 32, embed 64, hidden 128; 1 thread, an Intel Xeon shared by several jobs) spent
67% of its time in GEMMs, 19% in the fused gate kernels and 11% in split, concat and transpose,
so such an op could save a fraction of the 30% at most: not clearly worth its kernels.
"""
from __future__ import annotations

import math

import numpy as np

from .. import functional as F
from ..ir.errors import GraphError
from . import init
from .layers import Dropout, _fraction, _size
from .module import Module, Parameter

GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}
_NONLINEARITIES = {"tanh": F.tanh, "relu": F.relu}


def _describe(x) -> str:
    return f"{np.dtype(x.dtype).name}{list(x.shape)}"


def _as_var(owner: str, x, what: str):
    if not hasattr(x, "shape") or not hasattr(x, "graph"):
        raise GraphError(f"{owner}: {what} must be a Tensor or a graph Var, got "
                         f"{type(x).__name__}")
    if np.dtype(x.dtype).kind != "f":
        raise GraphError(f"{owner}: {what} {_describe(x)} must be floating point")
    return x


def _check_state(owner: str, state, what: str, shape: tuple, dtype) -> None:
    _as_var(owner, state, what)
    if tuple(state.shape) != tuple(shape) or state.dtype != dtype:
        raise GraphError(f"{owner}: {what} is {_describe(state)}, it must be "
                         f"{np.dtype(dtype).name}{list(shape)}")


# -- one time step: the gate arithmetic shared by the cells and the unrolled layers ----------
# ``xg`` is the step's input projection split by gate (a list of (B, H), with the biases the
# kind folds into it), ``h`` the previous hidden state or None for a zero state (no hidden GEMM
# then). The hidden projection is split by gate too, so every gate's add and activation is
# elementwise over (B, H) and the whole step after its GEMM fuses into one kernel.

def _hidden(h, w_hh, b_hh, gates: int) -> list:
    return F.split(F.linear(h, w_hh, b_hh), gates, axis=-1) if gates > 1 else \
        [F.linear(h, w_hh, b_hh)]


def rnn_step(xg, h, w_hh, act=F.tanh):
    """Elman: act(xg + h @ W_hh^T), with b_ih + b_hh in ``xg``."""
    (x,) = xg
    return act(x if h is None else x + _hidden(h, w_hh, None, 1)[0])


def lstm_step(xg, h, c, w_hh):
    """PyTorch's gate order i, f, g, o; b_ih + b_hh in ``xg``. Returns (h', c')."""
    gates = xg if h is None else [a + b for a, b in zip(xg, _hidden(h, w_hh, None, 4))]
    return _lstm_cell(gates, c)


def lstm_row_step(xg, h, c, w_hh):
    """``lstm_step`` on the step's projection whole, ``xg`` (B, 4H): the hidden product is
    added to it before the split by gate, ``xg + h @ W_hh^T``, which the accumulate pass makes
    one addmm (the GEMM adds into xg's bytes) where it rounds as the add (on the tiles) or at
    optimize=2: one split a step, and no gate add left to the fused kernel."""
    z = xg if h is None else xg + F.matmul(h, w_hh, transpose_b=True)
    return _lstm_cell(F.split(z, 4, axis=-1), c)


def _lstm_cell(gates, c):
    i, f, g, o = gates
    c_new = F.sigmoid(i) * F.tanh(g) if c is None else \
        F.sigmoid(f) * c + F.sigmoid(i) * F.tanh(g)
    return F.sigmoid(o) * F.tanh(c_new), c_new


def gru_step(xg, h, w_hh, b_hh):
    """PyTorch's gate order r, z, n; the reset gate multiplies the hidden projection after its
    bias (ONNX's linear_before_reset=1); only b_ih in ``xg``."""
    xr, xz, xn = xg
    if h is None and b_hh is None:  # a zero state and no hidden bias: r has nothing to reset
        return (1 - F.sigmoid(xz)) * F.tanh(xn)
    hr, hz, hn = F.split(b_hh, 3) if h is None else _hidden(h, w_hh, b_hh, 3)
    r, z = F.sigmoid(xr + hr), F.sigmoid(xz + hz)
    n = F.tanh(xn + r * hn)
    return (1 - z) * n if h is None else (1 - z) * n + z * h


def unroll(kind: str, x, weights: tuple, state: tuple, reverse: bool = False, act=F.tanh):
    """One layer of ``kind`` (RNN, LSTM, GRU) in one direction over ``x`` (T, B, I), unrolled:
    ((T, B, H) outputs, the final state: (h,) or (h, c)). ``weights`` is (W_ih, W_hh, b_ih,
    b_hh), biases None or both given; ``state`` (h,) or (h, c), each (B, H) or None for zeros.
    The ONNX exporter replays this function to recognise the nodes it made
    (``onnx/export_rnn.py``), so what it builds is the layer's definition in one place.

    >>> out, (h, c) = unroll("LSTM", x, (w_ih, w_hh, b_ih, b_hh), (None, None))
    """
    w_ih, w_hh, b_ih, b_hh = weights
    seq, batch, gates = x.shape[0], x.shape[1], GATES[kind]
    bias = b_ih + b_hh if kind != "GRU" and b_ih is not None else b_ih
    projected = F.linear(F.reshape(x, (-1, x.shape[2])), w_ih, bias)
    steps = per_step_rows(projected, seq, batch) if kind == "LSTM" else \
        per_step_gates(projected, seq, batch, gates)
    hs = [None] * seq
    for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
        if kind == "LSTM":
            state = lstm_row_step(steps[t], state[0], state[1], w_hh)
        elif kind == "GRU":
            state = (gru_step(steps[t], state[0], w_hh, b_hh),)
        else:
            state = (rnn_step(steps[t], state[0], w_hh, act),)
        hs[t] = state[0]
    return F.stack(hs, axis=0), state


# -- cells -----------------------------------------------------------------------------------

class RNNCellBase(Module):
    """The parameters of one cell: ``weight_ih`` (G*H, I), ``weight_hh`` (G*H, H) and, with
    ``bias``, ``bias_ih`` and ``bias_hh`` (G*H,), all drawn from U(-1/sqrt(H), 1/sqrt(H))."""

    kind = "RNN"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        owner = type(self).__name__
        self.input_size = _size(owner, "input_size", input_size)
        self.hidden_size = _size(owner, "hidden_size", hidden_size)
        self.bias = bool(bias)
        gate_size = GATES[self.kind] * self.hidden_size
        bound = 1 / math.sqrt(self.hidden_size)
        self.weight_ih = Parameter(init.uniform((gate_size, self.input_size), bound))
        self.weight_hh = Parameter(init.uniform((gate_size, self.hidden_size), bound))
        self.bias_ih = Parameter(init.uniform(gate_size, bound)) if bias else None
        self.bias_hh = Parameter(init.uniform(gate_size, bound)) if bias else None

    def _input(self, x):
        owner = type(self).__name__
        _as_var(owner, x, "input")
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise GraphError(f"{owner}: input is {_describe(x)}, it must be (batch, "
                             f"input_size={self.input_size})")
        return x

    def _state(self, x, state, what: str):
        if state is not None:
            owner = type(self).__name__
            _check_state(owner, state, what, (x.shape[0], self.hidden_size), x.dtype)
        return state

    def _projection(self, x, fold_hh: bool):
        g = x.graph
        bias = None
        if self.bias:
            bias = g.lift(self.bias_ih)
            if fold_hh:
                bias = bias + g.lift(self.bias_hh)
        projected = F.linear(x, g.lift(self.weight_ih), bias)
        gates = GATES[self.kind]
        return F.split(projected, gates, axis=-1) if gates > 1 else [projected]

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias}"


class RNNCell(RNNCellBase):
    """An Elman cell: h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or ReLU).

    >>> h = RNNCell(10, 20)(x, h)    # x: (batch, 10), h: (batch, 20) or None (zeros)
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh"):
        if nonlinearity not in _NONLINEARITIES:
            raise GraphError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', got "
                             f"{nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias)

    def forward(self, input, hx=None):
        x = self._input(input)
        h = self._state(x, hx, "hx")
        return rnn_step(self._projection(x, True), h, x.graph.lift(self.weight_hh),
                        _NONLINEARITIES[self.nonlinearity])


class LSTMCell(RNNCellBase):
    """A long short-term memory cell, gates i, f, g, o (PyTorch's order).

    >>> h, c = LSTMCell(10, 20)(x, (h, c))   # hx None: zero h and c
    """

    kind = "LSTM"

    def forward(self, input, hx=None):
        x = self._input(input)
        h, c = (None, None) if hx is None else hx
        h, c = self._state(x, h, "h_0"), self._state(x, c, "c_0")
        if (h is None) != (c is None):
            raise GraphError("LSTMCell: hx must be (h_0, c_0), both given or None")
        return lstm_step(self._projection(x, True), h, c, x.graph.lift(self.weight_hh))


class GRUCell(RNNCellBase):
    """A gated recurrent unit, gates r, z, n; the reset gate applies after the hidden matmul
    (PyTorch's GRU; ONNX's linear_before_reset=1).

    >>> h = GRUCell(10, 20)(x, h)
    """

    kind = "GRU"

    def forward(self, input, hx=None):
        x = self._input(input)
        h = self._state(x, hx, "hx")
        g = x.graph
        b_hh = g.lift(self.bias_hh) if self.bias else None
        return gru_step(self._projection(x, False), h, g.lift(self.weight_hh), b_hh)


# -- multi-layer, bidirectional sequence layers ----------------------------------------------

def per_step_gates(projected, seq: int, batch, gates: int) -> list[list]:
    """(T*B, G*H) -> per time step, the list of its G gates' (B, H). One transpose to
    (T, G, B, H) and one split of all T*G parts: a split's gradient is one concat, where T*G
    slices would each give the gradient a full-size slice_backward."""
    hidden = projected.shape[1] // gates
    parts = F.reshape(F.transpose(F.reshape(projected, (seq, batch, gates, hidden)),
                                  (0, 2, 1, 3)), (seq * gates, batch, hidden)) \
        if gates > 1 else F.reshape(projected, (seq, batch, hidden))
    flat = [F.reshape(p, (batch, hidden)) for p in F.split(parts, seq * gates, axis=0)] \
        if seq > 1 or gates > 1 else [F.reshape(parts, (batch, hidden))]
    return [flat[t * gates:(t + 1) * gates] for t in range(seq)]


def per_step_rows(projected, seq: int, batch) -> list:
    """(T*B, G*H) -> per time step its (B, G*H) rows, by one split of whole steps: no
    transpose (each step's rows are contiguous already), and the gradient is one concat of the
    steps straight into (T*B, G*H), the layout the input projection's GEMMs read. (The GRU,
    whose reset gate multiplies only the hidden part, splits by gate: ``per_step_gates``.)"""
    if seq == 1:
        return [projected]
    width = projected.shape[1]
    return [F.reshape(p, (batch, width)) for p in
            F.split(F.reshape(projected, (seq, batch, width)), seq, axis=0)]



class RNNBase(Module):
    """The layers' parameters under PyTorch's names and the unrolled loop (see the module's
    Design note). Input (T, B, I), or (B, T, I) with ``batch_first``; output (T, B, D*H)."""

    kind = "RNN"

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0, bidirectional: bool = False,
                 proj_size: int = 0):
        super().__init__()
        owner = self.kind
        self.input_size = _size(owner, "input_size", input_size)
        self.hidden_size = _size(owner, "hidden_size", hidden_size)
        self.num_layers = _size(owner, "num_layers", num_layers)
        self.bias, self.batch_first = bool(bias), bool(batch_first)
        self.dropout = _fraction(owner, "dropout", dropout)
        self.bidirectional = bool(bidirectional)
        self.num_directions = 2 if bidirectional else 1
        if proj_size:
            raise GraphError(f"{owner}: proj_size={proj_size!r}: projections are not supported")
        self.proj_size = 0
        gate_size = GATES[self.kind] * self.hidden_size
        bound = 1 / math.sqrt(self.hidden_size)
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self.num_directions * self.hidden_size
            for suffix in self._suffixes(layer):
                setattr(self, f"weight_ih{suffix}", Parameter(init.uniform((gate_size, width),
                                                                           bound)))
                setattr(self, f"weight_hh{suffix}", Parameter(init.uniform(
                    (gate_size, self.hidden_size), bound)))
                if self.bias:
                    setattr(self, f"bias_ih{suffix}", Parameter(init.uniform(gate_size, bound)))
                    setattr(self, f"bias_hh{suffix}", Parameter(init.uniform(gate_size, bound)))
        # between layers, in training only; a step counter each (no Parameter unless dropout)
        self.dropouts = [Dropout(self.dropout, seed=layer) for layer in range(
            self.num_layers - 1)] if self.dropout > 0 else []

    def _suffixes(self, layer: int) -> list[str]:
        return [f"_l{layer}", f"_l{layer}_reverse"][:self.num_directions]

    def _weights(self, graph, suffix: str):
        """(W_ih, W_hh, b_ih, b_hh) of one layer and direction in ``graph`` (biases None)."""
        names = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if self.bias else ())
        found = [graph.lift(getattr(self, name + suffix)) for name in names]
        return tuple(found) + (None, None)[:4 - len(found)]

    def forward(self, input, hx=None):
        """(output, h_n) for RNN and GRU, (output, (h_n, c_n)) for LSTM; ``hx`` is h_0, or
        (h_0, c_0) for LSTM, each (D*num_layers, B, H), zeros when None."""
        x = self._check_input(input)
        if self.batch_first:
            x = F.transpose(x, (1, 0, 2))
        states = self._initial_states(x, hx)
        finals = []
        for layer in range(self.num_layers):
            if layer and self.dropouts and self.training:
                x = self.dropouts[layer - 1](x)
            outputs = []
            for d, suffix in enumerate(self._suffixes(layer)):
                index = layer * self.num_directions + d
                state = tuple(None if s is None else s[index] for s in states)
                out, final = self._direction(x, state, suffix, reverse=d == 1)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if len(outputs) == 1 else F.concat(outputs, axis=-1)
        if self.batch_first:
            x = F.transpose(x, (1, 0, 2))
        return x, self._final_states(finals)

    def _check_input(self, x):
        owner = self.kind
        _as_var(owner, x, "input")
        layout = "(batch, seq, input_size)" if self.batch_first else "(seq, batch, input_size)"
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise GraphError(f"{owner}: input is {_describe(x)}, it must be {layout} with "
                             f"input_size={self.input_size}")
        return x

    def _initial_states(self, x, hx) -> tuple:
        """The given states checked against (D*num_layers, B, H): a tuple of one (h) or two
        (h, c) entries, each None for zeros."""
        count = 2 if self.kind == "LSTM" else 1
        if hx is None:
            return (None,) * count
        if count == 2 and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise GraphError("LSTM: hx must be a pair (h_0, c_0)")
        given = tuple(hx) if count == 2 else (hx,)
        shape = (self.num_layers * self.num_directions, x.shape[1], self.hidden_size)
        for name, state in zip(("h_0", "c_0"), given):
            _check_state(self.kind, state, name, shape, x.dtype)
        return given

    def _direction(self, x, state, suffix: str, reverse: bool):
        """One layer in one direction over the whole sequence: ((T, B, H), final state)."""
        act = _NONLINEARITIES[getattr(self, "nonlinearity", "tanh")]
        return unroll(self.kind, x, self._weights(x.graph, suffix), state, reverse, act)

    def _final_states(self, finals):
        return F.stack([f[0] for f in finals], axis=0)

    def extra_repr(self) -> str:
        return (f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}, "
                f"bias={self.bias}, batch_first={self.batch_first}, dropout={self.dropout}, "
                f"bidirectional={self.bidirectional}")


class RNN(RNNBase):
    """A multi-layer Elman RNN, tanh or ReLU (``nonlinearity``, a keyword as in MegEngine).

    >>> out, h_n = RNN(10, 20, num_layers=2, nonlinearity="relu")(x)   # x: (T, B, 10)
    """

    def __init__(self, *args, nonlinearity: str = "tanh", **kwargs):
        if nonlinearity not in _NONLINEARITIES:
            raise GraphError(f"RNN: nonlinearity must be 'tanh' or 'relu', got {nonlinearity!r}")
        self.nonlinearity = nonlinearity
        super().__init__(*args, **kwargs)


class LSTM(RNNBase):
    """A multi-layer LSTM: returns (output, (h_n, c_n)).

    >>> out, (h_n, c_n) = LSTM(10, 20, batch_first=True, bidirectional=True)(x)
    """

    kind = "LSTM"

    def _final_states(self, finals):
        return (F.stack([f[0] for f in finals], axis=0), F.stack([f[1] for f in finals], axis=0))


class GRU(RNNBase):
    """A multi-layer GRU (PyTorch's gates: the reset gate after the hidden matmul).

    >>> out, h_n = GRU(10, 20, num_layers=2)(x)
    """

    kind = "GRU"
