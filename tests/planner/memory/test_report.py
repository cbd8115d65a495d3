"""Memory reports: the numbers agree with the plan, the peak recomputed from the buffers equals
the planner's lower bound, the JSON parses, the SVG has one rectangle per buffer."""
import json
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.planner import memory_report, memory_summary, memory_svg, save_memory_picture
from mgegraph.planner.memory.report import COLOURS, human
from mgegraph.testing import random_graph

SVG = "{http://www.w3.org/2000/svg}"


def mlp_plan():
    rng = np.random.default_rng(0)
    g = mg.Graph()
    h = g.input("x", (32, 20), "float32")
    for k, (i, o) in enumerate([(20, 64), (64, 64), (64, 10)]):
        w = g.param(f"w{k}", rng.standard_normal((i, o)).astype(np.float32))
        h = F.matmul(h, w) + g.param(f"b{k}", np.zeros(o, np.float32))
        h = F.relu(h) if k < 2 else F.softmax(h)
    return mg.compile([h])


def train_plan():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(64, 10))
    x, y = np.ones((8, 1, 4, 4), np.float32), np.zeros(8, np.int64)
    return mg.compile_train_step(model, F.cross_entropy, optim.Adam(model.parameters(), 0.1),
                                 example_batch=(x, y), optimize=0).plan


def tiny_plan(**memory):
    g = mg.Graph()
    x = g.input("x", (16,), "float32")
    w = g.param("w", np.ones(16, np.float32))
    a = F.exp(x * w)
    return mg.compile([F.sum(F.relu(a) * a)], optimize=0, **memory)


PLANS = {"mlp": mlp_plan, "train": train_plan, "tiny": tiny_plan,
         "no_reuse": lambda: tiny_plan(memory="no_reuse"),
         **{f"random{s}": (lambda s=s: mg.compile(random_graph(s)[1])) for s in range(8)}}


@pytest.mark.parametrize("make", PLANS.values(), ids=PLANS.keys())
def test_the_recomputed_peak_is_the_lower_bound(make):
    plan = make()
    summary = memory_summary(plan)
    assert summary["peak"]["bytes"] == plan.lower_bound_bytes
    assert plan.memory.lower_bounds[plan.memory.schedule] == plan.lower_bound_bytes
    live = {b["slot"]: b for b in summary["buffers"]}
    # a buffer handed bytes in place at the peak step is not listed there: it adds none
    assert sum(live[s]["aligned_bytes"] for s in summary["peak"]["live"]) \
        == plan.lower_bound_bytes
    sizes = [live[s]["bytes"] for s in summary["peak"]["live"]]
    assert sizes == sorted(sizes, reverse=True)


@pytest.mark.parametrize("make", PLANS.values(), ids=PLANS.keys())
def test_json_numbers_are_the_plans(make):
    plan = make()
    data = json.loads(memory_report(plan, format="json"))
    m = plan.memory
    for key in ("arena_bytes", "lower_bound_bytes", "naive_bytes", "persistent_bytes",
                "inplace_saved_bytes", "reuse_saved_bytes", "strategy", "schedule"):
        assert data[key] == getattr(m, key), key
    assert data["lower_bound_by_schedule"] == m.lower_bounds
    assert data["inplace_saved_bytes"] + data["reuse_saved_bytes"] + data["arena_bytes"] \
        == data["naive_bytes"]
    assert sum(data["persistent_by_role"].values()) == plan.persistent_bytes
    sizes = [b["bytes"] for b in data["buffers"]]
    assert sizes == sorted(sizes, reverse=True)
    assert {b["slot"] for b in data["buffers"]} == set(m.spans)
    for b in data["buffers"]:
        assert (b["offset"], (b["begin"], b["end"])) == (m.offsets[b["slot"]], m.spans[b["slot"]])
        assert b["type"] == str(plan.slots[b["slot"]].type)
        assert b["in_place_of"] == m.overwrites.get(b["slot"], (None,))[0]


@pytest.mark.parametrize("make", [mlp_plan, train_plan], ids=["mlp", "train"])
def test_text_has_the_plans_numbers(make):
    plan = make()
    text = plan.memory_report()
    m = plan.memory
    assert text.startswith(f"memory plan: arena {human(m.arena_bytes)}, "
                           f"{m.arena_bytes / m.lower_bound_bytes:.3f}x the lower bound "
                           f"{human(m.lower_bound_bytes)} ({m.strategy}, 64-byte aligned")
    for label, value in [("naive total", m.naive_bytes), ("saved in place", m.inplace_saved_bytes),
                         ("saved by reuse", m.reuse_saved_bytes),
                         ("persistent", m.persistent_bytes)]:
        line = next(s for s in text.splitlines() if s.strip().startswith(label))
        assert human(value) in line
    assert f"params {human(sum(s.nbytes for s in plan.slots if s.role == 'param'))}" in text


def test_buffers_name_their_producers():
    plan = train_plan()
    by_slot = {b["slot"]: b for b in memory_summary(plan)["buffers"]}
    workspaces = 0
    for ins in plan.instructions:
        for s in ins.outputs:
            if s in by_slot:
                assert by_slot[s]["op"] == ins.op
        if ins.workspace is not None:
            assert by_slot[ins.workspace]["op"] == f"workspace of {ins.op}"
            workspaces += 1
    assert workspaces > 0


def test_text_report_of_a_tiny_plan():
    assert tiny_plan().memory_report() == """\
memory plan: arena 128 B, 1.000x the lower bound 128 B (greedy_by_size, 64-byte aligned, 5 steps)
  naive total             256 B  every temporary in bytes of its own
  saved in place          128 B  outputs written over a dying input
  saved by reuse            0 B  buffers sharing bytes at different steps
  persistent              132 B  outside the arena: inputs 64 B, params 64 B, outputs 4 B
  schedule: your order (the memory-aware order is the same)
largest buffers (of 4):
    slot made by type          bytes     offset         steps  in place of
      s2 mul     f32[16]        64 B        0x0        [0, 2)
      s3 exp     f32[16]        64 B        0x0        [1, 4)  s2
      s4 relu    f32[16]        64 B       0x40        [2, 4)
      s5 mul     f32[16]        64 B       0x40        [3, 5)  s4
peak at step 2 (relu): 128 B live in 2 buffers
      s3 exp     f32[16]        64 B        0x0        [1, 4)  s2
      s4 relu    f32[16]        64 B       0x40        [2, 4)"""


def test_top_cuts_both_lists():
    lines = tiny_plan().memory_report(top=1).splitlines()
    assert lines[-1] == "  ... and 1 more"
    assert sum(line.startswith("      s") for line in lines) == 2


def test_schedule_line_says_what_was_tried():
    assert "memory-aware order was not tried" in tiny_plan(memory="no_reuse").memory_report()
    text = train_plan().memory_report()
    bounds = train_plan().memory.lower_bounds
    assert f"memory-aware order (lower bound {human(bounds['memory'])}; your order's " \
           f"{human(bounds['user'])})" in text


def test_a_plan_without_temporaries():
    g = mg.Graph()
    plan = mg.compile([F.relu(g.input("x", (4,), "float32"))], optimize=0)
    assert plan.memory_report().endswith("no arena buffers: every value is an input, "
                                         "parameter, constant, output or view")
    root = ET.fromstring(memory_svg(plan))
    assert not [r for r in root.iter(f"{SVG}rect") if r.get("class") == "buffer"]


def test_bad_arguments_are_refused(tmp_path):
    plan = tiny_plan()
    with pytest.raises(ValueError, match="'xml' is not one of"):
        plan.memory_report(format="xml")
    with pytest.raises(ValueError, match="top must be"):
        plan.memory_report(top=-1)
    with pytest.raises(ValueError, match=".svg or .png"):
        save_memory_picture(plan, tmp_path / "memory.pdf")


@pytest.mark.parametrize("make", [mlp_plan, train_plan], ids=["mlp", "train"])
def test_svg_has_a_rectangle_per_buffer(tmp_path, make):
    plan = make()
    path = tmp_path / "memory.svg"
    save_memory_picture(plan, path, title="a <plan>")
    root = ET.parse(path).getroot()
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "buffer"]
    assert len(rects) == sum(1 for s in plan.memory.spans if plan.slots[s].nbytes)
    width, height = float(root.get("width")), float(root.get("height"))
    (frame,) = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "frame"]
    fx, fy = float(frame.get("x")), float(frame.get("y"))
    for r in rects:
        x, y, w, h = (float(r.get(k)) for k in ("x", "y", "width", "height"))
        assert fx - 0.1 <= x <= x + w <= width and fy - 0.1 <= y <= y + h <= height
        assert r.find(f"{SVG}title").text.startswith("s")
    for kind in ("peak", "arena", "bound"):
        assert root.find(f"{SVG}line[@class='{kind}']") is not None
    assert any(t.text == "a <plan>" for t in root.iter(f"{SVG}text"))


def test_svg_tooltips_and_colours_follow_the_buffers():
    plan = train_plan()
    summary = memory_summary(plan)
    root = ET.fromstring(memory_svg(plan))
    rects = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "buffer"]
    for b, r in zip([b for b in summary["buffers"] if b["aligned_bytes"]], rects):
        tip = r.find(f"{SVG}title").text
        assert tip.startswith(f"s{b['slot']} {b['op']} {b['type']} {human(b['bytes'])}")
        assert f"steps [{b['begin']}, {b['end']})" in tip
        assert r.get("fill") == COLOURS[b["category"]]
    legend = {r.get("fill") for r in root.iter(f"{SVG}rect") if r.get("class") == "legend"}
    assert legend == {r.get("fill") for r in rects}


def test_png_needs_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="needs matplotlib"):
        save_memory_picture(tiny_plan(), tmp_path / "memory.png")


def test_png_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "memory.png"
    save_memory_picture(train_plan(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
