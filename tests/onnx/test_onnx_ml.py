"""ONNX's ai.onnx.ml ops imported (convert_ml.py): Binarizer and TreeEnsemble against ONNX's
reference evaluator and ONNX Runtime on random inputs and random forests (every comparison
mode, set membership, NaN rules, one-leaf trees, the four aggregates, the post transforms),
and what the importer refuses, by name."""
import numpy as np
import pytest

pytest.importorskip("onnx.helper")
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import run_onnxruntime, value_info
from onnx_node_cases import float32_cases, run_case

import mgegraph.onnx as mo

ML = helper.make_opsetid("ai.onnx.ml", 5)


def ml_model(node, inputs, outputs, default_opset=None):
    graph = helper.make_graph([node], "g", inputs, outputs)
    imports = [ML] + ([helper.make_opsetid("", default_opset)] if default_opset else [])
    return helper.make_model(graph, opset_imports=imports)


def run(model, feeds):
    return mo.import_model(model).run(feeds)


@pytest.mark.parametrize("name", ["test_ai_onnx_ml_binarizer",
                                  "test_ai_onnx_ml_tree_ensemble_set_membership"])
def test_the_node_cases_pass(name):
    cases = {c.name: c for group in float32_cases().values() for c in group}
    run_case(cases[name])


@pytest.mark.parametrize("dtype, threshold", [
    (np.float32, 0.25), (np.float64, -1.0), (np.int64, 1.5), (np.int32, -1.5),
    (np.int32, -3e10), (np.int64, 2.0)])
def test_binarizer_matches_the_reference(dtype, threshold):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 7)) * 3).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[0, :3] = [np.nan, np.inf, -np.inf]
    code = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    node = helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=threshold)
    model = ml_model(node, [value_info("x", [3, 7], code)], [value_info("y", [3, 7], code)])
    (got,) = run(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == dtype and np.array_equal(got, want)
    np.testing.assert_array_equal(got, np.where(x > threshold, 1, 0).astype(dtype))


def random_forest(rng, features: int, trees: int, targets: int, depth: int, tracks: bool):
    """The TreeEnsemble attributes of ``trees`` random trees (every mode, set membership,
    leaves shared by two branches, a one-leaf tree first)."""
    nodes = {k: [] for k in ("feature", "mode", "split", "true", "false", "true_leaf",
                             "false_leaf", "tracks")}
    leaves, members, roots = {"weight": [], "target": []}, [], []

    def leaf():
        leaves["weight"].append(float(rng.integers(-20, 20)) / 4)
        leaves["target"].append(int(rng.integers(targets)))
        return len(leaves["weight"]) - 1

    def grow(level):
        at = len(nodes["feature"])
        mode = int(rng.integers(7))
        for k in nodes:
            nodes[k].append(0)
        nodes["feature"][at], nodes["mode"][at] = int(rng.integers(features)), mode
        nodes["split"][at] = float(rng.integers(-8, 8)) / 4
        nodes["tracks"][at] = int(tracks and rng.integers(2))
        if mode == 6:  # no 0.0: the reference evaluator ends a set at a falsy member
            chosen = set(rng.choice([-2, -1.25, -0.5, 0.25, 1, 1.75], rng.integers(1, 4)))
            members.extend(sorted(chosen) + [np.nan])
        for side in ("true", "false"):
            if level == depth or rng.random() < 0.3:
                nodes[side][at], nodes[f"{side}_leaf"][at] = leaf(), 1
            else:
                nodes[side][at], nodes[f"{side}_leaf"][at] = grow(level + 1), 0
        return at

    for t in range(trees):
        if t == 0:  # a tree of one leaf: a node whose two branches are that leaf
            roots.append(len(nodes["feature"]))
            only = leaf()
            for k, v in dict(feature=0, mode=0, split=0.0, true=only, false=only, true_leaf=1,
                             false_leaf=1, tracks=0).items():
                nodes[k].append(v)
        else:
            roots.append(grow(1))
    attrs = dict(
        nodes_featureids=nodes["feature"], nodes_truenodeids=nodes["true"],
        nodes_falsenodeids=nodes["false"], nodes_trueleafs=nodes["true_leaf"],
        nodes_falseleafs=nodes["false_leaf"], leaf_targetids=leaves["target"],
        tree_roots=roots, n_targets=targets,
        nodes_modes=numpy_helper.from_array(np.asarray(nodes["mode"], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.asarray(nodes["split"], np.float32)),
        leaf_weights=numpy_helper.from_array(np.asarray(leaves["weight"], np.float32)))
    if tracks:
        attrs["nodes_missing_value_tracks_true"] = nodes["tracks"]
    if members:
        attrs["membership_values"] = numpy_helper.from_array(np.asarray(members, np.float32))
    return attrs


def forest_model(attrs, rows: int, features: int, targets: int, **extra):
    node = helper.make_node("TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", **attrs, **extra)
    return ml_model(node, [value_info("x", [rows, features])],
                    [value_info("y", [rows, targets])])


def forest_input(rng, rows: int, features: int):
    """Values on the splits' grid (so ties hit every mode's boundary), and NaNs."""
    x = (rng.integers(-9, 9, (rows, features)) / 4).astype(np.float32)
    x[rng.random((rows, features)) < 0.1] = np.nan
    return x


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_ensemble_matches_the_reference(seed, aggregate):
    rng = np.random.default_rng(seed)
    rows, features, targets = 40, 3, 3
    attrs = random_forest(rng, features, trees=5, targets=targets, depth=4, tracks=seed > 0)
    model = forest_model(attrs, rows, features, targets, aggregate_function=aggregate)
    x = forest_input(rng, rows, features)
    (got,) = run(model, {"x": x})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    assert got.dtype == np.float32 and got.shape == (rows, targets)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_tree_ensemble_matches_onnxruntime():
    rng = np.random.default_rng(7)
    rows, features, targets = 30, 4, 3
    attrs = random_forest(rng, features, trees=4, targets=targets, depth=3, tracks=True)
    model = forest_model(attrs, rows, features, targets)
    x = forest_input(rng, rows, features)
    np.testing.assert_allclose(run(model, {"x": x})[0], run_onnxruntime(model, {"x": x})[0],
                               rtol=1e-6, atol=1e-6)


# ONNX's codes; ONNX Runtime 1.23 reads 1 as LOGISTIC and 2 as SOFTMAX in TreeEnsemble (its
# older ops' order) and skips LOGISTIC for one target, so the transforms are checked on NumPy
POST_TRANSFORMS = {1: lambda y: np.exp(y - y.max(1, keepdims=True)) /
                   np.exp(y - y.max(1, keepdims=True)).sum(1, keepdims=True),
                   2: lambda y: 1 / (1 + np.exp(-y))}


@pytest.mark.parametrize("transform", sorted(POST_TRANSFORMS))
def test_tree_ensemble_post_transforms(transform):
    rng = np.random.default_rng(8)
    rows, features, targets = 30, 4, 3
    attrs = random_forest(rng, features, trees=4, targets=targets, depth=3, tracks=True)
    x = forest_input(rng, rows, features)
    (raw,) = run(forest_model(attrs, rows, features, targets), {"x": x})
    (got,) = run(forest_model(attrs, rows, features, targets, post_transform=transform),
                 {"x": x})
    want = POST_TRANSFORMS[transform](raw.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def _one_node_forest(**change):
    attrs = dict(nodes_featureids=[0], nodes_truenodeids=[0], nodes_falsenodeids=[1],
                 nodes_trueleafs=[1], nodes_falseleafs=[1], leaf_targetids=[0, 0],
                 tree_roots=[0], n_targets=1,
                 nodes_modes=numpy_helper.from_array(np.asarray([0], np.uint8)),
                 nodes_splits=numpy_helper.from_array(np.asarray([0.5], np.float32)),
                 leaf_weights=numpy_helper.from_array(np.asarray([1, 2], np.float32)))
    return {**attrs, **change}


@pytest.mark.parametrize("change, message", [
    (dict(post_transform=4), "post_transform PROBIT is not supported"),
    (dict(nodes_featureids=[3]), "nodes_featureids has 3, outside [0, 2)"),
    (dict(leaf_targetids=[0, 1]), "leaf_targetids has 1, outside [0, 1)"),
    (dict(nodes_trueleafs=[0]), "a cycle"),
    (dict(nodes_falsenodeids=[2]), "nodes_falsenodeids (leaves) has 2, outside [0, 2)"),
    (dict(nodes_modes=numpy_helper.from_array(np.asarray([6], np.uint8))),
     "membership_values"),
])
def test_tree_ensemble_refusals_name_the_reason(change, message):
    model = forest_model(_one_node_forest(**change), 2, 2, 1)
    with pytest.raises(mo.OnnxImportError, match="TreeEnsemble") as info:
        mo.import_graph(model)
    assert message in str(info.value)


def test_one_node_forest_and_its_folding():
    model = forest_model(_one_node_forest(), 3, 2, 1)
    x = np.asarray([[0.0, 9], [1, 9], [np.nan, 9]], np.float32)
    np.testing.assert_array_equal(run(model, {"x": x})[0], [[1], [2], [2]])
    (folded,) = mo.import_model(model, constants={"x": x}).run({})  # known input: evaluated
    np.testing.assert_array_equal(folded, [[1], [2], [2]])


def test_default_ops_without_the_default_opset_are_refused():
    node = helper.make_node("Relu", ["x"], ["y"])
    model = ml_model(node, [value_info("x", [2])], [value_info("y", [2])])
    with pytest.raises(mo.OnnxImportError, match=r"no version of the default ONNX opset.*Relu"):
        mo.import_graph(model)


def test_tree_ensemble_over_a_named_batch():
    rng = np.random.default_rng(3)
    attrs = random_forest(rng, 3, trees=3, targets=2, depth=3, tracks=True)
    model = forest_model(attrs, "n", 3, 2)
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "n"
    plan = mo.import_model(model)  # one plan, any batch
    for rows in (5, 9):
        x = forest_input(rng, rows, 3)
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
        np.testing.assert_allclose(plan.run({"x": x})[0], want, rtol=1e-6, atol=1e-6)
