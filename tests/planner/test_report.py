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
from mgegraph.planner.report import human
from mgegraph.testing import random_graph


def train_plan():
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(64, 10))
    x, y = np.ones((8, 1, 4, 4), np.float32), np.zeros(8, np.int64)
    return mg.compile_train_step(model, F.cross_entropy, optim.Adam(model.parameters(), 0.1),
                                 example_batch=(x, y), optimize=0).plan


def tiny_plan():
    g = mg.Graph()
    x = g.input("x", (16,), "float32")
    a = F.exp(x)
    return mg.compile([F.sum(F.relu(a) * a)], optimize=0)


PLANS = {"train": train_plan, "tiny": tiny_plan,
         **{f"random{s}": (lambda s=s: mg.compile(random_graph(s)[1])) for s in range(8)}}


@pytest.mark.parametrize("make", PLANS.values(), ids=PLANS.keys())
def test_the_recomputed_peak_is_the_lower_bound(make):
    plan = make()
    summary = memory_summary(plan)
    assert summary["peak"]["bytes"] == plan.lower_bound_bytes
    live = {b["slot"]: b for b in summary["buffers"]}
    assert sum(live[s]["aligned_bytes"] for s in summary["peak"]["live"]) == plan.lower_bound_bytes


@pytest.mark.parametrize("make", PLANS.values(), ids=PLANS.keys())
def test_json_numbers_are_the_plans(make):
    plan = make()
    data = json.loads(memory_report(plan, format="json"))
    for key in ("arena_bytes", "lower_bound_bytes", "naive_bytes", "persistent_bytes"):
        assert data[key] == getattr(plan, key)
    assert data["inplace_saved_bytes"] + data["reuse_saved_bytes"] + data["arena_bytes"] \
        == data["naive_bytes"]
    assert sum(data["persistent_by_role"].values()) == plan.persistent_bytes
    sizes = [b["bytes"] for b in data["buffers"]]
    assert sizes == sorted(sizes, reverse=True)
    assert {b["slot"] for b in data["buffers"]} == set(plan.memory.spans)


def test_buffers_name_their_producers():
    plan = train_plan()
    data = memory_summary(plan)
    by_slot = {b["slot"]: b for b in data["buffers"]}
    for ins in plan.instructions:
        for s in ins.outputs:
            if s in by_slot:
                assert by_slot[s]["op"] == ins.op
        if ins.workspace is not None:
            assert by_slot[ins.workspace]["op"] == f"workspace of {ins.op}"


def test_text_report_of_a_tiny_plan():
    assert tiny_plan().memory_report() == """\
memory plan: arena 128 B, 1.000x the lower bound 128 B (greedy_by_size, 64-byte aligned)
  naive total             192 B  every temporary in bytes of its own
  saved in place           64 B  outputs written over a dying input
  saved by reuse            0 B  buffers sharing bytes at different steps
  persistent               68 B  outside the arena: inputs 64 B, outputs 4 B
  schedule: your order (the memory-aware order is the same)
largest buffers (of 3):
    slot made by                      type                       bytes     offset         steps  in place of
      s1 exp                          f32[16]                     64 B        0x0        [0, 3)
      s2 relu                         f32[16]                     64 B       0x40        [1, 3)
      s3 mul                          f32[16]                     64 B       0x40        [2, 4)  s2
peak at step 1 (relu): 128 B live in 2 buffers
      s1 exp                          f32[16]                     64 B        0x0        [0, 3)
      s2 relu                         f32[16]                     64 B       0x40        [1, 3)"""


def test_text_report_shows_the_schedule_and_a_long_peak_list():
    text = train_plan().memory_report(top=2)
    assert f"arena {human(train_plan().arena_bytes)}" in text
    assert "schedule:" in text and "more" in text


def test_bad_formats_are_refused(tmp_path):
    plan = tiny_plan()
    with pytest.raises(ValueError, match="'xml' is not one of"):
        plan.memory_report(format="xml")
    with pytest.raises(ValueError, match=".svg or .png"):
        save_memory_picture(plan, tmp_path / "memory.pdf")


def test_svg_has_a_rectangle_per_buffer(tmp_path):
    plan = train_plan()
    path = tmp_path / "memory.svg"
    save_memory_picture(plan, path, title="train step")
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    rects = [r for r in root.iter(f"{ns}rect") if r.get("class") == "buffer"]
    assert len(rects) == sum(1 for s in plan.memory.spans if plan.slots[s].nbytes)
    width, height = float(root.get("width")), float(root.get("height"))
    for r in rects:
        x, y = float(r.get("x")), float(r.get("y"))
        assert 0 <= x <= x + float(r.get("width")) <= width + 0.5
        assert 0 <= y <= y + float(r.get("height")) <= height + 0.5
    assert root.find(f"{ns}line[@class='peak']") is not None
    assert "train step" in memory_svg(plan, "train step")


def test_png_needs_matplotlib(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="needs matplotlib"):
        save_memory_picture(tiny_plan(), tmp_path / "memory.png")


def test_png_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "memory.png"
    save_memory_picture(train_plan(), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
