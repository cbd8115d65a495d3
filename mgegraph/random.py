"""``mgegraph.random``: MegEngine's random numbers (``megengine.random``): ``seed``, ``RNG``
and the draws of the default generator (``uniform``, ``normal``, ``gamma``, ``beta``,
``poisson``, ``exponential``, ``multinomial``, ``permutation``, ``shuffle``).

Design: every draw is made of the counter-based ops of ``ops/random.py`` (``rng_uniform``,
``rng_gamma``, ``rng_poisson``; the other distributions are compositions over them), whose
numbers are a pure function of a seed attribute and a step input. Eager mode gives each call a
seed of its own: an ``RNG(seed)``'s n-th call mixes its seed with n, so two generators of one
seed give the same stream; the default generator takes a fresh seed per call from the global
stream that ``seed()`` restarts (as MegEngine's does). A trace replays its plan without running
Python, so there the step is what varies: the k-th draw of a recording reads a step counter (a
Buffer of the generator's) and assigns it the next value, so each replay draws new numbers.

>>> mge.random.seed(3); x = mge.random.normal(0, 1, (2, 3))
"""
from __future__ import annotations

import operator
import threading
import time
import weakref

import numpy as np

from . import functional as F
from .eager.dispatch import EAGER
from .eager.mode import MODE
from .eager.tensor import Tensor, check_eager_device, set_array
from .ir.errors import GraphError, user_location
from .nn.module import Buffer
from .ops.builder import apply

__all__ = ["RNG", "beta", "exponential", "gamma", "multinomial", "normal", "permutation",
           "poisson", "seed", "shuffle", "uniform"]

_MASK = 2**64 - 1


def _mix(z: int) -> int:
    # splitmix64's finaliser (as _kernels/rng_sample.h), for seeds derived in Python
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


class _GlobalSeeds:
    """The stream of seeds the default generator's calls take, restarted by ``seed()``."""

    def __init__(self):
        self.lock = threading.Lock()
        self.restart(int(time.time()))

    def restart(self, value: int) -> None:
        with self.lock:
            self.base, self.count = _mix(int(value) & _MASK), 0

    def next(self) -> int:
        with self.lock:
            self.count += 1
            return _mix(self.base + self.count * 0x9E3779B97F4A7C15 & _MASK)


_SEEDS = _GlobalSeeds()


def seed(seed: int) -> None:
    """Restart the default generator's stream: the draws after ``seed(s)`` repeat after every
    ``seed(s)``. ``mge.random.seed(42)``"""
    _check_int("seed", seed)
    _SEEDS.restart(seed)


def _check_int(what: str, value, low: int | None = None) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise GraphError(f"random: {what} must be an int, got {value!r} (at "
                         f"{user_location()})") from None
    if low is not None and number < low:
        raise GraphError(f"random: {what} must be >= {low}, got {value!r} (at "
                         f"{user_location()})")
    return number


class _Draw:
    """One call's seeds (``seed(j)`` for its j-th primitive draw) and step tensor."""

    def __init__(self, key: int, step):
        self.key, self.step = key, step

    def seed(self, j: int) -> int:
        return _mix(self.key + (j + 1) * 0x9E3779B97F4A7C15 & _MASK)

    def uniform(self, shape, dtype="float32", j: int = 0):
        return apply("rng_uniform", (self.step,), shape=tuple(shape), dtype=dtype,
                     seed=self.seed(j))

    def of(self, op: str, param, j: int = 0):
        return apply(op, (param, self.step), seed=self.seed(j))


class RNG:
    """A generator of its own: ``RNG(seed)`` gives the same stream as every ``RNG(seed)``;
    ``RNG()`` draws from the default stream (``random.seed``). ``device`` is MegEngine's: the
    draws are eager tensors, on the CPU.

    >>> rng = RNG(seed=111); rng.uniform(size=(100,))
    """

    def __init__(self, seed: int | None = None, device: str | None = None):
        check_eager_device(device)
        self._seed = None if seed is None else _check_int("seed", seed) & _MASK
        self._device = device
        self._calls = 0
        self._lock = threading.Lock()
        self._steps: list = []  # the step counters of a recording's draws, by position
        self._recording = None  # (a weak reference to) the recording those positions count in
        self._position = 0

    # -- seeds and steps -------------------------------------------------------------------
    def _draw(self) -> _Draw:
        with self._lock:
            if self._seed is None:
                base = _SEEDS.next()
            else:
                base = _mix(self._seed + self._calls * 0x9E3779B97F4A7C15 & _MASK)
                self._calls += 1
            replaying = [r for r in MODE.recorders if r.replays]
            if not replaying:
                return _Draw(base, Tensor(np.zeros((), np.int64), dtype="int64"))
            return self._recorded_draw(base, replaying[-1])

    def _recorded_draw(self, base: int, recording) -> _Draw:
        # a replay does not run Python: the k-th draw's counter is read as its step and
        # assigned the next value by the plan itself
        if self._recording is None or self._recording() is not recording:
            self._recording, self._position = weakref.ref(recording), 0
        if self._position == len(self._steps):
            counter = Buffer(np.zeros((), np.int64))
            counter.name = f"rng.step{self._position}"
            self._steps.append(counter)
        counter = self._steps[self._position]
        self._position += 1
        EAGER.assign(counter, counter + 1)
        return _Draw(_mix(base ^ self._position), counter)

    # -- continuous draws ------------------------------------------------------------------
    def uniform(self, low: float = 0, high: float = 1, size=None) -> Tensor:
        """Uniform on [low, high), float32, of shape ``size`` ((1,) if None)."""
        if not low < high:
            raise GraphError(f"random.uniform: low {low!r} must be below high {high!r} (at "
                             f"{user_location()})")
        u = self._draw().uniform(_size(size))
        return u if (low, high) == (0, 1) else low + (high - low) * u

    def normal(self, mean: float = 0, std: float = 1, size=None) -> Tensor:
        """Gaussian, float32, of shape ``size`` ((1,) if None): Box-Muller over two float64
        uniforms, rounded once."""
        draw, shape = self._draw(), _size(size)
        radius = F.sqrt(-2.0 * F.log(1.0 - draw.uniform(shape, "float64", 0)))
        z = F.astype(radius * F.cos(2 * np.pi * draw.uniform(shape, "float64", 1)), "float32")
        return z if (mean, std) == (0, 1) else z * std + mean

    def gamma(self, shape, scale=1, size=None) -> Tensor:
        """Gamma(``shape``, ``scale``) (both > 0), float32, of shape ``size`` + the broadcast
        shape of ``shape`` and ``scale``."""
        k, theta = _broadcast(size, _positive("gamma", "shape", shape),
                              _positive("gamma", "scale", scale))
        return self._draw().of("rng_gamma", k) * theta

    def beta(self, alpha, beta, size=None) -> Tensor:
        """Beta(``alpha``, ``beta``) (both > 0): X / (X + Y) of two gamma draws."""
        a, b = _broadcast(size, _positive("beta", "alpha", alpha),
                          _positive("beta", "beta", beta))
        draw = self._draw()
        x, y = draw.of("rng_gamma", a, 0), draw.of("rng_gamma", b, 1)
        return x / (x + y)

    def poisson(self, lam, size=None) -> Tensor:
        """Poisson(``lam``) (>= 0) counts as float32, of shape ``size`` + ``lam``'s."""
        (lam,) = _broadcast(size, _positive("poisson", "lam", lam, zero=True))
        return self._draw().of("rng_poisson", lam)

    def exponential(self, rate=1.0, size=None) -> Tensor:
        """Exponential of ``rate`` (> 0): -log(1 - u) / rate, float32."""
        (rate,) = _broadcast(size, _positive("exponential", "rate", rate))
        return -F.log(1.0 - self._draw().uniform(rate.shape)) / rate

    # -- discrete draws --------------------------------------------------------------------
    def multinomial(self, input, num_samples: int, replacement: bool = False) -> Tensor:
        """``num_samples`` int32 category indices per row of the weights ``input`` (1-D or
        2-D, >= 0): with replacement by the inverse of the running sum, without by the
        Gumbel top-k (which is drawing one at a time without putting back)."""
        probs, rows = _multinomial_input(input, num_samples, replacement)
        draw, classes = self._draw(), probs.shape[-1]
        if replacement:
            cdf = F.cumsum(probs / F.sum(probs, axis=-1, keepdims=True), axis=-1)
            u = draw.uniform((rows, num_samples), "float64")
            edges = F.expand_dims(cdf[:, :classes - 1], 1)
            out = F.astype(F.sum(F.astype(F.expand_dims(u, 2) >= edges, "int32"), axis=-1),
                           "int32")
        else:
            u = draw.uniform((rows, classes), "float64")
            keys = F.log(probs) - F.log(-F.log(1.0 - u))
            out = F.topk(keys, num_samples, descending=True)[1]
        return F.reshape(out, (num_samples,)) if input.ndim == 1 else out

    def permutation(self, n, *, dtype: str = "int32") -> Tensor:
        """A random order of ``range(n)`` (``dtype`` int32, int16 or float32), or, for a
        Tensor ``n``, a copy of it shuffled along axis 0."""
        if isinstance(n, Tensor):
            if n.ndim == 0:
                n = F.reshape(n, (1,))
            return F.take(n, self._order(n.shape[0]), axis=0) if n.shape[0] else n
        n = _check_int("permutation's n", n, low=0)
        if dtype not in ("int32", "int16", "float32"):
            raise GraphError(f"random.permutation: dtype must be int32, int16 or float32, got "
                             f"{dtype!r} (at {user_location()})")
        order = self._order(n)
        return order if dtype == "int32" else F.astype(order, dtype)

    def _order(self, n: int):
        # argsort of float64 uniforms: ties (probability ~ n**2 / 2**54) keep index order
        return F.argsort(self._draw().uniform((n,), "float64"))

    def shuffle(self, inp: Tensor) -> None:
        """Shuffle ``inp`` along axis 0 in place, as MegEngine's (the tensor is given its new
        value; a GradManager's tape keeps the old one). Refused inside a trace, whose replay
        could not rewrite it: use ``x = rng.permutation(x)`` there."""
        if not isinstance(inp, Tensor):
            raise GraphError(f"random.shuffle: takes a Tensor, got {type(inp).__name__}")
        for recorder in MODE.recorders:  # a trace refuses here, before anything is drawn
            recorder.overwriting(inp)
        new = self.permutation(inp)
        set_array(inp, new._array(), owns=True, type=new.type)


def _size(size) -> tuple[int, ...]:
    if size is None:
        return (1,)
    if isinstance(size, Tensor):
        size = size.numpy().tolist()
    size = (size,) if not isinstance(size, (tuple, list)) else size
    return tuple(_check_int("size", d, low=0) for d in size)


def _positive(what: str, name: str, value, zero: bool = False) -> Tensor:
    if isinstance(value, Tensor):
        return value if value.dtype == np.float32 else F.astype(value, "float32")
    if not isinstance(value, (int, float, np.number)) or isinstance(value, bool) or \
            not (value >= 0 if zero else value > 0):
        bound = ">= 0" if zero else "> 0"
        raise GraphError(f"random.{what}: {name} must be a number {bound} or a Tensor, got "
                         f"{value!r} (at {user_location()})")
    return Tensor(np.float32(value), dtype="float32")


def _broadcast(size, *params) -> list:
    """``params`` broadcast to ``size`` + their broadcast shape (MegEngine's rule)."""
    try:
        shape = np.broadcast_shapes(*(tuple(p.shape) for p in params))
    except ValueError:
        raise GraphError(f"random: parameters of shapes {[tuple(p.shape) for p in params]} do "
                         f"not broadcast (at {user_location()})") from None
    target = (() if size is None else _size(size)) + tuple(shape)
    return [F.broadcast_to(F.reshape(p, (1,) * (len(target) - p.ndim) + tuple(p.shape)),
                           target) for p in params]


def _multinomial_input(input, num_samples, replacement):
    if not isinstance(input, Tensor) or input.ndim not in (1, 2) or \
            input.dtype not in (np.float32, np.float64):
        raise GraphError(f"random.multinomial: input must be a 1-D or 2-D float Tensor of "
                         f"weights, got {getattr(input, 'type', type(input).__name__)} (at "
                         f"{user_location()})")
    num_samples = _check_int("multinomial's num_samples", num_samples, low=1)
    classes = input.shape[-1]
    if not replacement and num_samples > classes:
        raise GraphError(f"random.multinomial: {num_samples} samples without replacement from "
                         f"{classes} categories (at {user_location()})")
    probs = F.astype(input, "float64")
    return (F.reshape(probs, (1, classes)) if input.ndim == 1 else probs), \
        (1 if input.ndim == 1 else input.shape[0])


_DEFAULT = RNG()
uniform = _DEFAULT.uniform
normal = _DEFAULT.normal
gamma = _DEFAULT.gamma
beta = _DEFAULT.beta
poisson = _DEFAULT.poisson
exponential = _DEFAULT.exponential
multinomial = _DEFAULT.multinomial
permutation = _DEFAULT.permutation
shuffle = _DEFAULT.shuffle
