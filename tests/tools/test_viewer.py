"""mg.viz: the HTML page of a plan or graph (self-contained, every instruction, hostile names
kept as text, remat clones and profile times shown), to_svg, and the page as a person sees it in
headless Chromium (skipped where Chromium is missing)."""
import base64
import json
import os
import re
import select
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from models import _conv_bn, resnet50_step

import mgegraph as mg
import mgegraph.functional as F
from mgegraph import nn, optim
from mgegraph.ir.errors import GraphError
from mgegraph.tools.graphview import Drawing, build_views, op_label, recomputed_steps, segments

HOSTILE = "</script><script>document.title='pwned'</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def training_plan(name: str = "x", remat="sqrt") -> mg.Plan:
    """A 5-layer MLP's SGD step as one plan (forward, gradients, updates), input ``name``."""
    rng = np.random.default_rng(0)
    g = mg.Graph()
    x = g.input(name, (8, 16), "float32")
    y = g.input("labels", (8,), "int64")
    params = [g.param(f"w{k}", rng.standard_normal((16, 16), np.float32) * 0.3)
              for k in range(5)]
    h = x
    for w in params[:-1]:
        h = F.relu(h @ w)
    loss = F.cross_entropy(h @ params[-1], y)
    for p, dp in zip(params, mg.grad(loss, params)):
        g.assign(p, p - 0.1 * dp)
    return mg.compile([loss], remat=remat)


def small_graph():
    g = mg.Graph()
    x = g.input("x", (4, 8), "float32")
    w = g.param("w", np.ones((8, 8), np.float32))
    return g, F.relu(x @ w * 2.0 + 1.0) - F.tanh(x @ w)


def page_data(text: str) -> dict:
    found = re.search(r'<script type="application/json" id="mg-data">(.*?)</script>', text, re.DOTALL)
    return json.loads(found.group(1))


def instructions_in_views(data) -> list[int]:
    """Every instruction item reachable from the top view, opening every group."""
    seen, stack = [], [0]
    while stack:
        for i in data["views"][stack.pop()]["n"]:
            item = data["items"][i]
            if item["k"] == "i":
                seen.append(i)
            if item["k"] == "g":
                stack.append(item["v"])
    return sorted(seen)


# -- the page ------------------------------------------------------------------------------------
def test_the_page_is_self_contained_and_holds_every_instruction(tmp_path):
    plan = training_plan()
    path = tmp_path / "plan.html"
    mg.viz.save_html(plan, path)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.IGNORECASE)
    assert "<link" not in text and not re.search(r"<script[^>]*\ssrc=", text)
    data = page_data(text)
    items = [it for it in data["items"] if it["k"] == "i"]
    assert [(it["step"], it["op"], it["kernel"]) for it in items] == \
        [(k, ins.op, ins.kernel) for k, ins in enumerate(plan.instructions)]
    assert instructions_in_views(data) == list(range(len(plan.instructions)))
    for section in ('id="graph"', 'id="arena"', 'id="instructions"', 'id="memory"',
                    'id="passes"', 'id="remat"'):
        assert section in text
    assert "memory plan: arena" in text and "remat (sqrt)" in text


def test_details_carry_types_slots_offsets_live_ranges_and_locations():
    plan = training_plan()
    data = page_data(mg.viz.html(plan))
    for k, ins in enumerate(plan.instructions):
        item = data["items"][k]
        assert (item["ins"], item["outs"], item["ws"]) == \
            (list(ins.inputs), list(ins.outputs), ins.workspace)
        assert item["loc"] == ins.location and __file__ in ins.location
    for s, row in enumerate(data["slots"]):
        slot = plan.slots[s]
        assert row[:4] == [str(slot.type), str(slot.role), slot.name, slot.offset]
        assert row[4:6] == list(plan.memory.spans.get(s, (None, None)))


def test_hostile_names_stay_text():
    text = mg.viz.html(training_plan(HOSTILE))
    assert HOSTILE not in text
    assert text.count("<script") == 3  # the error hook, the data and the viewer
    assert next(it["name"] for it in page_data(text)["items"] if it["k"] == "s") == HOSTILE


def test_remat_clones_are_marked():
    plan = training_plan()
    redo = recomputed_steps(plan)
    assert redo
    ins = plan.instructions
    loss = next(k for k, i in enumerate(ins) if i.op == "cross_entropy")

    def same(a, b):
        return (a.op, a.attrs, [plan.slots[s].type for s in a.inputs + a.outputs]) == \
            (b.op, b.attrs, [plan.slots[s].type for s in b.inputs + b.outputs])
    for k in redo:  # each clone repeats a forward instruction, after the loss
        assert k > loss and any(same(ins[k], ins[j]) for j in range(loss))
    data = page_data(mg.viz.html(plan))
    assert {k for k, it in enumerate(data["items"]) if it.get("remat")} == set(redo)
    assert recomputed_steps(training_plan(remat=None)) == frozenset()


def test_fused_programs_open_into_their_steps():
    _, y = small_graph()
    plan = mg.compile([y])
    data = page_data(mg.viz.html(plan))
    fused = [it for it in data["items"] if it.get("op") == "fused_elementwise"]
    assert len(fused) == 1
    steps = [data["items"][i] for i in data["views"][fused[0]["v"]]["n"]]
    assert [s["lab"][0] for s in steps if s["k"] == "p"].count("input 0") == 1
    assert {"relu", "tanh", "sub", "output 0"} <= {s["lab"][0] for s in steps}
    assert "v5 = relu v4" in fused[0]["prog"]


def test_a_fused_activation_shows_in_the_label():
    g = mg.Graph()
    x = g.input("x", (4, 8), "float32")
    y = F.relu(F.linear(x, g.param("w", np.ones((3, 8), np.float32))))
    labels = [it["lab"][0] for it in page_data(mg.viz.html(mg.compile([y])))["items"]]
    assert "linear+relu" in labels
    assert op_label("conv2d", (("activation", "none"),)) == "conv2d"


def test_a_graph_is_drawn_without_an_arena(tmp_path):
    g, _ = small_graph()
    mg.viz.save_html(g, tmp_path / "g.html")
    text = (tmp_path / "g.html").read_text(encoding="utf-8")
    data = page_data(text)
    assert data["kind"] == "graph" and data["slots"] is None
    assert 'id="arena"' not in text
    ops = sorted(it["op"] for it in data["items"] if it["k"] == "i")
    assert ops == sorted(n.op.name for n in g.nodes if n.op.category != "source")


def test_a_model_file_a_step_a_predictor_and_a_traced_function(tmp_path):
    plan = training_plan()
    mg.save(plan, tmp_path / "model.mgm")
    from_file = page_data(mg.viz.html(str(tmp_path / "model.mgm")))
    assert len([it for it in from_file["items"] if it["k"] == "i"]) == len(plan.instructions)
    nn.init.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    x, y = np.ones((4, 6), np.float32), np.zeros(4, np.int64)
    step = mg.compile_train_step(model, F.cross_entropy, optim.SGD(model.parameters(), 0.1),
                                 example_batch=(x, y))
    predict = mg.compile_module(model.eval(), example_inputs=(x,))
    for obj in (step, predict):
        assert page_data(mg.viz.html(obj))["title"].endswith(f"{len(obj.plan.instructions)} "
                                                             "instructions on cpu")
    # batch norm folded into the conv's weights: instructions in a prologue, named in the header
    cnn = mg.compile_module(nn.Sequential(_conv_bn(3, 4, 3), nn.ReLU()).eval(),
                            example_inputs=(np.ones((1, 3, 8, 8), np.float32),))
    assert f"prologue <b>{len(cnn.plan.prologue.instructions)} instructions" in mg.viz.html(cnn)

    @mg.jit.trace
    def f(a):
        return F.relu(a) * 2.0

    with pytest.raises(GraphError, match="has not been called yet"):
        mg.viz.html(f)
    f(mg.tensor(np.ones(3, np.float32)))
    assert page_data(mg.viz.html(f))["kind"] == "plan"


def test_what_is_not_a_plan_is_refused_clearly(tmp_path):
    with pytest.raises(GraphError, match="not int"):
        mg.viz.save_html(42, tmp_path / "x.html")
    with pytest.raises(GraphError, match="no model file at"):
        mg.viz.html(str(tmp_path / "missing.mgm"))
    mg.save({"w": np.ones(3, np.float32)}, tmp_path / "weights.mgm")
    with pytest.raises(GraphError, match="state dict"):
        mg.viz.html(tmp_path / "weights.mgm")
    with pytest.raises(GraphError, match="engine 'neato'"):
        mg.viz.to_svg(training_plan(), engine="neato")
    assert not os.path.exists(tmp_path / "x.html")


class FakeProfile:
    def __init__(self, times):
        self.times = times

    def instruction_times(self, plan):
        return self.times


def test_profile_times_show_per_instruction():
    plan = training_plan(remat=None)
    n = len(plan.instructions)
    assert page_data(mg.viz.html(plan))["times"] is False
    times = tuple((k + 1) * 1e-6 for k in range(n))
    data = page_data(mg.viz.html(plan, profile=FakeProfile(times)))
    assert data["times"] is True and data["total_time"] == pytest.approx(sum(times))
    assert [data["items"][k]["t"] for k in range(n)] == list(times)
    plan._cache["instruction_times"] = times[::-1]  # what a profiled run leaves on the plan
    text = mg.viz.html(plan)
    assert page_data(text)["items"][0]["t"] == times[-1] and "time (ms)" in text
    with pytest.raises(GraphError, match="profile times: 2 for a plan of"):
        mg.viz.html(plan, profile=FakeProfile((1.0, 2.0)))
    with pytest.raises(GraphError, match="a Graph has no instructions to time"):
        mg.viz.html(small_graph()[0], profile=FakeProfile(times))


def test_a_profiled_run_leaves_its_times_for_the_page():
    plan = training_plan(remat=None)
    feeds = {"x": np.ones((8, 16), np.float32), "labels": np.zeros(8, np.int64)}
    with mg.profile():
        plan.run(feeds)
    data = page_data(mg.viz.html(plan))
    assert data["times"] and all(data["items"][k]["t"] >= 0 for k in range(len(plan.instructions)))


def test_arena_buffers_name_their_slots():
    plan = training_plan()
    root = ET.fromstring(mg.planner.memory_svg(plan))
    slots = {int(r.get("data-slot")) for r in root.iter("{http://www.w3.org/2000/svg}rect")
             if r.get("class") == "buffer"}
    assert slots and slots <= set(plan.memory.spans)


def test_to_svg_is_our_own_drawing():
    g, y = small_graph()
    for obj in (mg.compile([y]), g):
        root = ET.fromstring(mg.viz.to_svg(obj))
        labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
        assert "relu" in labels and "x" in labels
    if shutil.which("dot") is None:
        with pytest.raises(GraphError, match="needs Graphviz"):
            mg.viz.to_svg(g, engine="dot")
    else:
        assert "<svg" in mg.viz.to_svg(g, engine="dot")


NASTY = "a\x01b\x1f\ud800\ufffe\\"  # control characters, a lone surrogate, a backslash


def nasty_graph():
    g = mg.Graph()
    x = g.input(NASTY, (4, 8), "float32")
    w = g.param(NASTY + '"w', np.ones((8, 8), np.float32))
    return g, F.relu(x @ w)


def test_svg_of_names_with_characters_xml_forbids_is_well_formed():
    g, y = nasty_graph()
    for obj in (mg.compile([y]), g):
        root = ET.fromstring(mg.viz.to_svg(obj))  # raised on the control character
        texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
        assert "a\ufffdb\ufffd\ufffd\ufffd\\" in texts


def test_dot_escapes_backslashes_quotes_and_line_breaks_in_every_label():
    g, y = nasty_graph()
    for dot in (mg.compile([y], optimize=0).to_dot(), g.to_dot()):
        labels = re.findall(r'label="((?:[^"\\]|\\.)*)"', dot)
        # every quoted string ends where DOT ends it: nothing is left between the statements
        rest = re.sub(r'"(?:[^"\\]|\\.)*"', '""', dot)
        assert '"' not in rest.replace('""', "") and "\x01" not in dot
        assert any("a\ufffdb" in label and label.count('\\"w') == 1 for label in labels)
    if shutil.which("dot") is not None:
        ET.fromstring(mg.viz.to_svg(g, engine="dot"))


# -- a ResNet-50-shaped training step: groups keep it usable -----------------------------------------
@pytest.fixture(scope="module")
def resnet_step():
    return resnet50_step()


def test_a_resnet50_step_opens_as_a_few_dozen_blocks(resnet_step):
    step = resnet_step
    assert len(step.plan.source.graph.nodes) > 1800
    data = page_data(mg.viz.html(step))
    top = [data["items"][i] for i in data["views"][0]["n"]]
    assert len(top) < 60 < len(step.plan.instructions)
    repeats = [it["lab"][0] for it in top if it["k"] == "g" and "\u00d7 block" in it["lab"][0]]
    assert len(repeats) >= 6  # forward and backward runs of identical bottlenecks
    assert instructions_in_views(data) == list(range(len(step.plan.instructions)))
    assert data["opened"] == []
    graph = page_data(mg.viz.html(step.plan.source.graph))  # the graph it was compiled from
    assert len(graph["views"][0]["n"]) < 60


def test_blocks_are_cut_where_one_value_is_live_and_repeats_grouped():
    # four diamonds a -> (b, c) -> d in a chain: one value is live between them
    items = [{"k": "i", "op": "abcd"[k % 4], "lab": ["abcd"[k % 4]]} for k in range(16)]
    edges = [(e + 4 * j, f + 4 * j) for j in range(4) for e, f in ((0, 1), (0, 2), (1, 3),
                                                                     (2, 3))]
    edges += [(4 * j + 3, 4 * j + 4) for j in range(3)]
    d = Drawing(items, list(range(16)), edges, set(range(16)))
    assert segments(d, [15]) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    build_views(d, [15], group=True)
    (top,) = d.views[0]["n"]
    assert d.items[top]["lab"][0] == "4 \u00d7 block of 4 ops"


# -- in a browser: one headless Chromium for the module, driven over its DevTools pipe ---------
class Browser:
    """Headless Chromium driven through the DevTools protocol over --remote-debugging-pipe
    (NUL-terminated JSON on its fds 3 and 4): events dispatched as a person's clicks would be,
    with no driver to install."""

    def __init__(self, exe, profile):
        to_browser, self._w = os.pipe()
        self._r, from_browser = os.pipe()
        command = (f"exec {exe} --headless --no-sandbox --disable-gpu --no-first-run "
                   "--disable-background-networking --disable-component-update --disable-sync "
                   f"--user-data-dir={profile} --remote-debugging-pipe "
                   f"3<&{to_browser} 4>&{from_browser}")
        self.proc = subprocess.Popen(["bash", "-c", command], pass_fds=(to_browser, from_browser),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self._buf, self._id, self.session = b"", 0, None

    def send(self, method, session=True, **params):
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        os.write(self._w, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                ready, _, _ = select.select([self._r], [], [], 60)
                assert ready, f"chromium did not answer {method} in 60 s"
                chunk = os.read(self._r, 1 << 16)
                assert chunk, "chromium closed its pipe"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, reply["error"]
                return reply["result"]

    def open(self, url):
        target = self.send("Target.createTarget", session=False, url=url)["targetId"]
        self.session = self.send("Target.attachToTarget", session=False, targetId=target,
                                 flatten=True)["sessionId"]
        deadline = time.monotonic() + 30
        while self.js("document.body && document.body.getAttribute('data-rendered')") != "1":
            assert time.monotonic() < deadline, "the page did not render in 30 s"
            time.sleep(0.05)

    def dom(self) -> str:
        return self.js("document.documentElement.outerHTML")

    def screenshot(self, width: int, height: int) -> bytes:
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        return base64.b64decode(self.send("Page.captureScreenshot", format="png")["data"])

    def js(self, expression):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def close(self):
        try:
            self.send("Browser.close", session=False)
            self.proc.wait(timeout=30)
        except (AssertionError, subprocess.TimeoutExpired):  # it went before answering, or hung
            self.proc.kill()
            self.proc.wait()
        os.close(self._w)
        os.close(self._r)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (apt install chromium)")
    chromium = Browser(CHROMIUM, tmp_path_factory.mktemp("chromium"))
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def step_page(tmp_path_factory):
    """The page of a training step with remat, an input with a hostile name and profile
    times."""
    plan = training_plan(HOSTILE)
    plan._cache["instruction_times"] = tuple(1e-5 * (1 + k % 7) for k in range(
        len(plan.instructions)))
    path = tmp_path_factory.mktemp("page") / "step.html"
    mg.viz.save_html(plan, path)
    return plan, path


def test_chromium_renders_the_page_without_errors(browser, step_page):
    plan, path = step_page
    # the link lights a buffer up as the pointer would: its writer and the steps it is live
    maker = next(k for k, ins in enumerate(plan.instructions) if k > 3 and ins.outputs[0]
                 in plan.memory.spans)
    slot = plan.instructions[maker].outputs[0]
    begin, end = plan.memory.spans[slot]
    browser.open(path.as_uri() + f"#buffer={slot}")
    dom = browser.dom()
    assert re.search(r'<ul id="js-errors"></ul>', dom), dom[dom.find("js-errors"):][:2000]
    assert HOSTILE not in dom and "<title>mgegraph plan: " in dom  # no script ran from it
    graph = dom[dom.find('id="graph-svg"'):dom.find("</svg>", dom.find('id="graph-svg"'))]
    assert "&lt;/script&gt;&lt;script&gt;" in graph  # the input's name, drawn as text
    assert graph.count('class="node ') >= len(plan.instructions)  # small: every box drawn
    assert graph.count('class="node op remat') == len(recomputed_steps(plan))
    assert dom.count('<rect class="buffer"') >= len(plan.memory.spans) - 1
    table = dom[dom.find("<tbody>"):dom.find("</tbody>")]
    assert table.count("<tr") == len(plan.instructions)
    assert "memory plan: arena" in dom and "remat (sqrt)" in dom
    # the page's JavaScript placed the open groups with the arithmetic of layout.grow
    view_box = r'viewBox="0 0 ([\d.]+) ([\d.]+)"'
    drawn = re.search(view_box, re.search(r'<svg[^>]*id="graph-svg"[^>]*>', dom).group()).groups()
    assert [float(v) for v in drawn] == pytest.approx(
        [float(v) for v in re.search(view_box, mg.viz.to_svg(plan)).groups()])
    assert dom.count('class="band') == 1 and f"made by step {maker} " in dom
    assert table.count('class="live"') + table.count('class="remat live"') == end - begin
    lit = re.findall(r'<g class="node op[^"]*\bhl\b[^"]*" data-item="(\d+)"', graph)
    assert lit == [str(maker)]


def test_chromium_reports_javascript_errors_into_the_page(browser, tmp_path):
    # the check above is only as good as this channel: a broken page must show its errors
    _, y = small_graph()
    text = mg.viz.html(mg.compile([y])).replace('"views":[', '"views":[{"broken":1},', 1)
    text = text.replace("</body>", "<script>notAFunction();</script></body>")
    (tmp_path / "broken.html").write_text(text, encoding="utf-8")
    browser.open((tmp_path / "broken.html").as_uri())
    dom = browser.dom()
    assert re.search(r'<body[^>]*data-errors="2"', dom)
    assert "TypeError" in dom and "notAFunction" in dom


def test_chromium_screenshot(browser, step_page, tmp_path):
    _, path = step_page
    browser.open(path.as_uri() + "#step=12")
    png = browser.screenshot(1300, 1000)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert int.from_bytes(png[16:20], "big") == 1300 and len(png) > 20_000
    if os.environ.get("MGEGRAPH_KEEP_SCREENSHOT"):
        with open(os.environ["MGEGRAPH_KEEP_SCREENSHOT"], "wb") as f:
            f.write(png)


def test_chromium_clicks_hovers_and_searches(browser, resnet_step, tmp_path):
    plan = resnet_step.plan
    plan._cache["instruction_times"] = tuple(1e-6 * (1 + k % 13) for k in range(
        len(plan.instructions)))
    mg.viz.save_html(plan, tmp_path / "r50.html")
    del plan._cache["instruction_times"]
    browser.open((tmp_path / "r50.html").as_uri())
    run_interactions(browser, plan)


def fire(selector: str, event: str, extra: str = "") -> str:
    return (f"document.querySelector({json.dumps(selector)}).dispatchEvent(new "
            f"{'KeyboardEvent' if event == 'keydown' else 'MouseEvent'}('{event}', "
            f"{{bubbles: true{extra}}}))")


def run_interactions(b: Browser, plan):
    count = "document.querySelectorAll('#graph-svg .node').length"
    closed = b.js(count)
    group = b.js("document.querySelector('#graph-svg .node.group').getAttribute('data-item')")
    b.js(fire(f'#graph-svg .node[data-item="{group}"]', "dblclick"))  # opens in place
    assert b.js(count) > closed
    assert "cluster" in b.js(f"document.querySelector('[data-item=\"{group}\"]').className.baseVal")
    b.js(fire(f'#graph-svg .node[data-item="{group}"]', "dblclick"))
    assert b.js(count) == closed
    # the find box goes to the next match and shows it, opening the groups that hold it
    b.js("document.getElementById('find').value = 'conv2d_backward_filter'")
    b.js(fire("#find", "keydown", ", key: 'Enter'"))
    hit = int(b.js("document.querySelector('#graph-svg .node.selected').getAttribute('data-item')"))
    assert plan.instructions[hit].op == "conv2d_backward_filter"
    assert b.js("document.querySelector('#details h3').textContent") == "conv2d_backward_filter"
    assert b.js("document.querySelectorAll('#graph-svg .edge.in').length") >= 1
    # a row of the table reveals its instruction (one that writes an arena buffer)
    step = next(k for k in range(300, len(plan.instructions))
                if plan.instructions[k].outputs[0] in plan.memory.spans)
    b.js("Array.from(document.querySelectorAll('#instructions tbody tr')).find((r) => "
         f"r.children[0].textContent === '{step}').dispatchEvent(new MouseEvent('click'))")
    assert b.js("document.querySelector('#graph-svg .node.selected').getAttribute('data-item')") \
        == str(step)
    # hovering a buffer lights up its writer and its steps; leaving clears them
    slot = plan.instructions[step].outputs[0]
    b.js(fire(f'#arena-box rect.buffer[data-slot="{slot}"]', "mouseover"))
    assert b.js("document.querySelectorAll('#arena-box .band').length") == 1
    assert f"s{slot}:" in b.js("document.getElementById('arena-info').textContent")
    assert b.js("document.querySelector('#graph-svg .node.hl').getAttribute('data-item')") == \
        str(step)
    b.js(fire("#arena-box svg", "mouseleave"))
    assert b.js("document.querySelectorAll('#arena-box .band, #graph-svg .hl').length") == 0
    # zoom, colour by time, sort by time
    width = float(b.js("document.getElementById('graph-svg').getAttribute('width')"))
    b.js(fire("#zoom-in", "click"))
    assert float(b.js("document.getElementById('graph-svg').getAttribute('width')")) == \
        pytest.approx(width * 1.25, rel=1e-3)
    b.js("const c = document.getElementById('colour-by'); c.value = 'time';"
         "c.dispatchEvent(new Event('change'))")
    assert b.js("document.querySelector('#graph-svg .node.op > rect').getAttribute('fill')"
                ".startsWith('rgb(')")
    b.js("Array.from(document.querySelectorAll('#instructions th')).find("
         "(h) => h.textContent.startsWith('time')).dispatchEvent(new MouseEvent('click'))")
    first = b.js("parseFloat(document.querySelector('#instructions tbody tr').children[5]"
                 ".textContent)")
    assert first == pytest.approx(13e-3)
    assert b.js("document.getElementById('js-errors').children.length") == 0


def test_memory_and_remat_pictures_of_such_names_are_well_formed():
    g = mg.Graph()
    x = g.input(NASTY, (4, 8), "float32")
    w = g.param(NASTY + '"w', np.ones((8, 8), np.float32))
    loss = F.mean(F.relu(x @ w) ** 2)
    plan = mg.compile([loss, *mg.grad(loss, [w])], remat="sqrt")
    for svg in (mg.planner.memory_svg(plan, title=NASTY), mg.planner.remat_svg(plan)):
        root = ET.fromstring(svg)  # raised on the control character of the title
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
