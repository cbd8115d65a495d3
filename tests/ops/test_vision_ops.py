"""The vision ops (grid_sample, remap and the warps over it, roi_align, roi_pooling, nms) on the
CPU kernels against NumPy references written from their definitions here, and grid_sample
against PyTorch; bad input gives errors naming the op, shapes and dtypes."""
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import runtime
from mgegraph._kernels import parallel
from mgegraph.ir.errors import KernelError, OpError
from mgegraph.jit import trace

RNG = np.random.default_rng(0)
FLOATS = (np.float32, np.float64)


def run(fn, *arrays):
    """fn on graph inputs, compiled and run: the CPU plan's result."""
    g = mg.Graph()
    xs = [g.input(f"x{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]
    return mg.compile([fn(*xs)]).run({f"x{i}": a for i, a in enumerate(arrays)})[0]


def tol(dtype):
    return {"rtol": 1e-5, "atol": 2e-5} if dtype == np.float32 else {"rtol": 1e-12, "atol": 1e-12}


# -- NumPy references ---------------------------------------------------------------------------
def border_index(i, n, mode):
    """OpenCV's border modes: where tap i of an axis of n pixels reads; None for the constant."""
    if 0 <= i < n:
        return i
    if mode == "constant":
        return None
    if mode == "replicate" or n == 1:
        return min(max(i, 0), n - 1)
    if mode == "wrap":
        return i % n
    if mode == "reflect":
        i %= 2 * n
        return 2 * n - 1 - i if i >= n else i
    i %= 2 * n - 2
    return 2 * n - 2 - i if i >= n else i


def remap_ref(x, xy, border, value=0.0, nearest=False):
    n, c, h, w = x.shape
    out = np.zeros((n, c, *xy.shape[1:3]))
    for b, r, q in np.ndindex(n, *xy.shape[1:3]):
        px, py = (float(v) for v in xy[b, r, q])
        if nearest:
            taps = [(np.rint(py), np.rint(px), 1.0)]
        else:
            x0, y0 = np.floor(px), np.floor(py)
            fx, fy = px - x0, py - y0
            taps = [(y0 + i, x0 + j, (fy if i else 1 - fy) * (fx if j else 1 - fx))
                    for i in (0, 1) for j in (0, 1)]
        for ty, tx, wt in taps:
            ry, rx = border_index(int(ty), h, border), border_index(int(tx), w, border)
            out[b, :, r, q] += wt * (value if ry is None or rx is None else x[b, :, ry, rx])
    return out


def bilinear_zero(plane, y, x):
    """MegEngine's roi_align interpolation: taps outside the image read 0."""
    h0, w0 = int(np.floor(y)), int(np.floor(x))
    def at(r, q):
        return plane[r, q] if 0 <= r < plane.shape[0] and 0 <= q < plane.shape[1] else 0.0
    fy, fx = y - h0, x - w0
    top = at(h0, w0) + (at(h0, w0 + 1) - at(h0, w0)) * fx
    bottom = at(h0 + 1, w0) + (at(h0 + 1, w0 + 1) - at(h0 + 1, w0)) * fx
    return top + (bottom - top) * fy


def roi_align_ref(x, rois, out, mode, scale, samples, aligned):
    """MegEngine's roi_align; samples (0, 0): ceil(bin size) per axis (0: the bin gives 0)."""
    (oh, ow), off = out, 0.5 if aligned else 0.0
    y = np.zeros((len(rois), x.shape[1], oh, ow))
    for k, (b, x0, y0, x1, y1) in enumerate(rois):
        x0, y0, x1, y1 = (v * scale - off for v in (x0, y0, x1, y1))
        bh, bw = max(y1 - y0, 0) / oh, max(x1 - x0, 0) / ow
        sh, sw = samples if samples != (0, 0) else (int(np.ceil(bh)), int(np.ceil(bw)))
        if sh * sw == 0:
            continue
        for c, ph, pw in np.ndindex(x.shape[1], oh, ow):
            vals = [bilinear_zero(x[int(b), c], y0 + bh * (ph + (i + 0.5) / sh),
                                  x0 + bw * (pw + (j + 0.5) / sw))
                    for i in range(sh) for j in range(sw)]
            y[k, c, ph, pw] = max(vals) if mode == "max" else np.mean(vals)
    return y


def c_round(v):
    """C's round(): halves away from zero."""
    return int(np.sign(v) * np.floor(abs(v) + 0.5))


def roi_pooling_ref(x, rois, out, mode, scale):
    oh, ow = out
    h, w = x.shape[2:]
    y = np.zeros((len(rois), x.shape[1], oh, ow))
    for k, (b, *corners) in enumerate(rois):
        x0, y0, x1, y1 = (c_round(v * scale) for v in corners)
        bh, bw = max(y1 - y0 + 1, 1) / oh, max(x1 - x0 + 1, 1) / ow
        for ph, pw in np.ndindex(oh, ow):
            r0, r1 = (min(max(int(f(v)) + y0, 0), h) for f, v in
                      ((np.floor, ph * bh), (np.ceil, (ph + 1) * bh)))
            q0, q1 = (min(max(int(f(v)) + x0, 0), w) for f, v in
                      ((np.floor, pw * bw), (np.ceil, (pw + 1) * bw)))
            if r1 > r0 and q1 > q0:
                win = x[int(b), :, r0:r1, q0:q1]
                y[k, :, ph, pw] = win.max((1, 2)) if mode == "max" else win.mean((1, 2))
    return y


def nms_ref(boxes, scores, thresh, limit):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties by index
    keep = []
    for i in order:
        if len(keep) == limit:
            break
        if not any(overlaps_ref(boxes[i], boxes[j], thresh) for j in keep):
            keep.append(i)
    return np.array(keep, np.int32)


def overlaps_ref(a, b, thresh):
    """MegEngine's test of IoU(a, b) > thresh: intersection > union * thresh."""
    w = max(min(a[2], b[2]) - max(a[0], b[0]), 0)
    h = max(min(a[3], b[3]) - max(a[1], b[1]), 0)
    return w * h > ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h) * thresh


def random_rois(k, n, size, rng=RNG):
    corners = np.sort(rng.uniform(-2, size + 2, (k, 2, 2)), axis=1)  # (x0, x1), (y0, y1)
    return np.column_stack([rng.integers(0, n, k), corners[:, 0, 0], corners[:, 0, 1],
                            corners[:, 1, 0], corners[:, 1, 1]])


# -- grid_sample ------------------------------------------------------------------------------
GRID_CASES = [(m, p, a) for m in ("bilinear", "nearest", "bicubic")
              for p in ("zeros", "border", "reflection") for a in (False, True)]


@pytest.mark.parametrize("mode, padding, aligned", GRID_CASES)
@pytest.mark.parametrize("dtype", FLOATS)
def test_grid_sample_matches_pytorch(mode, padding, aligned, dtype):
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((2, 3, 5, 7)).astype(dtype)
    grid = RNG.uniform(-1.4, 1.4, (2, 4, 6, 2)).astype(dtype)
    got = run(lambda a, b: F.vision.grid_sample(a, b, mode, padding, aligned), x, grid)
    want = torch.nn.functional.grid_sample(torch.tensor(x), torch.tensor(grid), mode=mode,
                                           padding_mode=padding, align_corners=aligned)
    np.testing.assert_allclose(got, want.numpy(), **tol(dtype))


def test_grid_sample_bilinear_matches_numpy():
    x = RNG.standard_normal((1, 2, 4, 5))
    grid = RNG.uniform(-1.2, 1.2, (1, 3, 3, 2))
    # align_corners: pixel = (g + 1) / 2 * (size - 1); zeros padding is a constant 0 border
    pixels = (grid + 1) / 2 * (np.array([5, 4]) - 1)
    got = run(lambda a, b: F.vision.grid_sample(a, b, align_corners=True), x, grid)
    np.testing.assert_allclose(got, remap_ref(x, pixels, "constant"), rtol=1e-12, atol=1e-12)


def test_grid_sample_of_a_point_that_is_not_finite_reads_the_padding():
    x = np.ones((1, 1, 3, 3), np.float32)
    grid = np.array([[[[np.nan, 0.0], [np.inf, 0.0], [0.0, 0.0]]]], np.float32)
    got = run(lambda a, b: F.vision.grid_sample(a, b), x, grid)
    np.testing.assert_array_equal(got, [[[[0.0, 0.0, 1.0]]]])
    border = run(lambda a, b: F.vision.grid_sample(a, b, "bicubic", "border"), x, grid)
    assert np.isnan(border[0, 0, 0, :2]).all()  # no value to read: NaN, never a guess


# -- remap and the warps --------------------------------------------------------------------
@pytest.mark.parametrize("border", ["replicate", "reflect", "reflect_101", "wrap", "constant"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_remap_matches_numpy(border, dtype):
    x = RNG.standard_normal((2, 3, 5, 4)).astype(dtype)
    xy = RNG.uniform(-6, 9, (2, 3, 7, 2)).astype(dtype)
    got = run(lambda a, b: F.vision.remap(a, b, border, scalar=0.5), x, xy)
    np.testing.assert_allclose(got, remap_ref(x, xy, border, 0.5), **tol(dtype))
    got = run(lambda a, b: F.vision.remap(a, b, border, 0.5, "nearest"), x, xy)
    np.testing.assert_allclose(got, remap_ref(x, xy, border, 0.5, nearest=True), **tol(dtype))


def test_remap_megengine_example():
    inp = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    xy = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [0.0, 1.0]]],
                  np.float32).reshape(1, 2, 2, 2)
    np.testing.assert_array_equal(run(F.vision.remap, inp, xy), [[[[1.0, 4.0], [4.0, 4.0]]]])


def perspective_points(mat, oh, ow):
    rows, cols = np.mgrid[0:oh, 0:ow]
    pts = np.stack([cols, rows, np.ones_like(cols)], -1).reshape(-1, 3) @ mat.transpose(0, 2, 1)
    return (pts[..., :2] / pts[..., 2:]).reshape(len(mat), oh, ow, 2)


def test_warp_perspective_matches_numpy():
    x = RNG.standard_normal((2, 3, 6, 5))
    mat = np.eye(3) + RNG.uniform(-0.1, 0.1, (2, 3, 3))
    mat[:, :2, 2] = [[0.5, -1.0], [1.5, 0.25]]
    want = remap_ref(x, perspective_points(mat, 4, 7), "replicate")
    np.testing.assert_allclose(run(lambda a, m: F.vision.warp_perspective(a, m, (4, 7)), x, mat),
                               want, rtol=1e-12, atol=1e-12)
    nhwc = run(lambda a, m: F.vision.warp_perspective(a, m, (4, 7), format="NHWC"),
               x.transpose(0, 2, 3, 1), mat)
    np.testing.assert_allclose(nhwc, want.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)


def test_warp_perspective_mat_idx_picks_the_images():
    x = RNG.standard_normal((2, 1, 5, 5))
    mat = np.tile(np.eye(3), (3, 1, 1))
    mat[:, 0, 2] = [0.5, 1.0, -0.5]
    got = run(lambda a, m: F.vision.warp_perspective(a, m, 5, mat_idx=[1, 0, 1],
                                                     border_mode="constant", border_val=2.0),
              x, mat)
    want = remap_ref(x[[1, 0, 1]], perspective_points(mat, 5, 5), "constant", 2.0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_warp_affine_is_warp_perspective_with_a_last_row():
    x = RNG.standard_normal((2, 6, 5, 3))  # NHWC, MegEngine's default for warp_affine
    mat = np.array([[[0.9, 0.1, 0.5], [-0.2, 1.1, 1.0]]] * 2)
    full = np.concatenate([mat, np.tile([[[0.0, 0.0, 1.0]]], (2, 1, 1))], axis=1)
    want = remap_ref(x.transpose(0, 3, 1, 2), perspective_points(full, 4, 4), "reflect_101")
    got = run(lambda a, m: F.vision.warp_affine(a, m, 4, border_mode="reflect_101"), x, mat)
    np.testing.assert_allclose(got, want.transpose(0, 2, 3, 1), rtol=1e-12, atol=1e-12)


# -- roi_align and roi_pooling --------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["average", "max"])
@pytest.mark.parametrize("aligned", [True, False])
@pytest.mark.parametrize("dtype", FLOATS)
def test_roi_align_matches_numpy(mode, aligned, dtype):
    x = RNG.standard_normal((2, 3, 9, 11)).astype(dtype)
    rois = random_rois(5, 2, 20).astype(dtype)
    got = run(lambda a, r: F.vision.roi_align(a, r, (3, 2), mode, 0.5, (2, 3), aligned), x, rois)
    want = roi_align_ref(x.astype(np.float64), rois.astype(np.float64), (3, 2), mode, 0.5,
                         (2, 3), aligned)
    np.testing.assert_allclose(got, want, **tol(dtype))


@pytest.mark.parametrize("mode", ["average", "max"])
def test_roi_align_adaptive_sampling_matches_numpy(mode):
    x = RNG.standard_normal((2, 3, 9, 11))
    rois = random_rois(6, 2, 20)
    rois[0, 3] = rois[0, 1]  # an empty box: no samples, 0
    got = run(lambda a, r: F.vision.roi_align(a, r, (3, 2), mode, 0.5, 0), x, rois)
    want = roi_align_ref(x, rois, (3, 2), mode, 0.5, (0, 0), True)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert (got[0] == 0).all()


@pytest.mark.parametrize("mode", ["max", "average"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_roi_pooling_matches_numpy(mode, dtype):
    x = RNG.standard_normal((2, 3, 8, 10)).astype(dtype)
    rois = random_rois(6, 2, 16).astype(dtype)
    rois[0, 1:] = [30.0, 30.0, 40.0, 40.0]  # wholly outside: empty bins give 0
    got = run(lambda a, r: F.vision.roi_pooling(a, r, (3, 4), mode, 0.5), x, rois)
    want = roi_pooling_ref(x.astype(np.float64), rois.astype(np.float64), (3, 4), mode, 0.5)
    np.testing.assert_allclose(got, want, **tol(dtype))


def test_roi_batch_index_out_of_range_fails_the_run():
    x = np.zeros((2, 1, 4, 4), np.float32)
    for index in (2.0, -1.0, np.nan):
        rois = np.array([[index, 0, 0, 2, 2]], np.float32)
        with pytest.raises(KernelError, match="roi_align.*index is out of range"):
            run(lambda a, r: F.vision.roi_align(a, r, 2), x, rois)
    rois = np.array([[0, np.nan, 0, 2, 2]], np.float32)
    with pytest.raises(KernelError, match="roi_pooling.*value is invalid"):
        run(lambda a, r: F.vision.roi_pooling(a, r, 2), x, rois)


# -- nms ---------------------------------------------------------------------------------------
def random_boxes(n, rng=RNG):
    xy = rng.uniform(0, 20, (n, 2))
    return np.column_stack([xy, xy + rng.uniform(1, 10, (n, 2))])


@pytest.mark.parametrize("n, thresh, limit", [(1, 0.5, 1), (17, 0.3, 17), (40, 0.5, 5),
                                              (64, 0.7, 64), (33, 0.0, 33)])
@pytest.mark.parametrize("dtype", FLOATS)
def test_nms_matches_numpy(n, thresh, limit, dtype):
    boxes, scores = random_boxes(n).astype(dtype), RNG.uniform(size=n).astype(dtype)
    scores[n // 2:n // 2 + 2] = scores[0]  # ties keep index order
    want = nms_ref(boxes.astype(np.float64), scores, thresh, limit)
    got = run(lambda b, s: F.vision.nms(b, s, thresh, limit), boxes, scores)
    assert got.dtype == np.int32 and got.shape == (limit,)
    np.testing.assert_array_equal(got[:len(want)], want)
    assert (got[len(want):] == -1).all()  # the fixed length's unused entries


def test_nms_eager_gives_exactly_the_kept_indices():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30], [0, 0, 9, 10]],
                     np.float32)
    scores = np.array([0.9, 0.8, 0.3, 0.95], np.float32)
    keep = F.vision.nms(mg.tensor(boxes), mg.tensor(scores), iou_thresh=0.5)
    np.testing.assert_array_equal(keep.numpy(), [3, 2])
    assert keep.numpy().dtype == np.int32


def test_nms_in_a_trace_keeps_the_fixed_length():
    """A trace replays its plan: a length read from one call's values would be wrong in the
    next, so a traced nms gives max_output entries, -1 padded, in every call."""
    @trace
    def keep(b, s):
        return F.vision.nms(b, s, 0.5)

    scores = mg.tensor(np.array([0.9, 0.8, 0.7], np.float32))
    first = np.array([[0, 0, 10, 10], [1, 1, 10, 10], [20, 20, 30, 30]], np.float32)
    second = np.array([[0, 0, 10, 10], [50, 50, 60, 60], [20, 20, 30, 30]], np.float32)
    np.testing.assert_array_equal(keep(mg.tensor(first), scores).numpy(), [0, 2, -1])
    np.testing.assert_array_equal(keep(mg.tensor(second), scores).numpy(), [0, 1, 2])


def test_nms_refuses_nan_scores():
    boxes, scores = random_boxes(3).astype(np.float32), np.array([0.1, np.nan, 0.3], np.float32)
    with pytest.raises(KernelError, match="nms.*value is invalid"):
        run(lambda b, s: F.vision.nms(b, s, 0.5, 3), boxes, scores)


# -- a detection head's post-processing ---------------------------------------------------------
def test_detection_head_post_processing():
    """Features of candidate boxes (roi_align) scored, then the kept boxes (nms): both steps
    in one plan, against the NumPy references."""
    rng = np.random.default_rng(42)
    feat = rng.standard_normal((1, 4, 16, 16)).astype(np.float32)
    boxes = random_boxes(12, rng).astype(np.float32) * 2  # image pixels, stride 2
    rois = np.column_stack([np.zeros(12), boxes]).astype(np.float32)
    w = rng.standard_normal((4 * 2 * 2,)).astype(np.float32)

    def head(f, r, b, weight):
        pooled = F.vision.roi_align(f, r, (2, 2), spatial_scale=0.5)
        scores = F.sigmoid(F.matmul(F.reshape(pooled, (12, 16)), weight))
        return F.vision.nms(b, scores, iou_thresh=0.4, max_output=6)

    got = run(head, feat, rois, boxes, w)
    pooled = roi_align_ref(feat.astype(np.float64), rois, (2, 2), "average", 0.5, (2, 2), True)
    scores = 1 / (1 + np.exp(-(pooled.reshape(12, 16) @ w)))
    want = nms_ref(boxes.astype(np.float64), scores, 0.4, 6)
    np.testing.assert_array_equal(got[:len(want)], want)
    assert len(want) >= 2 and (got[len(want):] == -1).all()


# -- bad input --------------------------------------------------------------------------------
@pytest.mark.parametrize("make, message", [
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 4, 4), "float32"),
                                    g.input("grid", (1, 3, 3, 3), "float32")),
     r"grid_sample.*grid must be \(N, OH, OW, 2\), got shape \(1, 3, 3, 3\)"),
    (lambda g: F.vision.grid_sample(g.input("x", (2, 2, 4, 4), "float32"),
                                    g.input("grid", (1, 3, 3, 2), "float32")),
     r"grid_sample.*grid has batch 1, the input 2"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 4, 4), "float32"),
                                    g.input("grid", (1, 3, 3, 2), "float32"), mode="area"),
     r"grid_sample.*mode must be one of"),
    (lambda g: F.vision.grid_sample(g.input("x", (1, 2, 4, 4), "int32"),
                                    g.input("grid", (1, 3, 3, 2), "int32")),
     r"grid_sample.*int32 is not supported"),
    (lambda g: F.vision.roi_align(g.input("x", (1, 2, 4, 4), "float32"),
                                  g.input("r", (3, 4), "float32"), 2),
     r"roi_align.*rois must be \(K, 5\).*got shape \(3, 4\)"),
    (lambda g: F.vision.roi_align(g.input("x", (1, 2, 4, 4), "float32"),
                                  g.input("r", (3, 5), "float32"), 2, sample_points=(2, 0)),
     r"roi_align.*sample_points must be \(0, 0\).*or a pair of ints >= 1, got \(2, 0\)"),
    (lambda g: F.vision.roi_pooling(g.input("x", (1, 2, 4, 4), "float32"),
                                    g.input("r", (3, 5), "float32"), 2, mode="median"),
     r"roi_pooling.*mode must be one of"),
    (lambda g: F.vision.nms(g.input("b", (5, 4), "float32"), g.input("s", (4,), "float32"),
                            0.5),
     r"nms.*scores must be \(5,\), one per box, got \(4,\)"),
    (lambda g: F.vision.remap(g.input("x", (1, 2, 0, 4), "float32"),
                              g.input("m", (1, 3, 3, 2), "float32"), border_mode="wrap"),
     r"remap.*empty image \(0, 4\): there is no pixel to sample"),
    (lambda g: F.vision.remap(g.input("x", (1, 2, 4, 4), "float32"),
                              g.input("m", (1, 3, 3, 2), "float32"), border_mode="isolated"),
     r"remap.*border_mode must be one of"),
])
def test_bad_input_names_the_op_and_types(make, message):
    with pytest.raises(OpError, match=message) as caught:
        make(mg.Graph())
    assert "test_vision_ops.py" in str(caught.value)  # the user's line


def test_warp_affine_refuses_a_matrix_of_the_wrong_shape():
    g = mg.Graph()
    with pytest.raises(ValueError, match=r"mat must be \(N, 2, 3\), got shape \(1, 3, 3\)"):
        F.vision.warp_affine(g.input("x", (1, 4, 4, 1), "float32"),
                             g.input("m", (1, 3, 3), "float32"), 4)


# -- the model file ---------------------------------------------------------------------------
def test_every_vision_op_round_trips_through_the_model_file(tmp_path):
    """A plan with each op and each backward op (a gradient step) saved and loaded gives the
    same bits."""
    g = mg.Graph()
    x, grid = g.input("x", (2, 3, 6, 6), "float32"), g.input("grid", (2, 4, 4, 2), "float32")
    rois, boxes = g.input("rois", (3, 5), "float32"), g.input("boxes", (5, 4), "float32")
    sampled = F.vision.grid_sample(x, grid, "bicubic", "reflection") \
        + F.vision.remap(x, grid * 3 + 2, "wrap")
    pooled = F.vision.roi_align(sampled, rois, 2, "max") + F.vision.roi_pooling(x, rois, 2)
    loss = F.sum(pooled * pooled)
    keep = F.vision.nms(boxes, F.sum(boxes, axis=1), 0.5, max_output=4)
    plan = mg.compile([loss, keep, *mg.grad(loss, [x, grid])])
    mg.save(plan, tmp_path / "vision.mgm")
    feeds = {"x": RNG.standard_normal((2, 3, 6, 6)).astype(np.float32),
             "grid": RNG.uniform(-1, 1, (2, 4, 4, 2)).astype(np.float32),
             "rois": np.column_stack([[0, 1, 1], random_rois(3, 2, 6)[:, 1:]]).astype(np.float32),
             "boxes": random_boxes(5).astype(np.float32)}
    ops = {ins.op for ins in plan.instructions}
    assert {"grid_sample_backward_grid", "remap_backward_data", "roi_align_backward",
            "roi_pooling_backward", "nms"} <= ops
    for got, want in zip(runtime.load(tmp_path / "vision.mgm").run(feeds), plan.run(feeds)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()


# -- MegEngine's documented examples --------------------------------------------------------
def test_megengine_docstring_examples():
    """The outputs MegEngine's F.vision docstrings print, from the same legacy-seeded data:
    nms's box test (intersection > union * thresh), roi_align's and roi_pooling's boxes whose
    batch index is a fraction (truncated, as MegEngine reads it)."""
    legacy = np.random.RandomState(42)
    boxes = np.zeros((100, 4))
    boxes[:, :2] = legacy.rand(100, 2) * 20
    boxes[:, 2:] = legacy.rand(100, 2) * 20 + 100
    scores = legacy.rand(100)
    keep = F.vision.nms(mg.tensor(boxes), mg.tensor(scores), iou_thresh=0.7)
    np.testing.assert_array_equal(keep.numpy(), [75, 69])
    for fn, want in ((F.vision.roi_align, [[0.175, 0.175], [0.1359, 0.1359]]),
                     (F.vision.roi_pooling, [[-0.1383, -0.1383], [-0.5035, -0.5035]])):
        legacy = np.random.RandomState(42)
        inp, rois = legacy.randn(1, 1, 128, 128), legacy.random_sample((4, 5))
        got = fn(mg.tensor(inp.astype(np.float32)), mg.tensor(rois.astype(np.float32)), (2, 2))
        np.testing.assert_allclose(got.numpy()[0], [want], atol=5e-5)  # printed to 4 places
    # warp_perspective's: a translation, dst(h, w) = src(h + 1, w + 1)
    x = mg.tensor(np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4))
    shift = mg.tensor(np.array([[[1.0, 0.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]]], np.float32))
    np.testing.assert_array_equal(F.vision.warp_perspective(x, shift, (2, 2)).numpy(),
                                  [[[[5.0, 6.0], [9.0, 10.0]]]])


# -- threads and read-only inputs --------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOATS)
def test_one_two_and_three_threads_give_the_same_bits(dtype, monkeypatch):
    """Every vision kernel (forwards, data and point gradients) planned on 1, 2 and 3 threads,
    fed read-only arrays: the same bits, and the inputs untouched."""
    feeds = {"x": RNG.standard_normal((2, 3, 7, 6)).astype(dtype),
             "grid": RNG.uniform(-1.2, 1.2, (2, 5, 4, 2)).astype(dtype),
             "rois": random_rois(5, 2, 9).astype(dtype)}
    for a in feeds.values():
        a.flags.writeable = False
    kept = {k: a.copy() for k, a in feeds.items()}
    outs = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(parallel, "threads_for", lambda work, grain=0, t=threads: t)
        g = mg.Graph()
        x, grid, rois = (g.input(k, a.shape, a.dtype) for k, a in feeds.items())
        sampled = F.vision.grid_sample(x, grid, "bicubic", "reflection") \
            + F.vision.remap(x, grid * 3 + 2, "reflect")
        loss = F.sum(F.vision.roi_align(sampled, rois, 2, "max") ** 2) \
            + F.sum(F.vision.roi_pooling(x, rois, 3, "average") ** 2)
        plan = mg.compile([loss, *mg.grad(loss, [x, grid, rois])], optimize=0)
        monkeypatch.undo()
        with threadpool_limits(limits=threads):
            outs.append([a.tobytes() for a in plan.run(feeds)])
    assert outs[0] == outs[1] == outs[2]
    for k, a in feeds.items():
        assert a.tobytes() == kept[k].tobytes()
