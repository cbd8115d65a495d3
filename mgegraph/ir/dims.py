"""Symbolic dimensions: a small integer expression type for shapes known only by name.

Design: a `Dim` is a polynomial with integer coefficients over *atoms*. An atom is a name
(`batch`, a positive integer once shapes are bound) or a floor division `num // den` of a
canonical polynomial by an integer `den >= 2`. A monomial is a sorted tuple of atoms (`h*w`;
repeats for powers), and a `Dim` is the tuple of its `(monomial, coefficient)` pairs sorted by
monomial, zero coefficients dropped. Every operation builds this form, so expressions that the
rules below make equal are the same tuple: they compare equal and hash equal.

- Sums and products expand and fold constants: `2*(b + 1) - b == b + 2`.
- `p // c` splits each coefficient as `c*q + r` with `0 <= r < c`, so `p // c == q + r // c`
  exactly; then divides `r` and `c` by their gcd, and folds `(s // a) // c` into `s // (a*c)`.
  Hence `(2*b + 4) // 2 == b + 2`, `(b*6) // 3 == 2*b`, `(b - 1)//2 == (b + 1)//2 - 1`.
- `p % c` is `p - c*(p // c)`; `ceil_div(p, c)` is `-((-p) // c)`.
- Division by a `Dim` is allowed only where it is exact (a polynomial quotient with integer
  coefficients, as `b*h*w // (h*w) == b`); anything else is a `DimError`.

The form is sound (equal forms are equal for every binding) and complete for polynomials;
identities between floor atoms (`b//2 + (b + 1)//2 == b`) are not found, so `==` answering
False means "not provably equal", and a rule records a `Constraints.equal` fact instead.

Names stand for integers >= 1, so some signs are known from the form alone (`2*h - 1 >= 1`,
`b*h - b >= 0`): `known_positive` and `is_known_nonnegative` answer True, False or None, and
`<`, `<=`, `bool` answer only where they decide (else `UndecidedDimError`).

Constants collapse to `int`: every operation whose result has no names returns a plain int,
so fixed shapes stay tuples of ints and nothing downstream meets a `Dim` it does not need.
`Dim(3)` still exists for callers that want one; it equals 3 and hashes as 3.

The text form (`str(d)`, read back by `parse_dim` without eval; `docs/ir.md`):

    dim    := term (("+" | "-") term)*
    term   := unary (("*" | "//") unary)*
    unary  := "-" unary | atom
    atom   := INT | NAME | "(" dim ")"          NAME: [A-Za-z_][A-Za-z0-9_]*

`str` writes the canonical terms, constant last: `2*batch + 1`, `(h + 1)//2 - 1`, `h*w`,
`3*(b//2)`. Sizes are bounded (name length, terms, degree, nesting, coefficients, text length)
so a hostile model file gets a `DimError`, not a slow or deep computation.
"""
from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from enum import Enum

from .errors import FeedError, GraphError

MAX_NAME = 64  # characters in a name
MAX_TERMS = 64  # terms of one sum
MAX_DEGREE = 16  # atoms in one monomial
MAX_NESTING = 8  # floor divisions inside floor divisions
MAX_SIZE = 512  # atoms in a whole expression, nested ones included
MAX_COEFF = 2**63  # a coefficient's magnitude stays below int64's
# characters parse_dim reads: the limits above print in under 60,000 (512 atoms of 64-character
# names, and per atom at most one 19-digit coefficient and one floor's parentheses and divisor)
MAX_TEXT = 65536
MAX_DEPTH = 32  # parentheses and unary minus nested in parse_dim's input

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class DimError(GraphError):
    """A symbolic dimension is malformed, too large, or divided where it cannot be exactly."""


class UndecidedDimError(DimError, TypeError):
    """A symbolic dimension was asked for an int, a truth value or an order that depends on
    the values bound later (`int(batch)`, `batch - 2 < 3`)."""


@dataclass(frozen=True)
class _Floor:
    """The atom `num // den`: `num` canonical, its coefficients in [0, den), gcd with den 1."""

    num: Dim
    den: int

    def __post_init__(self):
        object.__setattr__(self, "key", (1, self.num._key, self.den))


def _atom_key(atom) -> tuple:
    return (0, atom) if isinstance(atom, str) else atom.key


def _mono_key(mono: tuple) -> tuple:
    return tuple(_atom_key(a) for a in mono)


class Dim:
    """An immutable dimension expression; `Dim("batch")` is a name, `Dim(3)` a constant.

    >>> b = Dim("batch")
    >>> str((2 * b + 4) // 2), (b * 6) // 3 == 2 * b, (b + 1) - b
    ('batch + 2', True, 1)
    """

    __slots__ = ("_key", "_nesting", "_size", "_terms")

    def __init__(self, value: str | int | Dim):
        if isinstance(value, str):
            _check_name(value)
            terms = (((value,), 1),)
        elif isinstance(value, Dim):
            terms = value._terms
        else:
            value = _as_int(value, "a Dim")
            if abs(value) >= MAX_COEFF:
                raise DimError(f"a dimension's constant {value} does not fit int64")
            terms = (((), value),) if value else ()
        _init(self, terms)

    # --- arithmetic: every result is canonical, and an int when it has no names ---
    def __add__(self, other):
        o = _poly_or_none(other)
        return NotImplemented if o is None else _make(_add(_poly(self), o))

    __radd__ = __add__

    def __sub__(self, other):
        o = _poly_or_none(other)
        return NotImplemented if o is None else _make(_add(_poly(self), _scale(o, -1)))

    def __rsub__(self, other):
        o = _poly_or_none(other)
        return NotImplemented if o is None else _make(_add(o, _scale(_poly(self), -1)))

    def __mul__(self, other):
        o = _poly_or_none(other)
        return NotImplemented if o is None else _make(_mul(_poly(self), o))

    __rmul__ = __mul__

    def __neg__(self):
        return _make(_scale(_poly(self), -1))

    def __pos__(self):
        return _make(_poly(self))

    def __floordiv__(self, other):
        return NotImplemented if _poly_or_none(other) is None else _floordiv(self, other)

    def __rfloordiv__(self, other):
        return NotImplemented if _poly_or_none(other) is None else _floordiv(other, self)

    def __mod__(self, other):
        return NotImplemented if _poly_or_none(other) is None else self - other * (self // other)

    def __rmod__(self, other):
        return NotImplemented if _poly_or_none(other) is None else other - self * (other // self)

    # --- equality with Dims and ints; order and truth only where sign knowledge decides ---
    def __eq__(self, other):
        if isinstance(other, Dim):
            return self._terms == other._terms
        o = _poly_or_none(other)
        return NotImplemented if o is None else self._terms == _freeze(o)

    def __hash__(self):
        const = self._constant()
        return hash(self._terms) if const is None else hash(const)

    def __lt__(self, other):
        return _order(self, "<", other)

    def __le__(self, other):
        return _order(self, "<=", other)

    def __gt__(self, other):
        return _order(self, ">", other)

    def __ge__(self, other):
        return _order(self, ">=", other)

    def __bool__(self):
        const = self._constant()
        if const is not None:
            return const != 0
        nonzero = known_positive(self) or known_positive(-self)
        return _decide(True if nonzero else None, self, "!=", 0)

    def __index__(self):
        const = self._constant()
        if const is None:
            raise UndecidedDimError(f"the symbolic dimension {self} has no integer value until "
                                    f"its names ({', '.join(sorted(names(self)))}) are bound")
        return const

    __int__ = __index__

    def __str__(self):
        return _format(self._terms)

    def __repr__(self):
        return f"Dim({str(self)!r})"

    def __reduce__(self):  # pickles and copies as text: the form is rebuilt, not trusted
        return (parse_dim, (str(self),))

    def __setattr__(self, name, value):
        raise AttributeError(f"Dim is immutable (tried to set {name})")

    def _constant(self) -> int | None:
        if not self._terms:
            return 0
        (mono, coeff), *rest = self._terms
        return coeff if mono == () and not rest else None


def _init(dim: Dim, terms: tuple) -> None:
    setter = object.__setattr__
    setter(dim, "_terms", terms)
    setter(dim, "_key", tuple((_mono_key(m), c) for m, c in terms))
    atoms = [a for m, _ in terms for a in m]
    floors = [a for a in atoms if isinstance(a, _Floor)]
    setter(dim, "_size", len(atoms) + sum(f.num._size for f in floors))
    setter(dim, "_nesting", max((f.num._nesting + 1 for f in floors), default=0))


def _check_name(name: str) -> None:
    if not _NAME.match(name) or len(name) > MAX_NAME:
        raise DimError(f"a dimension name must be an identifier ([A-Za-z_][A-Za-z0-9_]*) of at "
                       f"most {MAX_NAME} characters, got {name[:MAX_NAME + 1]!r}")


def _as_int(value, what: str) -> int:
    if isinstance(value, bool):
        raise DimError(f"{what} takes a name or an integer, got the bool {value}")
    try:
        return operator.index(value)
    except TypeError:
        raise DimError(f"{what} takes a name or an integer, got {value!r}") from None


# --- polynomials as dicts {monomial: coefficient} while computing, frozen into a Dim ---
def _poly_or_none(x) -> dict | None:
    if isinstance(x, Dim):
        return dict(x._terms)
    if isinstance(x, bool):
        return None
    try:
        value = operator.index(x)
    except TypeError:  # a float, a str, an array: the other operand's operator decides
        return None
    return {(): value} if value else {}


def _poly(x) -> dict:
    poly = _poly_or_none(x)
    if poly is None:
        raise DimError(f"a dimension is an int or a Dim, got {x!r}")
    return poly


def _add(a: dict, b: dict) -> dict:
    out = dict(a)
    for mono, coeff in b.items():
        out[mono] = out.get(mono, 0) + coeff
    return out


def _scale(a: dict, k: int) -> dict:
    return {mono: coeff * k for mono, coeff in a.items()}


def _mul(a: dict, b: dict) -> dict:  # factors hold at most MAX_TERMS terms each
    out: dict = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            mono = tuple(sorted(ma + mb, key=_atom_key))
            out[mono] = out.get(mono, 0) + ca * cb
    return out


def _freeze(poly: dict) -> tuple:
    items = [(m, c) for m, c in poly.items() if c]
    return tuple(sorted(items, key=lambda mc: _mono_key(mc[0])))


def _make(poly: dict) -> int | Dim:
    terms = _freeze(poly)
    if not terms:
        return 0
    if len(terms) == 1 and terms[0][0] == ():
        return terms[0][1]
    dim = object.__new__(Dim)
    _init(dim, terms)
    _check_bounds(dim)
    return dim


def _check_bounds(dim: Dim) -> None:
    terms = dim._terms
    limits = [(len(terms), MAX_TERMS, "terms in a sum"),
              (max(len(m) for m, _ in terms), MAX_DEGREE, "factors in a product"),
              (dim._nesting, MAX_NESTING, "nested floor divisions"),
              (dim._size, MAX_SIZE, "atoms in an expression")]
    for got, limit, what in limits:
        if got > limit:
            raise DimError(f"a symbolic dimension has {got} {what}, more than the {limit} allowed")
    big = max(abs(c) for _, c in terms)
    if big >= MAX_COEFF:
        raise DimError(f"a symbolic dimension's coefficient {big} does not fit int64")


# --- division ---
def _floordiv(num, den) -> int | Dim:
    if not isinstance(den, Dim) or den._constant() is not None:
        const = _as_int(den, "a divisor")
        if const <= 0:
            raise DimError(f"{num} // {const}: a symbolic dimension divides only by a positive "
                           f"integer")
        if isinstance(num, Dim):
            return _make(_floordiv_const(_poly(num), const))
        return operator.index(num) // const
    quotient = _divide_exactly(_poly(num), _poly(den))
    if quotient is None:
        raise DimError(f"({num}) // ({den}) does not divide exactly; a symbolic dimension "
                       f"divides by another only where the quotient is a polynomial")
    return _make(quotient)


def _floordiv_const(poly: dict, den: int) -> dict:
    if den == 1:
        return poly
    quot = {m: c // den for m, c in poly.items()}
    rem = {m: c % den for m, c in poly.items() if c % den}
    if all(m == () for m in rem):  # 0 <= constant < den floors to 0
        return quot
    g = math.gcd(den, *rem.values())
    rem, den = {m: c // g for m, c in rem.items()}, den // g
    inner = _single_floor(rem)
    if inner is not None:  # (s // a) // den == s // (a*den) for integers s and positive a, den
        return _add(quot, _floordiv_const(dict(inner.num._terms), inner.den * den))
    if den >= MAX_COEFF:
        raise DimError(f"a symbolic dimension's divisor {den} does not fit int64")
    numerator = _make(rem)
    return _add(quot, {(_Floor(numerator, den),): 1})


def _single_floor(poly: dict) -> _Floor | None:
    """The floor atom `poly` is, if it is exactly one (coefficient 1, nothing else)."""
    if len(poly) != 1:
        return None
    ((mono, coeff),) = poly.items()
    single = coeff == 1 and len(mono) == 1 and isinstance(mono[0], _Floor)
    return mono[0] if single else None


def _leading(poly: dict) -> tuple:
    # graded lexicographic order on monomials, so the division below is the exact one
    return max(poly, key=lambda m: (len(m), sorted(_mono_key(m), reverse=True)))


def _divide_monomial(mono: tuple, by: tuple) -> tuple | None:
    rest = list(mono)
    for atom in by:
        if atom not in rest:
            return None
        rest.remove(atom)
    return tuple(rest)


def _divide_exactly(num: dict, den: dict) -> dict | None:
    """The polynomial `q` with `q * den == num` and integer coefficients, or None."""
    num, quot = {m: c for m, c in num.items() if c}, {}
    lead = _leading(den)
    for _ in range(MAX_TERMS * MAX_TERMS):
        if not num:  # every step took step*den off num, so quot*den == num exactly
            return quot
        top = _leading(num)
        mono = _divide_monomial(top, lead)
        if mono is None or num[top] % den[lead]:
            return None
        step = {mono: num[top] // den[lead]}
        quot = _add(quot, step)
        num = {m: c for m, c in _add(num, _scale(_mul(step, den), -1)).items() if c}
    return None


def ceil_div(num, den) -> int | Dim:
    """`num` divided by `den`, rounded up (convolution's and pooling's ceil mode).

    >>> str(ceil_div(Dim("h"), 2))
    '(h + 1)//2'
    """
    if isinstance(den, Dim) and den._constant() is None:
        return _floordiv(num, den)  # exact or refused: a remainder never needs rounding up
    const = _as_int(den, "a divisor")
    return _floordiv(num + (const - 1), const) if const > 0 else _floordiv(num, const)


# --- the text form ---
def _format(terms: tuple) -> str:
    if not terms:
        return "0"
    ordered = [t for t in terms if t[0] != ()] + [t for t in terms if t[0] == ()]
    text = ""
    for i, (mono, coeff) in enumerate(ordered):
        # after a leading unary minus a bare `b//2` would read as `(-b)//2`: parenthesise
        body = _format_term(mono, abs(coeff), bare_floor=not (i == 0 and coeff < 0))
        if i == 0:
            text = ("-" if coeff < 0 else "") + body
        else:
            text += (" - " if coeff < 0 else " + ") + body
    return text


def _format_term(mono: tuple, coeff: int, bare_floor: bool) -> str:
    if not mono:
        return str(coeff)
    alone = bare_floor and coeff == 1 and len(mono) == 1
    factors = [_format_atom(a, alone) for a in mono]
    return "*".join(factors if coeff == 1 else [str(coeff), *factors])


def _format_atom(atom, alone: bool) -> str:
    if isinstance(atom, str):
        return atom
    num = str(atom.num)
    text = f"{num}//{atom.den}" if _NAME.match(num) else f"({num})//{atom.den}"
    return text if alone else f"({text})"


_TOKEN = re.compile(r"\s*(?:(0|[1-9][0-9]*)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*()]))")


def _tokenize(text: str) -> list[tuple[int, str, int | str]]:
    """(column, kind, value) triples, kind "int", "name" or the operator itself."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip() == "":
                break
            pos += len(text[pos:]) - len(text[pos:].lstrip())
            raise _parse_error(text, pos, f"unexpected character {text[pos]!r}")
        number, name, symbol = match.groups()
        column = match.start(match.lastindex)
        if number is not None:
            if len(number) > 19 or int(number) >= MAX_COEFF:
                raise _parse_error(text, column, f"the integer {number[:24]} does not fit int64")
            tokens.append((column, "int", int(number)))
        elif name is not None:
            tokens.append((column, "name", name))
        else:
            tokens.append((column, symbol, symbol))
        pos = match.end()
    return tokens


def _parse_error(text: str, column: int, why: str) -> DimError:
    shown = text if len(text) <= 80 else text[:77] + "..."
    return DimError(f"cannot read {shown!r} as a dimension: {why} at column {column}")


class _Parser:
    """Recursive descent over the grammar in the module docstring; depth is bounded."""

    def __init__(self, text: str):
        self.text, self.tokens, self.pos = text, _tokenize(text), 0

    def parse(self) -> int | Dim:
        value = self.sum(0)
        if self.pos < len(self.tokens):
            column, _, token = self.tokens[self.pos]
            raise _parse_error(self.text, column, f"unexpected {token!r}")
        return value

    def peek(self) -> str | None:
        return self.tokens[self.pos][1] if self.pos < len(self.tokens) else None

    def sum(self, depth: int):
        value = self.term(depth)
        while self.peek() in ("+", "-"):
            sign = self.tokens[self.pos][1]
            self.pos += 1
            right = self.term(depth)
            value = value + right if sign == "+" else value - right
        return value

    def term(self, depth: int):
        value = self.unary(depth)
        while self.peek() in ("*", "//"):
            symbol = self.tokens[self.pos][1]
            self.pos += 1
            right = self.unary(depth)
            value = value * right if symbol == "*" else _floordiv(value, right)
        return value

    def unary(self, depth: int):
        if depth > MAX_DEPTH:
            column = self.tokens[self.pos][0] if self.pos < len(self.tokens) else len(self.text)
            raise _parse_error(self.text, column, f"more than {MAX_DEPTH} nested levels")
        if self.peek() == "-":
            self.pos += 1
            return -self.unary(depth + 1)
        return self.atom(depth)

    def atom(self, depth: int):
        if self.pos >= len(self.tokens):
            raise _parse_error(self.text, len(self.text), "the text ends where a value belongs")
        column, kind, value = self.tokens[self.pos]
        self.pos += 1
        if kind == "int":
            return value
        if kind == "name":
            return Dim(value)
        if kind == "(":
            inner = self.sum(depth + 1)
            if self.peek() != ")":
                end = self.tokens[self.pos][0] if self.pos < len(self.tokens) else len(self.text)
                raise _parse_error(self.text, end, "expected ')'")
            self.pos += 1
            return inner
        raise _parse_error(self.text, column, f"unexpected {value!r}")


def parse_dim(text: str) -> int | Dim:
    """Read a dimension's text form back, without eval; an int when it has no names.

    >>> parse_dim("2*batch + 1") == 2 * Dim("batch") + 1
    True
    """
    if not isinstance(text, str):
        raise DimError(f"parse_dim takes a str, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise DimError(f"a dimension's text has {len(text)} characters, more than the "
                       f"{MAX_TEXT} allowed")
    return _Parser(text).parse()


# --- names, values, substitution ---
def names(dim: int | Dim) -> frozenset[str]:
    """The names `dim` depends on, floor divisions' numerators included."""
    if not isinstance(dim, Dim):
        return frozenset()
    found = set()
    for mono, _ in dim._terms:
        for atom in mono:
            found |= {atom} if isinstance(atom, str) else names(atom.num)
    return frozenset(found)


def fold(dim: Dim, name, number, ops: dict):
    """Rebuild ``dim`` in another algebra (graph values, ONNX nodes) in the tree of its text
    form (``str(dim)`` read with Python's precedence: terms left to right, constant last, a
    leading minus on the first factor): ``name(text)`` and ``number(int >= 0)`` give the
    leaves, ``ops`` maps ``"+"``, ``"-"``, ``"*"``, ``"//"`` (two operands) and ``"neg"`` (one)
    to the operations. A floor's numerator has no negative coefficient, so an integer
    division that truncates is floor division there."""
    if not isinstance(dim, Dim):
        return number(_as_int(dim, "a dimension"))
    terms = dim._terms or (((), 0),)
    ordered = [t for t in terms if t[0] != ()] + [t for t in terms if t[0] == ()]
    total = None
    for mono, coeff in ordered:
        factors = [name(atom) if isinstance(atom, str)
                   else ops["//"](fold(atom.num, name, number, ops), number(atom.den))
                   for atom in mono]
        if abs(coeff) != 1 or not mono:
            factors.insert(0, number(abs(coeff)))
        if total is None and coeff < 0:
            factors[0] = ops["neg"](factors[0])
        body = factors[0]
        for factor in factors[1:]:
            body = ops["*"](body, factor)
        total = body if total is None else ops["-" if coeff < 0 else "+"](total, body)
    return total


# Python's arithmetic, Dim's included: folding with it rebuilds a Dim with its names replaced
_ARITHMETIC = {"+": operator.add, "-": operator.sub, "*": operator.mul,
               "//": _floordiv, "neg": operator.neg}


def _fold(dim, leaf):
    """Rebuild `dim` with each name replaced by `leaf(name)`, through the arithmetic above."""
    if not isinstance(dim, Dim):
        return _as_int(dim, "a dimension")
    return fold(dim, leaf, int, _ARITHMETIC)


def evaluate(dim: int | Dim, bindings: dict[str, int]) -> int:
    """The value of `dim` with its names bound.

    >>> evaluate((Dim("h") - 3) // 2 + 1, {"h": 224})
    111
    """
    missing = sorted(names(dim) - bindings.keys())
    if missing:
        raise DimError(f"cannot evaluate {dim}: no value for {', '.join(missing)}")
    return _fold(dim, lambda name: _as_int(bindings[name], f"the value of {name}"))


def substitute(dim: int | Dim, bindings: dict[str, int | Dim]) -> int | Dim:
    """`dim` with the names in `bindings` replaced (by ints or Dims); others stay.

    >>> str(substitute(Dim("b") * Dim("h"), {"h": 2 * Dim("w")}))
    '2*b*w'
    """
    def leaf(name):
        value = bindings.get(name, Dim(name))
        return value if isinstance(value, Dim) else _as_int(value, f"the value of {name}")
    return _fold(dim, leaf)


# --- sign knowledge: every name is an integer >= 1 ---
def _lower_bound(dim) -> int | None:
    """A lower bound of `dim` over all names >= 1, when the form gives one.

    Positive terms count at their atoms' lower bounds. A negative term `-c*m` is cancelled by
    positive terms on multiples of `m` (`k*m*n >= k*m` where every factor of `n` is >= 1),
    which then count as 0; a negative term left over leaves no bound.
    """
    if not isinstance(dim, Dim):
        return operator.index(dim)
    positive = {mono: coeff for mono, coeff in dim._terms if coeff > 0 or not mono}
    for mono, coeff in dim._terms:
        if mono and coeff < 0 and not _cancel(positive, mono, -coeff):
            return None
    total = 0
    for mono, coeff in positive.items():
        lows = [_atom_lower_bound(atom) for atom in mono]
        if None in lows:
            return None
        total += coeff * math.prod(lows)
    return total


def _cancel(positive: dict, mono: tuple, need: int) -> bool:
    """Take `need` units off positive terms on multiples of `mono` (itself >= 0), if there are."""
    if None in [_atom_lower_bound(atom) for atom in mono]:
        return False
    for other in list(positive):
        rest = _divide_monomial(other, mono) if other else None
        if rest is None or any((_atom_lower_bound(atom) or 0) < 1 for atom in rest):
            continue
        used = min(need, positive[other])
        positive[other] -= used
        need -= used
        if need == 0:
            return True
    return False


def _atom_lower_bound(atom) -> int | None:
    """A lower bound >= 0 of a name or floor atom, or None: products need nonnegative factors."""
    if isinstance(atom, str):
        return 1
    low = _lower_bound(atom.num)
    return None if low is None or low < 0 else low // atom.den


def is_known_nonnegative(dim: int | Dim) -> bool | None:
    """True if `dim >= 0` for every binding, False if `dim < 0` for every one, else None."""
    low = _lower_bound(dim)
    if low is not None and low >= 0:
        return True
    high = _lower_bound(-dim)  # -dim >= high, so dim <= -high
    return False if high is not None and high >= 1 else None


def known_positive(dim: int | Dim) -> bool | None:
    """True if `dim >= 1` for every binding, False if `dim <= 0` for every one, else None.

    >>> known_positive(Dim("h") - 1), known_positive(Dim("h") * 2 - 1)
    (None, True)
    """
    low = _lower_bound(dim)
    if low is not None and low >= 1:
        return True
    high = _lower_bound(-dim)
    return False if high is not None and high >= 0 else None


# each order as the sign of (dim - other) * direction it needs
_ORDERS = {"<": (known_positive, -1), "<=": (is_known_nonnegative, -1),
           ">": (known_positive, 1), ">=": (is_known_nonnegative, 1)}


def _order(dim: Dim, symbol: str, other):
    if _poly_or_none(other) is None:
        return NotImplemented
    known_sign, direction = _ORDERS[symbol]
    return _decide(known_sign((dim - other) * direction), dim, symbol, other)


def _decide(known: bool | None, left, symbol: str, right) -> bool:
    if known is None:
        raise UndecidedDimError(f"cannot decide whether {left} {symbol} {right} before the "
                                f"dimensions are bound")
    return known


# --- facts the shape rules discover, checked once shapes are bound ---
class Relation(Enum):
    EQUAL = "=="
    AT_LEAST = ">="


@dataclass(frozen=True)
class Constraint:
    """`left <relation> right`, recorded by `op` for the node made at `location`."""

    relation: Relation
    left: int | Dim
    right: int | Dim
    op: str
    location: str

    def __str__(self):
        return f"{self.left} {self.relation.value} {self.right}"

    def holds(self, bindings: dict[str, int]) -> bool:
        left, right = evaluate(self.left, bindings), evaluate(self.right, bindings)
        return left == right if self.relation is Relation.EQUAL else left >= right


class Constraints:
    """The facts shape rules recorded about symbolic dimensions (`batch == n`, `h >= 3`).

    A fact the form already decides is not recorded: a true one is dropped, a false one is a
    `DimError` at build time, naming the op and the user's line.

    >>> facts = Constraints()
    >>> facts.equal(Dim("n"), Dim("batch"), op="add", location="model.py:3")
    >>> facts.check({"n": 4, "batch": 5})
    Traceback (most recent call last):
    mgegraph.ir.errors.FeedError: the fed shapes break batch == n (batch=5, n=4): ...
    """

    def __init__(self):
        self._facts: dict[tuple, Constraint] = {}  # first origin of each distinct fact kept

    def equal(self, a: int | Dim, b: int | Dim, *, op: str, location: str) -> None:
        a, b = sorted((a, b), key=_sort_key)  # `a == b` and `b == a` are one fact
        difference = a - b
        if difference == 0:
            return
        if known_positive(difference) or known_positive(-difference):
            raise DimError(f"{op}: {a} and {b} must be equal but never are "
                           f"(node made at {location})")
        self._record(Constraint(Relation.EQUAL, a, b, op, location))

    def at_least(self, dim: int | Dim, low: int | Dim, *, op: str, location: str) -> None:
        known = is_known_nonnegative(dim - low)
        if known is False:
            raise DimError(f"{op}: {dim} must be at least {low} but never is "
                           f"(node made at {location})")
        if known is None:
            self._record(Constraint(Relation.AT_LEAST, dim, low, op, location))

    def copy(self) -> Constraints:
        other = Constraints()
        other._facts = dict(self._facts)
        return other

    def _record(self, fact: Constraint) -> None:
        self._facts.setdefault((fact.relation, fact.left, fact.right), fact)

    def __iter__(self):
        return iter(self._facts.values())

    def __len__(self):
        return len(self._facts)

    def __str__(self):
        return "\n".join(f"{fact}  ({fact.op} at {fact.location})" for fact in self)

    def check(self, bindings: dict[str, int]) -> None:
        """Raise a `FeedError` naming the first fact the bound values break."""
        for fact in self:
            involved = names(fact.left) | names(fact.right)
            missing = sorted(involved - bindings.keys())
            origin = f"recorded by {fact.op} for the node made at {fact.location}"
            if missing:
                raise FeedError(f"no fed shape binds {', '.join(missing)}, needed by {fact} "
                                f"({origin})")
            if not fact.holds(bindings):
                bound = ", ".join(f"{name}={bindings[name]}" for name in sorted(involved))
                left, right = evaluate(fact.left, bindings), evaluate(fact.right, bindings)
                raise FeedError(f"the fed shapes break {fact} ({bound}): "
                                f"{left} {fact.relation.value} {right} is false ({origin})")


def _sort_key(dim: int | Dim) -> tuple:
    return (1, dim._key) if isinstance(dim, Dim) else (0, dim)


# --- matching fed shapes against declared ones ---
def shape_text(shape: tuple) -> str:
    """`(batch, 3, 224)`: a shape of ints and Dims as the messages write it."""
    return "(" + ", ".join(str(d) for d in shape) + ")"


def bare_name(dim) -> str | None:
    """The name when ``dim`` is one name alone (``batch``), else None (``2*batch``, 3)."""
    if isinstance(dim, Dim) and len(dim._terms) == 1:
        ((mono, coeff),) = dim._terms
        if coeff == 1 and len(mono) == 1 and isinstance(mono[0], str):
            return mono[0]
    return None


def bindings_text(bindings) -> str:
    """``batch=7, n=3``: names' values (a dict or (name, value) pairs) in the names' order."""
    pairs = bindings.items() if isinstance(bindings, dict) else bindings
    return ", ".join(f"{name}={value}" for name, value in sorted(pairs))


def bind_shape(declared: tuple, actual: tuple, bindings: dict[str, int],
               what: str = "input") -> dict[str, int]:
    """Match a fed shape with a declared one, adding the names it binds to `bindings`.

    A bare name binds (to a value >= 1, the same at each use); an expression or an int must
    equal the fed size. `bindings` changes only when the whole shape matches.

    >>> bind_shape((Dim("batch"), 2 * Dim("batch")), (4, 8), {})
    {'batch': 4}
    """
    declared, actual = tuple(declared), tuple(_fed_size(size, what) for size in actual)
    for dim in declared:
        if _poly_or_none(dim) is None:
            raise DimError(f"{what}: a declared dimension is an int or a Dim, got {dim!r}")
    if len(declared) != len(actual):
        raise FeedError(f"{what}: fed shape {shape_text(actual)} has {len(actual)} dimensions, "
                        f"the declared {shape_text(declared)} has {len(declared)}")
    found = dict(bindings)
    for i, (dim, size) in enumerate(zip(declared, actual)):
        name = bare_name(dim)
        if name is not None:
            _bind_name(found, name, size, f"{what}: dimension {i} ({name}) of the fed shape "
                                          f"{shape_text(actual)}")
    for i, (dim, size) in enumerate(zip(declared, actual)):
        if bare_name(dim) is None:
            _match_expression(found, dim, size, f"{what}: dimension {i} of the fed shape "
                                                f"{shape_text(actual)}, declared {dim}")
    bindings.update(found)
    return bindings


def _fed_size(size, what: str) -> int:
    try:
        return operator.index(size)
    except TypeError:
        raise FeedError(f"{what}: a fed size is an integer, got {size!r}") from None


def _bind_name(found: dict, name: str, size: int, where: str) -> None:
    if size < 1:
        raise FeedError(f"{where} is {size}; a named dimension is at least 1")
    if found.get(name, size) != size:
        raise FeedError(f"{where} is {size}, but {name} is already bound to {found[name]}")
    found[name] = size


def _match_expression(found: dict, dim, size: int, where: str) -> None:
    missing = sorted(names(dim) - found.keys())
    if missing:
        raise FeedError(f"{where}: {', '.join(missing)} is bound by no bare dimension of the "
                        f"declared shapes, so {dim} cannot be checked")
    value = evaluate(dim, found)
    if value != size:
        bound = "".join(f", {n}={found[n]}" for n in sorted(names(dim)))
        raise FeedError(f"{where}{bound}: expected {value}, got {size}")
