"""ONNX's classical machine-learning domain (``ai.onnx.ml``), the ops with a float meaning:
``Binarizer`` (1) as a comparison, ``TreeEnsemble`` (5) as a descent of every tree at once.

Design: a tree ensemble's structure is known at import, so its nodes and leaves become
constant tables over "states" (the K interior nodes, then the L leaves, each leaf its own next
state). One level of descent is a handful of ops over an (N, trees) matrix of states: gather
each state's feature, threshold and mode, compare, and pick the true or false next state; the
ensemble takes as many levels as its deepest tree. The graph's size grows with the depth, not
with the number of trees or nodes, as a runtime's loop over the trees would not.
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .. import functional as F
from ..ir.types import is_float
from .context import shape_of

# TreeEnsemble's nodes_modes: BRANCH_LEQ, LT, GTE, GT, EQ, NEQ, MEMBER
LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
COMPARE = {LEQ: F.less_equal, LT: F.less, GTE: F.greater_equal, GT: F.greater, EQ: F.equal,
           NEQ: F.not_equal}
# aggregate_function: AVERAGE, SUM, MIN, MAX; post_transform: NONE, SOFTMAX, LOGISTIC (the two
# others, SOFTMAX_ZERO and PROBIT, are refused by name)
AVERAGE, SUM, MIN_, MAX_ = range(4)
TRANSFORMS = {0: lambda y: y, 1: lambda y: F.softmax(y, axis=1), 2: F.sigmoid}
TRANSFORM_NAMES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _binarizer(cx, ins, at):
    """``1 if x > threshold else 0`` in x's dtype (NaN gives 0)."""
    x = cx.var(ins[0])
    threshold = float(at.get("threshold", 0.0))
    if not is_float(x.dtype):  # an integer exceeds t exactly when it exceeds floor(t)
        info = np.iinfo(x.dtype)
        threshold = min(max(np.floor(threshold), info.min - 1), info.max)
        if threshold < info.min:  # every integer exceeds it
            return [F.ones_like(x)]
    above = F.greater(x, cx.g.const(np.asarray(threshold, x.dtype)))
    return [F.astype(above, x.dtype)]


class _Trees:
    """The attributes of one TreeEnsemble, read and checked: per state (interior nodes, then
    leaves) its feature, threshold, mode, set members, NaN rule and true and false next
    states; each tree's first state; the levels of its deepest tree."""

    def __init__(self, cx, at: dict, features: int):
        self.cx = cx
        feature = self._ints(at, "nodes_featureids")
        self.k = k = len(feature)
        modes = self._array(at, "nodes_modes", np.uint8, k).astype(np.int64)
        splits = self._array(at, "nodes_splits", None, k)
        weights = self._array(at, "leaf_weights", None)
        self.leaves = leaves = len(weights)
        targets = self._ints(at, "leaf_targetids", leaves)
        self.n_targets = int(at.get("n_targets", 0))
        tracks = at.get("nodes_missing_value_tracks_true") or [0] * k
        self._check_lengths({"nodes_missing_value_tracks_true": tracks}, k)
        if bad := [m for m in modes if m > MEMBER]:
            cx.fail(f"nodes_modes has {bad[0]}; the modes are 0 to {MEMBER}")
        self._check_range("nodes_featureids", feature, features, "the input's features")
        self._check_range("leaf_targetids", targets, self.n_targets, "n_targets")
        true_next = self._next(at, "true", leaves)
        false_next = self._next(at, "false", leaves)
        own = np.arange(k, k + leaves)  # a leaf's next state is itself
        self.feature = np.concatenate([feature, np.zeros(leaves, np.int64)])
        self.modes = np.concatenate([modes, np.full(leaves, LEQ)])
        self.splits = np.concatenate([splits, np.zeros(leaves, splits.dtype)])
        self.tracks = np.concatenate([np.asarray(tracks, bool), np.zeros(leaves, bool)])
        self.true_next = np.concatenate([true_next, own])
        self.false_next = np.concatenate([false_next, own])
        self.members = self._members(at, modes)
        self.weights = np.concatenate([np.zeros(k, weights.dtype), weights])
        self.targets = np.concatenate([np.zeros(k, np.int64), targets])
        self.roots = self._roots(at)
        self.levels = self._levels()

    def _ints(self, at, name, length=None) -> np.ndarray:
        values = np.asarray(at.get(name, []), np.int64)
        if length is not None:
            self._check_lengths({name: values}, length)
        return values

    def _array(self, at, name, dtype, length=None) -> np.ndarray:
        if name not in at:
            self.cx.fail(f"it has no {name}")
        values = numpy_helper.to_array(at[name]).reshape(-1)
        if dtype is not None and values.dtype != dtype:
            self.cx.fail(f"{name} is {values.dtype}; ONNX defines it {np.dtype(dtype)}")
        if length is not None:
            self._check_lengths({name: values}, length)
        return values

    def _check_lengths(self, named: dict, length: int) -> None:
        for name, values in named.items():
            if len(values) != length:
                self.cx.fail(f"{name} has {len(values)} entries; the others of its kind have "
                             f"{length}")

    def _check_range(self, name: str, values, bound: int, what: str) -> None:
        if bad := [int(v) for v in values if not 0 <= v < bound]:
            self.cx.fail(f"{name} has {bad[0]}, outside [0, {bound}) ({what})")

    def _next(self, at, side: str, leaves: int) -> np.ndarray:
        """The state each node's ``side`` branch leads to: a node, or k + its leaf."""
        ids = self._ints(at, f"nodes_{side}nodeids", self.k)
        to_leaf = self._ints(at, f"nodes_{side}leafs", self.k).astype(bool)
        self._check_range(f"nodes_{side}nodeids (leaves)", ids[to_leaf], leaves, "the leaves")
        self._check_range(f"nodes_{side}nodeids (nodes)", ids[~to_leaf], self.k, "the nodes")
        return np.where(to_leaf, ids + self.k, ids)

    def _members(self, at, modes) -> np.ndarray | None:
        """(states, widest set) members of each BRANCH_MEMBER node's set, NaN-padded; the sets
        are listed in the order of those nodes, each ended by a NaN."""
        count = int(np.sum(modes == MEMBER))
        if not count:
            return None
        values = self._array(at, "membership_values", None)
        ends = np.flatnonzero(np.isnan(values))
        if len(ends) != count:
            self.cx.fail(f"membership_values holds {len(ends)} NaN-ended sets for {count} "
                         "BRANCH_MEMBER nodes")
        sets = np.split(values, ends + 1)[:count]
        table = np.full((self.k + self.leaves, max(len(s) for s in sets)), np.nan, values.dtype)
        for node, members in zip(np.flatnonzero(modes == MEMBER), sets):
            table[node, :len(members) - 1] = members[:-1]  # its NaN end left as padding
        return table

    def _roots(self, at) -> np.ndarray:
        roots = self._ints(at, "tree_roots")
        if not len(roots):
            self.cx.fail("tree_roots is empty")
        self._check_range("tree_roots", roots, self.k, "the nodes")
        # a root whose two branches are one leaf is that leaf (a tree of one leaf)
        leaf = (self.true_next[roots] == self.false_next[roots]) & (self.true_next[roots] >= self.k)
        return np.where(leaf, self.true_next[roots], roots)

    def _levels(self) -> int:
        """Interior nodes on the longest path from a root; a cycle is refused."""
        depth, level = 0, set(int(r) for r in self.roots if r < self.k)
        while level:
            depth += 1
            if depth > self.k:
                self.cx.fail("its nodes' branches form a cycle: a tree never reaches a leaf")
            level = {int(n) for s in level for n in (self.true_next[s], self.false_next[s])
                     if n < self.k}
        return depth


def _tree_ensemble(cx, ins, at):
    """Each row's trees descended level by level, their leaves' weights aggregated per target
    (sum, average, min, max), then the post transform."""
    x = cx.var(ins[0])
    if x.ndim != 2 or not isinstance(shape_of(x)[1], (int, np.integer)):
        cx.fail(f"input {list(x.shape)}: TreeEnsemble takes (N, features), features a number")
    trees = _Trees(cx, at, int(shape_of(x)[1]))
    aggregate, transform = int(at.get("aggregate_function", SUM)), int(at.get("post_transform", 0))
    if aggregate not in (AVERAGE, SUM, MIN_, MAX_):
        cx.fail(f"aggregate_function {aggregate}; ONNX defines 0 to 3")
    if transform not in TRANSFORMS:
        name = TRANSFORM_NAMES[transform] if transform < len(TRANSFORM_NAMES) else transform
        cx.fail(f"post_transform {name} is not supported (NONE, SOFTMAX and LOGISTIC are)")
    table = lambda values, state: F.take(cx.g.const(values), state, axis=0)  # noqa: E731
    state = F.broadcast_to(cx.g.const(trees.roots.astype(np.int32)), (x.shape[0], len(trees.roots)))
    for _ in range(trees.levels):
        state = _descend(cx, x, trees, state, table)
    return [TRANSFORMS[transform](_aggregate(cx, x, trees, state, aggregate, table))]


def _descend(cx, x, trees: _Trees, state, table):
    """The next state of every (row, tree): the node's comparison picks its branch."""
    value = F.gather(x, 1, table(trees.feature, state))
    split = table(trees.splits.astype(x.dtype), state)
    mode = table(trees.modes.astype(np.int32), state)
    used = sorted(set(trees.modes[:trees.k].tolist()))
    taken = _member(cx, x, trees, value, state, table) if MEMBER in used else None
    for m in (m for m in reversed(used) if m != MEMBER):
        result = COMPARE[m](value, split)
        taken = result if taken is None else F.where(F.equal(mode, m), result, taken)
    if trees.tracks.any():
        taken = F.logical_or(taken, F.logical_and(table(trees.tracks, state), F.isnan(value)))
    return F.where(taken, table(trees.true_next.astype(np.int32), state),
                   table(trees.false_next.astype(np.int32), state))


def _member(cx, x, trees: _Trees, value, state, table):
    """Whether each value is one of its node's set (the padding NaNs equal nothing)."""
    members = table(trees.members.astype(x.dtype), state)
    hits = F.astype(F.equal(F.expand_dims(value, -1), members), np.int32)
    return F.greater(F.max(hits, axis=-1), cx.g.const(np.asarray(0, np.int32)))


def _aggregate(cx, x, trees: _Trees, state, aggregate: int, table):
    """(N, n_targets): the leaves' weights per target; a target no leaf names gets the
    aggregate's start (0, or the dtype's largest or smallest for min and max)."""
    weights = trees.weights / len(trees.roots) if aggregate == AVERAGE else trees.weights
    start = {MIN_: np.finfo(x.dtype).max, MAX_: np.finfo(x.dtype).min}.get(aggregate, 0)
    ours = F.equal(F.expand_dims(table(trees.targets.astype(np.int32), state), -1),
                   cx.g.const(np.arange(trees.n_targets, dtype=np.int32)))
    each = F.where(ours, F.expand_dims(table(weights.astype(x.dtype), state), -1),
                   cx.g.const(np.asarray(start, x.dtype)))
    reduce = {MIN_: F.min, MAX_: F.max}.get(aggregate, F.sum)
    return reduce(each, axis=1)


# ONNX op -> converter (ops of the ai.onnx.ml domain: converters.DOMAIN_OPS)
CONVERTERS = {"Binarizer": _binarizer, "TreeEnsemble": _tree_ensemble}
