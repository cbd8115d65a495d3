"""Converters of ONNX's recurrent ops, RNN, GRU and LSTM, onto the unrolled loop of
``nn/rnn.py`` (one GEMM for every step's input projection, then per step one hidden GEMM and
its gate arithmetic); their table is ``CONVERTERS``, merged in ``converters``.

Everything ONNX defines is converted: directions forward, reverse and bidirectional, layout 0
(time first) and 1 (batch first), initial_h and initial_c, sequence_lens (a batch element's
state stops at its length and its later outputs are zero; in reverse its first step is at its
length), LSTM's peepholes P and input_forget, GRU's linear_before_reset 0 and 1, clip (of every
gate's input before its activation) and the activations with their alphas and betas. ONNX's
gate orders differ from PyTorch's: LSTM i, o, f, c; GRU z, r, h.

The sequence length must be known at import (the loop is unrolled for it); the batch may be
a named dimension.
"""
from __future__ import annotations

import numpy as np

from .. import functional as F
from ..nn.rnn import per_step_gates
from .context import shape_of

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"],
                        "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name -> (function of (x, alpha, beta), default alpha, default beta), ONNX's definitions
_ACTIVATIONS = {
    "Sigmoid": (lambda x, a, b: F.sigmoid(x), None, None),
    "Tanh": (lambda x, a, b: F.tanh(x), None, None),
    "Relu": (lambda x, a, b: F.relu(x), None, None),
    "Softsign": (lambda x, a, b: F.softsign(x), None, None),
    "Softplus": (lambda x, a, b: F.softplus(x), None, None),
    "LeakyRelu": (lambda x, a, b: F.leaky_relu(x, a), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: F.where(x > a, x, 0.0), 1.0, None),
    "HardSigmoid": (lambda x, a, b: F.clip(x * a + b, 0.0, 1.0), 0.2, 0.5),
    "Elu": (lambda x, a, b: F.elu(x, a), 1.0, None),
    "ScaledTanh": (lambda x, a, b: F.tanh(x * b) * a, 1.0, 1.0),
    "Affine": (lambda x, a, b: x * a + b, 1.0, 0.0),
}


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _activations(cx, kind: str, at: dict, directions: int) -> list[list]:
    """Per direction, the activations (f, g, h) as functions of one Var."""
    names = [_text(a) for a in at.get("activations", [])] or _DEFAULT_ACTIVATIONS[kind] * \
        directions
    per = len(_DEFAULT_ACTIVATIONS[kind])
    if len(names) != per * directions:
        cx.fail(f"activations {names}: {kind} with {directions} direction(s) takes "
                f"{per * directions}")
    alphas, betas = list(at.get("activation_alpha", [])), list(at.get("activation_beta", []))
    found = []
    for name in names:
        if name not in _ACTIVATIONS:
            cx.fail(f"activation {name!r} is not converted (known: {sorted(_ACTIVATIONS)})")
        fn, alpha, beta = _ACTIVATIONS[name]
        # each activation that takes an alpha (a beta) consumes the next one given, as ONNX
        # Runtime reads the lists
        alpha = alphas.pop(0) if alpha is not None and alphas else alpha
        beta = betas.pop(0) if beta is not None and betas else beta
        found.append(lambda x, fn=fn, alpha=alpha, beta=beta: fn(x, alpha, beta))
    return [found[d * per:(d + 1) * per] for d in range(directions)]


def _optional(cx, ins, i):
    return cx.var(ins[i]) if len(ins) > i and ins[i] is not None else None


class _Recurrence:
    """One node's weights and options read once; ``direction(d)`` unrolls one direction."""

    def __init__(self, cx, kind: str, ins: list, at: dict):
        self.cx, self.kind = cx, kind
        self.x, self.w, self.r = (cx.var(v) for v in ins[:3])
        self.b, lens = _optional(cx, ins, 3), ins[4] if len(ins) > 4 else None
        self.h0, self.c0 = _optional(cx, ins, 5), _optional(cx, ins, 6) if kind == "LSTM" \
            else None
        self.p = _optional(cx, ins, 7) if kind == "LSTM" else None
        self.layout = int(at.get("layout", 0))
        if self.layout:
            self.x = F.transpose(self.x, (1, 0, 2))
            self.h0, self.c0 = (None if s is None else F.transpose(s, (1, 0, 2))
                                for s in (self.h0, self.c0))
        self.where = _text(at.get("direction", "forward"))
        if self.where not in ("forward", "reverse", "bidirectional"):
            cx.fail(f"direction {self.where!r} must be forward, reverse or bidirectional")
        self.directions = 2 if self.where == "bidirectional" else 1
        self.hidden = int(at.get("hidden_size", shape_of(self.r)[-1]))
        self.acts = _activations(cx, kind, at, self.directions)
        self.clip = at.get("clip")
        self.before_reset = int(at.get("linear_before_reset", 0))
        self.input_forget = int(at.get("input_forget", 0))
        self._check()
        self.masks = self._masks(lens)

    def _check(self):
        x, gates, hidden = self.x, _GATES[self.kind], self.hidden
        want = {"W": (self.w, (self.directions, gates * hidden, x.shape[2])),
                "R": (self.r, (self.directions, gates * hidden, hidden)),
                "B": (self.b, (self.directions, 2 * gates * hidden)),
                "P": (self.p, (self.directions, 3 * hidden))}
        for name in ("initial_h", "initial_c"):
            state = self.h0 if name == "initial_h" else self.c0
            want[name] = (state, (self.directions, x.shape[1], hidden))
        for name, (v, shape) in want.items():
            if v is not None and tuple(v.shape) != shape:
                self.cx.fail(f"{name} has shape {list(v.shape)}, X {list(x.shape)} (time first) "
                             f"and hidden_size {hidden} need {list(shape)}")

    def _masks(self, lens):
        """Per time step, a (N, 1) bool of the batch elements still inside their sequence;
        None where sequence_lens is absent or known to be the whole length everywhere."""
        seq = self.x.shape[0]
        if lens is None or isinstance(lens, np.ndarray) and np.all(lens == seq):
            return None
        lens = F.reshape(self.cx.var(lens), (-1, 1))
        return [lens > t for t in range(seq)]

    def _bias(self, d: int):
        """(the bias folded into the input projection, the hidden bias kept per step)."""
        if self.b is None:
            return None, None
        size = _GATES[self.kind] * self.hidden
        wb, rb = self.b[d, :size], self.b[d, size:]
        if self.kind == "GRU" and self.before_reset:  # Rbh is multiplied by r: kept apart
            keep = F.concat([rb[:2 * self.hidden], F.zeros_like(rb[2 * self.hidden:])])
            return wb + keep, rb[2 * self.hidden:]
        return wb + rb, None

    def direction(self, d: int):
        """(the outputs (T, N, H), the final state tuple) of direction ``d``."""
        x, seq = self.x, self.x.shape[0]
        reverse = self.where == "reverse" or d == 1
        folded, kept = self._bias(d)
        projected = F.linear(F.reshape(x, (-1, x.shape[2])), self.w[d], folded)
        steps = per_step_gates(projected, seq, x.shape[1], _GATES[self.kind])
        state = tuple(None if s is None else s[d] for s in (self.h0, self.c0))
        hs = [None] * seq
        for t in (range(seq - 1, -1, -1) if reverse else range(seq)):
            new = self._step(d, steps[t], state, kept)
            state, hs[t] = self._masked(t, new, state)
        return F.stack(hs, axis=0), state

    def _masked(self, t, new, old):
        """(the state carried on, the step's output) under sequence_lens."""
        if self.masks is None:
            return new, new[0]
        m = self.masks[t]
        carried = tuple(None if n is None else F.where(m, n, 0.0 if o is None else o)
                        for n, o in zip(new, old))
        return carried, F.where(m, new[0], 0.0)

    def _pre(self, v):
        return v if self.clip is None else F.clip(v, -float(self.clip), float(self.clip))

    def _hidden(self, d, h, gates: int, rows=None, bias=None) -> list:
        r = self.r[d] if rows is None else self.r[d, rows[0]:rows[1]]
        projected = F.linear(h, r, bias)
        return F.split(projected, gates, axis=-1) if gates > 1 else [projected]

    def _step(self, d, xg, state, kept) -> tuple:
        return getattr(self, "_" + self.kind.lower())(d, xg, state, kept)

    def _rnn(self, d, xg, state, kept):
        (f,), (x,), h = self.acts[d], xg, state[0]
        return (f(self._pre(x if h is None else x + self._hidden(d, h, 1)[0])), None)

    def _lstm(self, d, xg, state, kept):
        (f, g, act_h), (h, c) = self.acts[d], state
        pre = xg if h is None else [a + b for a, b in zip(xg, self._hidden(d, h, 4))]
        pi, po, pf, pc = (self._pre(v) for v in pre)
        peep = [None] * 3 if self.p is None else F.split(self.p[d], 3)  # i, o, f
        with_peep = lambda v, k, cell: v if peep[k] is None or cell is None else v + peep[k] * cell
        i = f(with_peep(pi, 0, c))
        forget = 1 - i if self.input_forget else f(with_peep(pf, 2, c))
        c_new = i * g(pc) if c is None else forget * c + i * g(pc)
        o = f(with_peep(po, 1, c_new))
        return o * act_h(c_new), c_new

    def _gru(self, d, xg, state, kept):
        (f, g), h, size = self.acts[d], state[0], self.hidden
        xz, xr, xh = xg
        if h is None:  # a zero state: its projections are the hidden biases, folded or kept
            z = f(self._pre(xz))
            n = g(self._pre(xh if kept is None else xh + f(self._pre(xr)) * kept))
            return (1 - z) * n, None
        hz, hr = self._hidden(d, h, 2, (0, 2 * size))
        z, r = f(self._pre(xz + hz)), f(self._pre(xr + hr))
        if self.before_reset:
            (hh,) = self._hidden(d, h, 1, (2 * size, 3 * size), kept)
            n = g(self._pre(xh + r * hh))
        else:
            (hh,) = self._hidden(d, r * h, 1, (2 * size, 3 * size))
            n = g(self._pre(xh + hh))
        return (1 - z) * n + z * h, None


def _convert(kind: str):
    def convert(cx, ins, at):
        rec = _Recurrence(cx, kind, ins, at)
        outs, finals = zip(*(rec.direction(d) for d in range(rec.directions)))
        y = F.stack(outs, axis=1)  # (T, D, N, H)
        states = [F.stack([f[k] for f in finals], axis=0) for k in range(2)
                  if finals[0][k] is not None]
        if rec.layout:
            y = F.transpose(y, (2, 0, 1, 3))
            states = [F.transpose(s, (1, 0, 2)) for s in states]
        return [y, *states]
    return convert


# ONNX op -> converter
CONVERTERS = {"RNN": _convert("RNN"), "GRU": _convert("GRU"), "LSTM": _convert("LSTM")}
