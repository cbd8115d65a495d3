"""Symbolic dimensions: the canonical form, the text form and its parser, values, sign
knowledge, recorded constraints and matching fed shapes."""
import ast
import copy
import doctest
import inspect
import operator
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgegraph.ir import dims
from mgegraph.ir.dims import (
    Constraints,
    Dim,
    DimError,
    UndecidedDimError,
    bind_shape,
    ceil_div,
    evaluate,
    fold,
    is_known_nonnegative,
    known_positive,
    names,
    parse_dim,
    substitute,
)
from mgegraph.ir.errors import FeedError, GraphError

b, c, h, w = Dim("b"), Dim("c"), Dim("h"), Dim("w")


# --- the canonical form and its text, exactly ---
@pytest.mark.parametrize("make, text", [
    (lambda: b, "b"),
    (lambda: 2 * b + 1, "2*b + 1"),
    (lambda: 1 + b * 2, "2*b + 1"),
    (lambda: h * w, "h*w"),
    (lambda: w * h, "h*w"),
    (lambda: (2 * b + 4) // 2, "b + 2"),
    (lambda: b // 1, "b"),
    (lambda: (b * 6) // 3, "2*b"),
    (lambda: (h - 1) // 2 + 1, "(h + 1)//2"),
    (lambda: (h - 3) // 2 + 1, "(h + 1)//2 - 1"),
    (lambda: (2 * b + 2) // 4, "(b + 1)//2"),
    (lambda: (b // 2) // 3, "b//6"),
    (lambda: (2 * b) // 6, "b//3"),
    (lambda: b // 2 * 3, "3*(b//2)"),
    (lambda: -(b // 2), "-(b//2)"),
    (lambda: 1 - b // 2, "-(b//2) + 1"),
    (lambda: h * (b // 2), "h*(b//2)"),
    (lambda: b % 2, "b - 2*(b//2)"),
    (lambda: ceil_div(h, 2), "(h + 1)//2"),
    (lambda: ceil_div(h - 3, 2) + 1, "h//2"),
    (lambda: b * b - 1, "b*b - 1"),
    (lambda: (b + 1) * (b - 1), "b*b - 1"),
    (lambda: -b - h, "-b - h"),
    (lambda: (b * h * w) // (h * w), "b"),
    (lambda: ((b + 1) * (h + 2)) // (h + 2), "b + 1"),
    (lambda: (b * b - 1) // (b + 1), "b - 1"),
    (lambda: (6 * b * h) // (3 * h), "2*b"),
])
def test_canonical_form_prints_exactly(make, text):
    dim = make()
    assert str(dim) == text
    assert parse_dim(text) == dim and hash(parse_dim(text)) == hash(dim)


def test_constant_results_are_plain_ints():
    for value, expected in [((b + 1) - b, 1), (b - b, 0), ((b * 3) % 3, 0), (b // b, 1),
                            (Dim(3) + 4, 7), (b * 0, 0), (parse_dim("2*(3 + 4)"), 14)]:
        assert type(value) is int and value == expected


def test_constant_dim_equals_and_hashes_as_its_int():
    assert Dim(3) == 3 and 3 == Dim(3) and hash(Dim(3)) == hash(3)
    assert Dim(0) == 0 and hash(Dim(0)) == hash(0) and int(Dim(-2)) == -2
    assert (Dim(2), b) == (2, b) and len({Dim(5), 5}) == 1
    assert b != 1 and b != "b" and b != 1.0 and b != h and Dim(b) == b and Dim(np.int64(2)) == 2
    assert b + np.int64(2) == b + 2 and (b == np.array([1, 2])).tolist() == [False, False]
    with pytest.raises(TypeError):
        _ = b < 2.5


def test_equal_expressions_hash_equal():
    built = [(b + h) * 2, 2 * h + b * 2, h + b + h + b, (4 * b + 4 * h) // 2]
    assert len(set(built)) == 1 and len({hash(x) for x in built}) == 1


def test_names_and_bad_leaves_are_refused():
    for bad in ["", "2x", "a-b", "a b", "bätch", "x" * 65, "b;", "__import__('os')"]:
        with pytest.raises(DimError, match="identifier"):
            Dim(bad)
    for bad in [True, 1.5, None, [1]]:
        with pytest.raises(DimError, match="a name or an integer"):
            Dim(bad)
    assert issubclass(DimError, GraphError) and str(Dim("_x9" * 10)) == "_x9" * 10


def test_division_only_where_it_is_defined():
    for divide in [lambda: b // 0, lambda: b // -2, lambda: 3 // Dim(0), lambda: b % 0,
                   lambda: ceil_div(b, 0)]:
        with pytest.raises(DimError, match="positive integer"):
            divide()
    for divide in [lambda: b // h, lambda: (b + 1) // b, lambda: 6 // b, lambda: (b * h) // (2 * h),
                   lambda: ceil_div(b, h)]:
        with pytest.raises(DimError, match="does not divide exactly"):
            divide()
    assert (b * h) % h == 0 and ceil_div(b * h, h) == b


def test_a_dim_is_immutable_and_pickles_as_its_text():
    with pytest.raises(AttributeError, match="immutable"):
        b._terms = ()
    dim = (h + 1) // 2 * w - 3
    assert pickle.loads(pickle.dumps(dim)) == dim and copy.deepcopy(dim) == dim


# --- what depends on values bound later ---
def test_no_int_truth_or_order_without_bindings():
    for ask in [lambda: int(b), lambda: range(b), lambda: bool(b - 1), lambda: b < 3,
                lambda: b - 2 >= 0, lambda: sorted([b, h])]:
        with pytest.raises(UndecidedDimError):
            ask()
    with pytest.raises(TypeError, match=r"names \(b\) are bound"):  # as numpy expects
        [0, 1][b]
    assert b >= 1 and b + 1 > b and not (b < 1) and 2 * b >= b + 1 and bool(b) and bool(-b)
    assert h // 2 >= 0 and b * h >= b and h * w >= w and (h + 1) // 2 >= 1


def test_sign_knowledge():
    cases = [(b, True, True), (b - 1, True, None), (b - 2, None, None), (-b, False, False),
             (1 - b, None, False), (b * h - 1, True, None), (h // 2, True, None),
             ((h + 1) // 2, True, True), (h // 2 - 1, None, None), (b - h, None, None),
             (-(h // 2) - 1, False, False), (0, True, False), (-3, False, False),
             (b * h - b, True, None), (b * h - b + 1, True, True), (2 * b * h - 3 * b, None, None),
             (h * w - h - w, None, None), (b * h * w - 2 * b, None, None), (b - b * h, None, False),
             (b * ((h + 1) // 2) - b, True, None), (b * (h // 2) - b, None, None)]
    for dim, nonnegative, positive in cases:
        assert (is_known_nonnegative(dim), known_positive(dim)) == (nonnegative, positive), dim


def test_names_evaluate_substitute():
    dim = (h - 3) // 2 * w + b
    assert names(dim) == {"b", "h", "w"} and names(4) == frozenset()
    assert evaluate(dim, {"h": 224, "w": 2, "b": 1}) == 110 * 2 + 1
    with pytest.raises(DimError, match="no value for b, w"):
        evaluate(dim, {"h": 5})
    assert substitute(dim, {"h": 2 * c + 3}) == c * w + b
    assert substitute(dim, {"h": 7, "w": 1, "b": 0}) == 2
    with pytest.raises(DimError, match="the value of b"):
        evaluate(b, {"b": "4"})


# --- random expressions against Python's integer arithmetic ---
_NAMES = ("a", "b", "c")


def _leaf():
    return st.one_of(st.sampled_from(_NAMES).map(lambda n: (Dim(n), lambda env, n=n: env[n])),
                     st.integers(-6, 6).map(lambda k: (k, lambda env, k=k: k)))


def _node(children):
    pairs = st.tuples(children, children)
    const = st.integers(1, 7)
    return st.one_of(
        pairs.map(lambda p: (p[0][0] + p[1][0], lambda e, p=p: p[0][1](e) + p[1][1](e))),
        pairs.map(lambda p: (p[0][0] - p[1][0], lambda e, p=p: p[0][1](e) - p[1][1](e))),
        pairs.map(lambda p: (p[0][0] * p[1][0], lambda e, p=p: p[0][1](e) * p[1][1](e))),
        children.map(lambda x: (-x[0], lambda e, x=x: -x[1](e))),
        st.tuples(children, const).map(
            lambda p: (p[0][0] // p[1], lambda e, p=p: p[0][1](e) // p[1])),
        st.tuples(children, const).map(
            lambda p: (p[0][0] % p[1], lambda e, p=p: p[0][1](e) % p[1])),
        st.tuples(children, const).map(
            lambda p: (ceil_div(p[0][0], p[1]), lambda e, p=p: -(-p[0][1](e) // p[1]))),
    )


expressions = st.recursive(_leaf(), _node, max_leaves=8)
small_expressions = st.recursive(_leaf(), _node, max_leaves=4)  # products of three stay small
environments = st.fixed_dictionaries({n: st.integers(1, 40) for n in _NAMES})


@settings(max_examples=150, deadline=None)
@given(expressions, environments)
def test_evaluate_matches_integer_arithmetic(expr, env):
    dim, reference = expr
    assert evaluate(dim, env) == reference(env)
    assert substitute(dim, env) == reference(env)
    partial = substitute(dim, {"a": env["a"]})
    assert "a" not in names(partial) and evaluate(partial, env) == reference(env)


@settings(max_examples=150, deadline=None)
@given(expressions)
def test_text_form_round_trips(expr):
    dim, _ = expr
    back = parse_dim(str(dim))
    assert back == dim and hash(back) == hash(dim) and str(back) == str(dim)
    assert type(back) is type(dim)


@settings(max_examples=100, deadline=None)
@given(expressions, environments)
def test_sign_knowledge_is_sound(expr, env):
    dim, reference = expr
    value = reference(env)
    if known_positive(dim) is not None:
        assert (value >= 1) == known_positive(dim)
    if is_known_nonnegative(dim) is not None:
        assert (value >= 0) == is_known_nonnegative(dim)


monomials = st.lists(st.sampled_from(("a", "b", "(a//2)", "((b + 1)//2)")), max_size=2)
polynomials = st.lists(st.tuples(st.integers(-2, 2), monomials), max_size=4)
small_environments = st.fixed_dictionaries({n: st.integers(1, 3) for n in _NAMES})


@settings(max_examples=400, deadline=None)
@given(polynomials, small_environments)
def test_sign_knowledge_is_sound_on_polynomials(terms, env):
    # sums of signed products, where negative terms meet their multiples (`b*h - b`)
    dim = sum((coeff * parse_dim("*".join(["1", *mono])) for coeff, mono in terms), 0)
    value = evaluate(dim, env)
    if known_positive(dim) is not None:
        assert (value >= 1) == known_positive(dim)
    if is_known_nonnegative(dim) is not None:
        assert (value >= 0) == is_known_nonnegative(dim)


@settings(max_examples=100, deadline=None)
@given(small_expressions, small_expressions, small_expressions, st.integers(1, 7))
def test_algebraic_identities_give_one_form(e, f, g, k):
    (e, _), (f, _), (g, _) = e, f, g
    assert e + f == f + e and hash(e + f) == hash(f + e)
    assert e * f == f * e and (e * f) * g == e * (f * g)
    assert e * (f + g) == e * f + e * g
    assert e - e == 0 and (e * k) // k == e and (e + k * f) // k == e // k + f
    assert ceil_div(e * k, k) == e and (e * k) % k == 0


@settings(max_examples=100, deadline=None)
@given(expressions, expressions, environments)
def test_equal_forms_are_equal_values(e, f, env):
    (e, ref_e), (f, ref_f) = e, f
    if e == f:
        assert hash(e) == hash(f) and ref_e(env) == ref_f(env)
    if names(e) and names(e) <= {"a", "b"}:  # exact division by a non-constant Dim
        assert (e * f) // e == f


# --- hostile text ---
@pytest.mark.parametrize("text, why", [
    ("__import__('os')", "unexpected character"),
    ("os.system('x')", "unexpected character"),
    ("b; import os", "unexpected character"),
    ("lambda: 1", "unexpected character"),
    ("b ** 2", "unexpected '\\*'"),
    ("b / 2", "unexpected character '/'"),
    ("b % 2", "unexpected character '%'"),
    ("1e3", "unexpected 'e3'"),
    ("0x10", "unexpected 'x10'"),
    ("007", "unexpected 0"),
    ("+b", "unexpected '\\+'"),
    ("", "ends where a value belongs"),
    ("   ", "ends where a value belongs"),
    ("(b + 1", "expected '\\)'"),
    ("b + 1)", "unexpected '\\)'"),
    ("b +", "ends where a value belongs"),
    ("b h", "unexpected 'h'"),
    ("bätch", "unexpected character"),
    ("9" * 30, "does not fit int64"),
    ("x" * 65, "identifier"),
    ("b // 0", "positive integer"),
    ("3 // 0", "positive integer"),
    ("b // c", "does not divide exactly"),
    ("(" * 10_000 + "b" + ")" * 10_000, "nested levels"),
    ("-" * 5_000 + "b", "nested levels"),
    ("b + " * 20_000 + "b", "more than the 65536 allowed"),
    ("*".join(["(a + b + c + d + e + f + g + h + i)"] * 3), "too many terms|more than the"),
    ("*".join(["(a + b + c + 1)"] * 6), "84 terms in a sum"),
    ("*".join(["b"] * 17), "17 factors in a product"),
    ("5000000000000000000*b + 5000000000000000000*b", "does not fit int64"),
], ids=lambda value: value if len(value) <= 40 else value[:37] + "...")
def test_hostile_text_is_a_clear_error(text, why):
    with pytest.raises(DimError, match=why):
        parse_dim(text)


def test_nesting_and_size_are_bounded():
    dim = b
    for _ in range(8):
        dim = (dim + 1) // 2
    assert parse_dim(str(dim)) == dim
    with pytest.raises(DimError, match="9 nested floor divisions, more than the 8 allowed"):
        (dim + 1) // 2
    cube = "*".join(["(a + b + c)"] * 9)
    assert len(str(parse_dim(cube))) < dims.MAX_TEXT
    with pytest.raises(DimError, match="550 atoms in an expression, more than the 512 allowed"):
        parse_dim(cube + "*d")
    with pytest.raises(DimError, match="divisor 1000000000000000000000 does not fit int64"):
        b // 10**21
    with pytest.raises(DimError, match="divisor 1000000000000000000000 does not fit int64"):
        (b // 10**11) // 10**10
    with pytest.raises(DimError, match="constant -9223372036854775808 does not fit int64"):
        Dim(-2**63)


def test_the_module_never_runs_text_as_code():
    tree = ast.parse(inspect.getsource(dims))
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert not called & {"eval", "exec", "compile", "__import__", "getattr"}


def test_parser_takes_only_text_and_reads_its_grammar():
    with pytest.raises(DimError, match="takes a str"):
        parse_dim(b"b")
    assert parse_dim(" - ( b ) * 2 //1 + h*w ") == h * w - 2 * b
    assert parse_dim("+".join(["b"] * 10_000)) == 10_000 * b  # long but legal: linear time
    assert parse_dim("(" * 30 + "b" + ")" * 30) == b


# --- facts recorded by rules, checked on bound shapes ---
def test_constraints_record_only_what_is_undecided():
    facts = Constraints()
    facts.equal(b, b, op="add", location="m.py:1")
    facts.equal(2 * b // 2, b, op="add", location="m.py:1")
    facts.at_least(b, 1, op="conv2d", location="m.py:2")
    facts.at_least(2 * h + 1, 3, op="conv2d", location="m.py:2")
    assert len(facts) == 0
    facts.equal(b, c, op="add", location="m.py:3")
    facts.equal(c, b, op="concat", location="m.py:4")
    facts.at_least(h, 3, op="conv2d", location="m.py:5")
    assert len(facts) == 2
    assert str(facts) == "b == c  (add at m.py:3)\nh >= 3  (conv2d at m.py:5)"


def test_constraints_refuse_what_never_holds():
    facts = Constraints()
    for record in [lambda: facts.equal(b, b + 1, op="add", location="m.py:7"),
                   lambda: facts.equal(3, 4, op="add", location="m.py:7"),
                   lambda: facts.equal(b * h + 1, 0, op="add", location="m.py:7")]:
        with pytest.raises(DimError, match=r"add: .* must be equal but never are .*m\.py:7"):
            record()
    with pytest.raises(DimError, match=r"pool: -b must be at least 0 but never is .*m\.py:8"):
        facts.at_least(-b, 0, op="pool", location="m.py:8")
    assert len(facts) == 0


def test_constraints_check_names_the_broken_fact():
    facts = Constraints()
    facts.equal(b, c, op="add", location="m.py:3")
    facts.at_least(h - 2, 1, op="conv2d", location="m.py:5")
    facts.check({"b": 4, "c": 4, "h": 3})
    with pytest.raises(FeedError, match=r"break b == c \(b=4, c=5\): 4 == 5 is false "
                                        r"\(recorded by add for the node made at m\.py:3\)"):
        facts.check({"b": 4, "c": 5, "h": 9})
    with pytest.raises(FeedError, match=r"break h - 2 >= 1 \(h=2\): 0 >= 1 is false "
                                        r"\(recorded by conv2d .* m\.py:5\)"):
        facts.check({"b": 1, "c": 1, "h": 2})
    with pytest.raises(FeedError, match=r"no fed shape binds c, needed by b == c"):
        facts.check({"b": 1, "h": 3})


# --- fed shapes against declared ones ---
def test_bind_shape_binds_names_and_checks_the_rest():
    bindings = bind_shape((b, 3, h * 2, h), (4, 3, 10, 5), {})
    assert bindings == {"b": 4, "h": 5}
    assert bind_shape([b, (h + 1) // 2], [4, 3], bindings) == {"b": 4, "h": 5}
    assert bind_shape((), (), {}) == {}


@pytest.mark.parametrize("declared, actual, why", [
    ((b, 3), (4, 3, 1), r"x: fed shape \(4, 3, 1\) has 3 dimensions, the declared \(b, 3\) has 2"),
    ((b, b), (4, 5), r"x: dimension 1 \(b\) of the fed shape \(4, 5\) is 5, but b is already "
                     r"bound to 4"),
    ((b, 3), (4, 2), r"x: dimension 1 of the fed shape \(4, 2\), declared 3: expected 3, got 2"),
    ((b, 2 * b + 1), (4, 8), r"dimension 1 of the fed shape \(4, 8\), declared 2\*b \+ 1, b=4: "
                             r"expected 9, got 8"),
    ((b, h), (0, 2), r"x: dimension 0 \(b\) of the fed shape \(0, 2\) is 0; a named dimension "
                     r"is at least 1"),
    ((2 * b,), (4,), r"b is bound by no bare dimension of the declared shapes, so 2\*b cannot "
                     r"be checked"),
])
def test_bind_shape_mismatch_is_a_feed_error(declared, actual, why):
    bindings = {"c": 1}
    with pytest.raises(FeedError, match=why):
        bind_shape(declared, actual, bindings, what="x")
    assert bindings == {"c": 1}  # unchanged by a failed match


def test_bind_shape_respects_earlier_bindings():
    with pytest.raises(FeedError, match=r"is 3, but b is already bound to 2"):
        bind_shape((b,), (3,), {"b": 2})


def test_bind_shape_takes_integer_sizes_and_dims():
    assert bind_shape((b,), (np.int64(3),), {}) == {"b": 3}
    with pytest.raises(FeedError, match=r"x: a fed size is an integer, got 2.5"):
        bind_shape((b,), (2.5,), {}, what="x")
    with pytest.raises(DimError, match=r"x: a declared dimension is an int or a Dim, got 'b'"):
        bind_shape(("b",), (2,), {}, what="x")


def test_docstring_examples_hold():
    assert doctest.testmod(dims, optionflags=doctest.ELLIPSIS).failed == 0


def test_fold_rebuilds_an_expression_in_the_tree_of_its_text():
    text_tree = {"+": lambda a, b: f"({a} + {b})", "-": lambda a, b: f"({a} - {b})",
                 "*": lambda a, b: f"({a}*{b})", "//": lambda a, b: f"({a}//{b})",
                 "neg": lambda a: f"(-{a})"}
    b, h = Dim("b"), Dim("h")
    assert fold(3 * b - 1, str, str, text_tree) == "((3*b) - 1)"
    assert fold((b + 1) // 2, str, str, text_tree) == "((b + 1)//2)"
    assert fold(1 - b // 2, str, str, text_tree) == "((-(b//2)) + 1)"
    assert fold(-2 * b * h, str, str, text_tree) == "(((-2)*b)*h)"
    ints = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
            "neg": operator.neg}
    for d in (3 * b - 1, (b + 1) // 2 - 1, 1 - b // 2, -2 * b * h + (h - 1) // 3):
        for values in ({"b": 1, "h": 1}, {"b": 7, "h": 5}, {"b": 64, "h": 224}):
            assert fold(d, values.get, int, ints) == evaluate(d, values)
