"""ONNX's attention family imported (convert_attention.py: Attention 23-25, FlexAttention;
convert_recurrent.py: LinearAttention, CausalConvWithState; convert_scan.py: Scan unrolled),
and models below opset 13 converted up: every float32 node case of these ops passes, hand-built
models agree with ONNX Runtime feature by feature, and what the importer cannot take is one
OnnxImportError naming the node and the reason."""
import numpy as np
import pytest

# onnx.helper, not onnx: without onnx installed, tests/onnx itself imports as an empty
# namespace package named "onnx"
pytest.importorskip("onnx.helper")
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import model, value_info
from onnx_node_cases import float32_cases, half_cases, run_case

import mgegraph.onnx as mo

RNG = np.random.default_rng(0)
# op -> its float32 node cases (the expanded LinearAttention cases run its Scan body)
OPS = {"Attention": 65, "FlexAttention": 9, "LinearAttention": 13, "CausalConvWithState": 11,
       "Scan": 4, "Shrink": 2, "Upsample": 1, "OptionalGetElement": 1}
# the cases below opset 13 among other ops' (they import once converted up)
OLD = {"test_dropout_default_old", "test_dropout_random_old"}


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _ort(onnx_model, feeds):
    ort = pytest.importorskip("onnxruntime")
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(onnx_model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _node_cases():
    cases = float32_cases()
    found = [c for op in OPS for c in cases.get(op, [])]
    found += [c for op, group in cases.items() for c in group
              if op.startswith("test_linear_attention_") or c.name in OLD]
    return [pytest.param(c, id=c.name) for c in found]


def test_the_node_cases_are_all_there():
    cases = float32_cases()
    assert {op: len(cases.get(op, [])) for op in OPS} == OPS


@pytest.mark.filterwarnings("ignore::mgegraph.onnx.OnnxImportWarning")
@pytest.mark.parametrize("case", _node_cases())
def test_every_float32_node_case_passes(case):
    run_case(case)  # strict: every input fed at run time


# half cases whose masks (bool, causal, windows, padding) are float32 selects: the bias and the
# zeroed rows are made in Q's dtype, so the output keeps it
HALF = ["test_attention_4d_gqa_with_past_and_present_fp16",
        "test_attention_24_qk_matmul_output_mode3_softmax_precision",
        "test_attention_local_window_ext_cache_float16_mask",
        "test_attention_4d_gqa_causal_nonpad_decode_fp16"]


@pytest.mark.parametrize("name", HALF)
def test_half_attention_with_masks_keeps_its_dtype(name):
    (case,) = [c for c in half_cases()["Attention"] if c.name == name]
    run_case(case, strict=False)  # nonpad_kv_seqlen bound: it decides the masks


def test_range_expanded_into_a_loop_passes_with_its_bounds_bound():
    (case,) = float32_cases()["test_range_float_type_positive_delta (expanded)"]
    assert set(run_case(case, strict=False)) == {"start", "limit", "delta"}


# -- Attention against ONNX Runtime, one feature at a time ---------------------------------------
def _attention(inputs: dict, outputs=1, opset=23, **attrs):
    """A model of one Attention node over ``inputs`` (name -> array; None skips an optional
    input), with ``outputs`` of its four outputs."""
    order = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    names = [n if inputs.get(n) is not None else "" for n in order]
    while names and not names[-1]:
        names.pop()
    outs = ["Y", "present_key", "present_value", "qk"][:outputs]
    node = helper.make_node("Attention", names, outs, **attrs)
    vis = [value_info(n, list(a.shape), helper.np_dtype_to_tensor_dtype(a.dtype))
           for n, a in inputs.items() if a is not None]
    m = model([node], vis, [value_info(o, None) for o in outs], opset=opset)
    return m, {n: a for n, a in inputs.items() if a is not None}


def _same_as_ort(m, feeds, rtol=1e-5, atol=1e-5):
    got = mo.import_model(m).run(feeds)
    want = _ort(m, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


def test_attention_3d_grouped_query_heads_and_v_head_size():
    q, k, v = rand(2, 5, 4 * 6), rand(2, 7, 2 * 6), rand(2, 7, 2 * 3)
    m, feeds = _attention({"Q": q, "K": k, "V": v}, q_num_heads=4, kv_num_heads=2)
    (y,) = _same_as_ort(m, feeds)
    assert y.shape == (2, 5, 4 * 3)


def _mask(shape, dtype):
    if dtype is not np.bool_:
        return rand(*shape)
    mask = RNG.random(shape) > 0.3
    mask[..., 0] = True  # no row masked whole: ONNX Runtime gives NaN for those
    return mask


@pytest.mark.parametrize("mask_shape", [(5, 7), (1, 3, 5, 7), (3, 5, 7)])
@pytest.mark.parametrize("dtype", [np.bool_, np.float32])
def test_attention_masks_bool_and_float(mask_shape, dtype):
    q, k, v = rand(2, 3, 5, 4), rand(2, 3, 7, 4), rand(2, 3, 7, 4)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "attn_mask": _mask(mask_shape, dtype)})
    _same_as_ort(m, feeds)


@pytest.mark.parametrize("dtype", [np.bool_, np.float32])
def test_attention_a_mask_shorter_than_the_keys_is_padded_with_minus_inf(dtype):
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    q, k, v = rand(2, 3, 5, 4), rand(2, 3, 7, 4), rand(2, 3, 7, 4)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "attn_mask": _mask((3, 5, 4), dtype)})
    (got,) = mo.import_model(m).run(feeds)
    (want,) = ReferenceEvaluator(m).run(None, feeds)  # ONNX Runtime wants the whole length
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    k2 = k.copy()
    k2[..., 4:, :] = 100  # past the mask: never read
    np.testing.assert_array_equal(got, mo.import_model(m).run({**feeds, "K": k2})[0])


def test_attention_causal_with_past_is_offset_by_the_past_and_returns_the_cache():
    q, k, v = rand(1, 2, 3, 4), rand(1, 2, 3, 4), rand(1, 2, 3, 5)
    pk, pv = rand(1, 2, 4, 4), rand(1, 2, 4, 5)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "past_key": pk, "past_value": pv},
                          outputs=3, is_causal=1)
    _, present_k, present_v = _same_as_ort(m, feeds)
    np.testing.assert_array_equal(present_k, np.concatenate([pk, k], axis=2))
    np.testing.assert_array_equal(present_v, np.concatenate([pv, v], axis=2))


@pytest.mark.parametrize("mode", [0, 1, 2, 3])
def test_attention_qk_matmul_output_modes_with_softcap_and_scale(mode):
    q, k, v = rand(2, 2, 4, 8) * 3, rand(2, 2, 6, 8) * 3, rand(2, 2, 6, 8)
    mask = rand(4, 6)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "attn_mask": mask}, outputs=4,
                          softcap=2.5, scale=0.3, qk_matmul_output_mode=mode)
    _same_as_ort(m, feeds)


def test_attention_nonpad_kv_seqlen_masks_each_batchs_padding():
    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)
    lens = np.array([4, 6], np.int64)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "nonpad_kv_seqlen": lens}, opset=24)
    _same_as_ort(m, feeds)
    # the padded keys are not read: changing them changes nothing
    k2 = k.copy()
    k2[0, :, 4:] = 100
    (y1,) = mo.import_model(m).run(feeds)
    (y2,) = mo.import_model(m).run({**feeds, "K": k2})
    np.testing.assert_array_equal(y1, y2)


@pytest.mark.parametrize("known", [False, True])
@pytest.mark.parametrize("window", [{}, {"left_window_size": 1}])
def test_attention_nonpad_kv_seqlen_with_causal_is_aligned_bottom_right(known, window):
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    q, k, v = rand(2, 2, 3, 4), rand(2, 2, 6, 4), rand(2, 2, 6, 4)
    lens = np.array([4, 6], np.int64)
    m, feeds = _attention({"Q": q, "K": k, "V": v, "nonpad_kv_seqlen": lens},
                          opset=25 if window else 24, is_causal=1, **window)
    want = ReferenceEvaluator(m).run(None, feeds)  # ORT 1.32 aligns it top-left (the errata)
    if known:  # the lengths an initializer: the whole bias folds at import
        m.graph.initializer.append(numpy_helper.from_array(lens, "nonpad_kv_seqlen"))
        del m.graph.input[3]
        del feeds["nonpad_kv_seqlen"]
    (got,) = mo.import_model(m).run(feeds)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-6)


def test_attention_a_fully_masked_row_gives_zeros_not_nan():
    q, k, v = rand(1, 1, 3, 4), rand(1, 1, 5, 4), rand(1, 1, 5, 4)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    m, feeds = _attention({"Q": q, "K": k, "V": v, "attn_mask": mask}, outputs=4,
                          qk_matmul_output_mode=3)
    y, _, _, probs = mo.import_model(m).run(feeds)
    assert np.isfinite(y).all() and not y[0, 0, 1].any() and not probs[0, 0, 1].any()
    np.testing.assert_allclose(probs[0, 0, [0, 2]].sum(-1), 1, rtol=1e-6)


@pytest.mark.parametrize(("left", "right"), [(2, -1), (1, 1), (-1, 0)])
def test_attention_sliding_window_of_opset_25(left, right):
    from onnx.reference import ReferenceEvaluator  # lazy: loads onnx's whole evaluator

    q, k, v = rand(1, 2, 5, 4), rand(1, 2, 5, 4), rand(1, 2, 5, 4)
    m, feeds = _attention({"Q": q, "K": k, "V": v}, opset=25, left_window_size=left,
                          right_window_size=right)
    (got,) = mo.import_model(m).run(feeds)
    (want,) = ReferenceEvaluator(m).run(None, feeds)  # ONNX Runtime 1.32 has no opset 25
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("inputs", "attrs", "reason"), [
    ({"Q": (2, 5, 8), "K": (2, 5, 8), "V": (2, 5, 8)}, {},
     "q_num_heads"),  # ONNX's inference says so before the converter
    ({"Q": (2, 3, 5, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4)}, {},
     "3 query heads are not a multiple of 2 key/value heads"),
    ({"Q": (2, 2, 5, 4), "K": (2, 2, 5, 3), "V": (2, 2, 5, 4)}, {},
     r"Q \[2, 2, 5, 4\], K \[2, 2, 5, 3\] and V \[2, 2, 5, 4\] \(as heads\) do not agree"),
    ({"Q": (2, 2, 5, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4), "attn_mask": (5, 9)}, {},
     r"attn_mask \[5, 9\]: its last axis must be at most the total key length 5"),
    ({"Q": (2, 2, 5, 4), "K": (2, 2, 5, 4), "V": (2, 2, 5, 4)}, {"qk_matmul_output_mode": 4},
     "qk_matmul_output_mode 4 is not one of"),
])
def test_attention_bad_input_is_an_import_error_naming_the_node(inputs, attrs, reason):
    m, _ = _attention({n: rand(*s) for n, s in inputs.items()}, **attrs)
    m.graph.node[0].name = "attn0"
    with pytest.raises(mo.OnnxImportError, match=f"Attention node 'attn0': .*{reason}"):
        mo.import_graph(m)


def _named(m, axis: int, name: str):
    for vi in m.graph.input:
        vi.type.tensor_type.shape.dim[axis].dim_param = name
    return m


def test_attention_over_named_lengths_runs_unmasked_and_refuses_masks_by_name():
    q, k = rand(3, 4, 8), rand(3, 4, 4)
    feeds = {"Q": q, "K": k, "V": k}
    for attrs, axis in (({}, 1), ({"is_causal": 1}, 0)):  # named lengths; a named batch
        m, _ = _attention(feeds, q_num_heads=2, kv_num_heads=1, **attrs)
        m = _named(m, axis, "S" if axis else "B")
        np.testing.assert_allclose(mo.import_model(m).run(feeds)[0], _ort(m, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
    m = _named(_attention(feeds, q_num_heads=2, kv_num_heads=1, is_causal=1)[0], 1, "S")
    with pytest.raises(mo.OnnxImportError, match=r"Attention node .*query length S and key "
                                                 r"length S: the masks are built at import"):
        mo.import_graph(m)


def test_linear_attention_bad_update_rule_names_the_node():
    q = rand(1, 3, 8)
    node = helper.make_node("LinearAttention", ["q", "q", "q"], ["y", "s"], name="la",
                            q_num_heads=2, kv_num_heads=2, update_rule="quadratic")
    m = model([node], [value_info("q", [1, 3, 8])], [value_info("y", None),
                                                     value_info("s", None)], opset=27)
    with pytest.raises(mo.OnnxImportError, match="LinearAttention node 'la': .*update_rule must be one of"):
        mo.import_model(m).run({"q": q})


# -- LinearAttention and CausalConvWithState against ONNX Runtime -------------------------------
@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
def test_linear_attention_rules_with_grouped_heads_and_past_state(rule):
    b, t, hq, hkv, dk, dv = 2, 5, 4, 2, 3, 4
    feeds = {"q": rand(b, t, hq * dk), "k": rand(b, t, hkv * dk), "v": rand(b, t, hkv * dv),
             "s": rand(b, hkv, dk, dv)}
    names = ["q", "k", "v", "s"]
    if "gated" in rule:
        feeds["g"], names = -np.abs(rand(b, t, hkv * dk)), names + ["g"]
    if "delta" in rule:
        feeds["beta"] = 1 / (1 + np.exp(-rand(b, t, hkv)))
        names = names + ([""] if "gated" not in rule else []) + ["beta"]
    node = helper.make_node("LinearAttention", names, ["y", "state"], q_num_heads=hq,
                            kv_num_heads=hkv, update_rule=rule, scale=0.7)
    m = model([node], [value_info(n, list(a.shape)) for n, a in feeds.items()],
              [value_info("y", None), value_info("state", None)], opset=27)
    _same_as_ort(m, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("k", "past", "activation"), [(4, True, "silu"), (3, False, "none"),
                                                       (1, False, "swish")])
def test_causal_conv_with_state(k, past, activation):
    feeds = {"x": rand(2, 3, 6), "w": rand(3, 1, k), "b": rand(3)}
    names = ["x", "w", "b"]
    if past:
        feeds["s"], names = rand(2, 3, k - 1), names + ["s"]
    node = helper.make_node("CausalConvWithState", names, ["y", "state"],
                            activation=activation)
    m = model([node], [value_info(n, list(a.shape)) for n, a in feeds.items()],
              [value_info("y", None), value_info("state", None)], opset=27)
    _same_as_ort(m, feeds)


# -- Scan ---------------------------------------------------------------------------------------
def _scan_model(steps=4, directions=(0, 1), out_direction=1, out_axis=1):
    """A running sum over axis 1 of x (forward) and of x reversed, plus a weight read from the
    enclosing graph; the per-step sums stacked on ``out_axis``."""
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "a"], ["acc1"]),
         helper.make_node("Mul", ["b", "w"], ["bw"]),
         helper.make_node("Add", ["acc1", "bw"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["seen"])],
        "body", [value_info("acc", [2]), value_info("a", [2]), value_info("b", [2])],
        [value_info("acc_out", [2]), value_info("seen", [2])])
    node = helper.make_node("Scan", ["init", "x", "x"], ["final", "all"], body=body,
                            num_scan_inputs=2, scan_input_axes=[1, 1],
                            scan_input_directions=list(directions),
                            scan_output_directions=[out_direction], scan_output_axes=[out_axis])
    w = numpy_helper.from_array(np.asarray([2.0, -1.0], np.float32), "w")
    return model([node], [value_info("init", [2]), value_info("x", [2, steps])],
                 [value_info("final", None), value_info("all", None)], [w], opset=17)


@pytest.mark.parametrize("out_axis", [0, 1, -1])
def test_scan_directions_axes_and_outer_scope_against_onnx_runtime(out_axis):
    m = _scan_model(out_axis=out_axis)
    _same_as_ort(m, {"init": rand(2), "x": rand(2, 4)})


def test_scan_unrolled_past_the_node_limit_is_refused():
    limits = mo.ImportLimits(max_nodes=10)
    with pytest.raises(mo.OnnxImportError, match=r"Scan node .*4 steps of a 4-node body unroll "
                                                 r"over the limit of 10 nodes"):
        mo.import_graph(_scan_model(), limits=limits)


def test_a_scan_body_op_without_converter_is_reported():
    m = _scan_model()
    m.graph.node[0].attribute[0].g.node[1].op_type = "NoSuchOp"
    with pytest.raises(mo.OnnxImportError, match="unsupported ONNX ops .*NoSuchOp"):
        mo.import_graph(m)


def test_scan_of_known_inputs_reading_the_enclosing_graph_is_converted_not_folded():
    # every input an initializer: folding would run the body without the enclosing "w"
    m = _scan_model(directions=(0, 0), out_direction=0)
    init, x = rand(2), rand(2, 4)
    m.graph.initializer.extend([numpy_helper.from_array(init, "init"),
                                numpy_helper.from_array(x, "x")])
    del m.graph.input[:]
    final, seen = mo.import_model(m).run({})
    w = np.array([2.0, -1.0], np.float32)
    want = init + np.cumsum(x + x * w[:, None], axis=1).T
    np.testing.assert_allclose(seen, want.T, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(final, want[-1], rtol=1e-5, atol=1e-6)


def test_a_scan_body_leaving_an_output_undefined_is_refused():
    m = _scan_model()
    m.graph.node[0].attribute[0].g.output[1].name = "nowhere"
    with pytest.raises(mo.OnnxImportError, match="Scan node .*output|nowhere"):
        mo.import_graph(m)


def test_loop_unrolled_until_its_known_condition_fails_against_onnx_runtime():
    # runs while i < 2 (3 steps of the 5 allowed), adding the enclosing graph's x each step
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "two"], ["go"]),
         helper.make_node("Add", ["acc", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["seen"])],
        "body", [value_info("i", [], TensorProto.INT64), value_info("cond", [], TensorProto.BOOL),
                 value_info("acc", [3])],
        [value_info("go", [], TensorProto.BOOL), value_info("acc_out", [3]),
         value_info("seen", [3])],
        [numpy_helper.from_array(np.asarray(2, np.int64), "two")])
    node = helper.make_node("Loop", ["m", "", "init"], ["final", "all"], body=body)
    m = model([node], [value_info("init", [3]), value_info("x", [3])],
              [value_info("final", None), value_info("all", None)],
              [numpy_helper.from_array(np.asarray(5, np.int64), "m")])
    _, seen = _same_as_ort(m, {"init": rand(3), "x": rand(3)})
    assert seen.shape == (3, 3)


def test_linear_attention_over_a_named_length_is_refused_by_name():
    node = helper.make_node("LinearAttention", ["q", "q", "q"], ["y", "s"], name="la",
                            q_num_heads=2, kv_num_heads=2, update_rule="linear")
    m = model([node], [value_info("q", [1, "T", 8])],
              [value_info("y", None), value_info("s", None)], opset=27)
    with pytest.raises(mo.OnnxImportError, match="LinearAttention node 'la': sequence length T"):
        mo.import_graph(m)
