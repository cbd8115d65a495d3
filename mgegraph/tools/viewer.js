// mgegraph plan viewer: draws the views laid out by mgegraph/tools/layout.py, opens and closes
// groups in place, and links the graph, the arena picture and the instruction table.
// Every string from the plan is set with textContent or setAttribute, never parsed as HTML.
"use strict";
(function () {
  const errors = document.getElementById("js-errors");
  function record(message) {
    const li = document.createElement("li");
    li.textContent = String(message);
    errors.appendChild(li);
    document.body.setAttribute("data-errors", String(errors.children.length));
  }
  // uncaught errors: the page's window.onerror (html.py) writes them into #js-errors too
  try {
    viewer();
  } catch (e) {
    record(e && e.stack ? e.stack : e);
  }
  // milliseconds from the start of navigation until the page was drawn (the benchmark reads
  // it); set when drawing failed too, so that whoever waits for it sees the errors
  document.body.setAttribute("data-ready-ms", String(Math.round(performance.now())));
  document.body.setAttribute("data-rendered", "1");

  function viewer() {
    const D = JSON.parse(document.getElementById("mg-data").textContent);
    const NS = "http://www.w3.org/2000/svg";
    const PAD = 8, HEAD = 22, LINE = 14;
    const items = D.items, views = D.views;
    const open = new Set(D.opened);
    const viewOf = {};        // item -> the view that holds it
    views.forEach((v, k) => v.n.forEach((i) => { viewOf[i] = k; }));
    const writer = {};        // slot -> the instruction that writes it (or uses it as workspace)
    items.forEach((it, i) => {
      if (it.k !== "i" || !it.outs) return;
      it.outs.forEach((s) => { if (!(s in writer)) writer[s] = i; });
      if (it.ws !== null && it.ws !== undefined) writer[it.ws] = i;
    });
    let selected = null, colourBy = "category", scale = 1;
    const timed = items.filter((it) => it.t !== undefined).map((it) => it.t);
    const maxTime = Math.max(...timed, 1e-12);

    function el(name, attrs, parent) {
      const e = document.createElementNS(NS, name);
      for (const k in attrs) e.setAttribute(k, attrs[k]);
      if (parent) parent.appendChild(e);
      return e;
    }
    function html(name, text, parent, cls) {
      const e = document.createElement(name);
      if (text !== undefined && text !== null) e.textContent = String(text);
      if (cls) e.className = cls;
      if (parent) parent.appendChild(e);
      return e;
    }

    // -- sizes: the same arithmetic as layout.grow --------------------------------------------
    function measure(vid, memo) {
      if (memo[vid]) return memo[vid];
      const v = views[vid], sizes = v.n.map((i, k) => {
        const it = items[i];
        if (it.v === undefined || !open.has(it.v)) return v.sz[k];
        const inner = measure(it.v, memo);
        return [Math.max(v.sz[k][0], inner.W + 2 * PAD), HEAD + inner.H + PAD];
      });
      const x = v.x.slice(), y = v.y.slice();
      let down = 0, W = v.W;
      v.rows.forEach((row) => {
        let right = 0, was = 0, now = 0;
        row.forEach((k) => {
          x[k] += right; y[k] += down;
          right += sizes[k][0] - v.sz[k][0];
          W = Math.max(W, x[k] + sizes[k][0] + PAD);
          was = Math.max(was, v.sz[k][1]); now = Math.max(now, sizes[k][1]);
        });
        down += now - was;
      });
      return (memo[vid] = { x, y, sizes, W, H: v.H + down });
    }

    // -- colours and totals of groups ---------------------------------------------------------
    function leaves(i, out) {
      const it = items[i];
      if (it.k === "g") views[it.v].n.forEach((j) => leaves(j, out));
      else if (it.k === "i") out.push(i);
      return out;
    }
    function timeOf(i) { return leaves(i, []).reduce((a, j) => a + (items[j].t || 0), 0); }
    function heat(t) {
      // a log scale: one dominant kernel must not wash out the differences between the rest
      const f = Math.log1p(9 * Math.min(1, t / maxTime)) / Math.log(10);
      const r = 255, g = Math.round(245 - 150 * f), b = Math.round(235 - 205 * f);
      return `rgb(${r},${g},${b})`;
    }
    function fill(i) {
      const it = items[i];
      if (colourBy === "time" && D.times && it.k !== "p" && it.k !== "s") return heat(timeOf(i));
      if (it.k === "g") return "#ffffff";
      return D.cats[it.cat] || D.other;
    }

    // -- drawing ------------------------------------------------------------------------------
    const box = document.getElementById("graph-box");
    let svg = null, nodeEl = {};
    function render() {
      const memo = {}, top = measure(0, memo);
      nodeEl = {};
      svg = el("svg", { width: top.W * scale, height: top.H * scale,
                        viewBox: `0 0 ${top.W} ${top.H}`, id: "graph-svg" });
      const defs = el("defs", {}, svg);
      const m = el("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4, markerWidth: 6,
                               markerHeight: 6, markerUnits: "userSpaceOnUse", orient: "auto" }, defs);
      el("path", { d: "M0,0 L8,4 L0,8 z", fill: "#9aa3b2" }, m);
      drawView(0, svg, 0, 0, memo);
      box.replaceChildren(svg);
      if (selected !== null) mark(selected);
    }
    function drawView(vid, parent, ox, oy, memo) {
      const v = views[vid], at = measure(vid, memo);
      const g = el("g", {}, parent);
      const edges = el("g", {}, g);
      v.e.forEach(([a, b]) => {
        const x1 = ox + at.x[a] + at.sizes[a][0] / 2, y1 = oy + at.y[a] + at.sizes[a][1];
        const x2 = ox + at.x[b] + at.sizes[b][0] / 2, y2 = oy + at.y[b];
        // a long edge (a saved activation read in the backward part) bows out to the right, so
        // that it does not run along the chain of boxes between its ends
        const c = Math.max(16, (y2 - y1) / 2), bow = y2 - y1 > 160 ? Math.min(240, (y2 - y1) * 0.12) : 0;
        const d = `M${x1},${y1} C${x1 + bow},${y1 + c} ${x2 + bow},${y2 - c} ${x2},${y2}`;
        el("path", { class: "edge", d,
                     "marker-end": "url(#arrow)", "data-from": v.n[a], "data-to": v.n[b] }, edges);
      });
      v.n.forEach((i, k) => drawNode(i, g, ox + at.x[k], oy + at.y[k], at.sizes[k], memo));
    }
    function drawNode(i, parent, x, y, size, memo) {
      const it = items[i], opened = it.v !== undefined && open.has(it.v);
      const cls = ["node", it.k === "g" ? "group" : it.k === "s" ? "input" : "op"];
      if (opened) cls.push("cluster");
      if (it.remat) cls.push("remat");
      const g = el("g", { class: cls.join(" "), "data-item": i,
                           transform: `translate(${x},${y})` }, parent);
      nodeEl[i] = g;
      el("title", {}, g).textContent = (it.step !== undefined ? `step ${it.step}: ` : "") +
        it.lab.join("  ") +
        (it.t !== undefined ? `  ${ms(it.t)}` : "");
      el("rect", { class: "box", width: size[0], height: size[1], rx: 4,
                   fill: opened ? "#f3f5f8" : fill(i) }, g);
      it.lab.forEach((line, k) => {
        if (opened && k > 0) return;
        const t = el("text", { x: PAD, y: 15 + k * LINE, class: k === 0 ? "op" : "" }, g);
        t.textContent = line;
      });
      if (it.v !== undefined) {
        const t = el("text", { x: size[0] - 14, y: 15, class: "toggle" }, g);
        t.textContent = opened ? "\u2212" : "+";
      }
      g.addEventListener("click", (e) => { e.stopPropagation(); select(i); });
      g.addEventListener("dblclick", (e) => { e.stopPropagation(); toggle(i); });
      if (opened) drawView(it.v, g, PAD, HEAD, memo);
    }

    function toggle(i) {
      const v = items[i].v;
      if (v === undefined) return;
      if (open.has(v)) open.delete(v); else open.add(v);
      render();
      select(i);
    }
    function visible(i) {          // the item itself, or the closed group that holds it
      let shown = i;
      for (let j = i; viewOf[j] !== undefined && viewOf[j] !== 0;) {
        const owner = views[viewOf[j]].owner;
        if (!open.has(viewOf[j])) shown = owner;
        j = owner;
      }
      return shown;
    }
    function reveal(i) {
      for (let j = i; viewOf[j] !== undefined && viewOf[j] !== 0; j = views[viewOf[j]].owner) {
        open.add(viewOf[j]);
      }
      render();
      select(i);
      const g = nodeEl[i];
      if (!g) return;
      const at = g.getBoundingClientRect(), frame = box.getBoundingClientRect();
      box.scrollTop += at.top - frame.top - (frame.height - at.height) / 2;
      box.scrollLeft += at.left - frame.left - (frame.width - at.width) / 2;
      if (frame.top < 0 || frame.top > window.innerHeight) box.scrollIntoView({ block: "start" });
    }

    // -- selection and details ----------------------------------------------------------------
    function mark(i) {
      svg.querySelectorAll(".selected").forEach((n) => n.classList.remove("selected"));
      svg.querySelectorAll(".edge.in, .edge.out").forEach((n) => n.classList.remove("in", "out"));
      if (nodeEl[i]) nodeEl[i].classList.add("selected");
      svg.querySelectorAll(`.edge[data-to="${i}"]`).forEach((n) => n.classList.add("in"));
      svg.querySelectorAll(`.edge[data-from="${i}"]`).forEach((n) => n.classList.add("out"));
    }
    function select(i) {
      selected = i;
      mark(i);
      details(i);
    }
    const panel = document.getElementById("details");
    function row(table, name, value) {
      const tr = html("tr", null, table);
      html("td", name, tr);
      const td = html("td", null, tr);
      if (value instanceof Node) td.appendChild(value); else td.textContent = String(value);
    }
    function slotText(s) {
      if (!D.slots) return `s${s}`;
      const [type, role, name, offset, begin, end, alias] = D.slots[s];
      let out = `s${s}: ${type} ${role}${name ? " " + name : ""}`;
      if (alias !== null) out += ` (view of s${alias})`;
      if (offset !== null) out += ` @+0x${offset.toString(16)}`;
      if (begin !== null) out += `, live steps [${begin}, ${end})`;
      return out;
    }
    function lines(list) {
      const div = html("div");
      list.forEach((t) => html("div", t, div));
      return div;
    }
    function ms(t) {
      return t < 1e-3 ? `${(t * 1e6).toFixed(2)} \u00b5s` : `${(t * 1e3).toFixed(3)} ms`;
    }
    function details(i) {
      const it = items[i];
      panel.replaceChildren();
      html("h3", it.k === "g" ? it.lab[0] : it.k === "s" ? `input ${it.name}` : it.op, panel);
      if (it.remat) html("span", "recomputed by remat", panel, "badge remat");
      const t = html("table", null, panel);
      if (it.k === "i") instructionRows(t, it);
      else if (it.k === "s") {
        row(t, "type", it.lab[1]);
        if (it.slot !== undefined) row(t, "slot", slotText(it.slot));
      } else if (it.k === "g") groupRows(t, i);
      else row(t, "fused step", it.lab.join(" "));
      if (it.v !== undefined) {
        const b = html("button", open.has(it.v) ? "close" : "open in place", panel);
        b.addEventListener("click", () => toggle(i));
      }
    }
    function instructionRows(t, it) {
      if (it.step !== undefined) row(t, "step", it.step);
      if (it.kernel) row(t, "kernel", it.kernel);
      it.attrs.forEach(([k, v]) => row(t, k, v));
      if (it.ins) row(t, "inputs", lines(it.ins.map(slotText)));
      if (it.outs) row(t, "outputs", lines(it.outs.map(slotText)));
      if (it.vins) row(t, "inputs", lines(it.vins));
      if (it.vouts) row(t, "outputs", lines(it.vouts));
      if (it.ws !== null && it.ws !== undefined) row(t, "workspace", slotText(it.ws));
      if (it.t !== undefined) {
        row(t, "time", `${ms(it.t)} (${(100 * it.t / D.total_time).toFixed(1)}% of the run)`);
      }
      row(t, "made at", it.loc);
      if (it.prog) {
        const pre = html("pre", it.prog.join("\n"));
        row(t, "program", pre);
      }
    }
    function groupRows(t, i) {
      const members = leaves(i, []), counts = {};
      members.forEach((j) => { counts[items[j].op] = (counts[items[j].op] || 0) + 1; });
      row(t, "instructions", members.length);
      const byCount = Object.entries(counts).sort((a, b) => b[1] - a[1]);
      row(t, "ops", lines(byCount.map(([k, n]) => `${k} \u00d7 ${n}`)));
      const steps = members.map((j) => items[j].step).filter((s) => s !== undefined)
        .sort((a, b) => a - b);
      if (steps.length) row(t, "steps", `${steps[0]} \u2026 ${steps[steps.length - 1]}`);
      const list = html("div");
      members.slice(0, 60).forEach((j) => {
        const at = items[j].step !== undefined ? `${items[j].step} ` : "";
        const a = html("a", at + items[j].op, list);
        a.href = "#";
        a.style.display = "block";
        a.addEventListener("click", (e) => { e.preventDefault(); reveal(j); });
      });
      if (members.length > 60) html("div", `\u2026 and ${members.length - 60} more`, list);
      row(t, "members", list);
      const redo = members.filter((j) => items[j].remat).length;
      if (redo) row(t, "recomputed", `${redo} instructions`);
      if (D.times) row(t, "time", ms(timeOf(i)));
    }

    // -- the arena picture: a buffer lights up its writer and its steps ---------------------------
    let lit = [];
    function unlight() {
      lit.forEach((n) => (n.classList.contains("band") ? n.remove() : n.classList.remove("hl", "live")));
      lit = [];
    }
    function light(s) {           // arena slot s: its steps, its writer and the steps it is live
      const pic = document.querySelector("#arena-box svg");
      const r = pic && pic.querySelector(`rect.buffer[data-slot="${s}"]`);
      if (!r) return;
      unlight();
      lit.push(el("rect", { class: "band", x: r.getAttribute("x"), width: r.getAttribute("width"),
                            y: 0, height: pic.getAttribute("height") }, pic));
      const maker = writer[s], [, , , , begin, end] = D.slots[s];
      document.getElementById("arena-info").textContent = slotText(s) +
        (maker !== undefined ? `, made by step ${items[maker].step} ${items[maker].op}` : "");
      for (let k = begin; k < end; k++) {
        if (tableRows[k]) lit.push(tableRows[k]);
        if (nodeEl[visible(k)]) lit.push(nodeEl[visible(k)]);
      }
      lit.forEach((n) => n.classList.add("live"));
      if (maker !== undefined && nodeEl[visible(maker)]) {
        nodeEl[visible(maker)].classList.add("hl");
        lit.push(nodeEl[visible(maker)]);
      }
    }
    function arena() {
      const pic = document.querySelector("#arena-box svg");
      if (!pic) return;
      const slotOf = (e) => {
        const r = e.target.closest("rect.buffer");
        return r ? Number(r.getAttribute("data-slot")) : null;
      };
      pic.addEventListener("mouseover", (e) => { if (slotOf(e) !== null) light(slotOf(e)); });
      pic.addEventListener("mouseleave", unlight);
      pic.addEventListener("click", (e) => {
        const s = slotOf(e);
        if (s !== null && writer[s] !== undefined) reveal(writer[s]);
      });
    }

    // -- the instruction table ----------------------------------------------------------------
    const tableRows = [];
    function table() {
      const body = document.querySelector("#instructions tbody");
      if (!body) return;
      items.forEach((it, i) => {
        if (it.k !== "i") return;
        const tr = html("tr", null, body);
        if (it.remat) tr.className = "remat";
        const outs = it.outs ? it.outs.map((s) => D.slots[s][0]).join(", ") : it.lab[1];
        const offset = it.outs ? D.slots[it.outs[0]][3] : null;
        const where = offset !== null ? `0x${offset.toString(16)}` : "";
        const cells = D.kind === "plan" ? [it.step, it.op, it.kernel, outs, where] : [i, it.op, outs];
        cells.forEach((v, k) => html("td", v, tr, k === 0 ? "num" : ""));
        if (D.times) html("td", it.t !== undefined ? (it.t * 1e3).toFixed(3) : "", tr, "num");
        html("td", it.loc, tr);
        tr.addEventListener("click", () => reveal(i));
        tableRows[it.step !== undefined ? it.step : i] = tr;
      });
      document.querySelectorAll("#instructions th")
        .forEach((th, k) => th.addEventListener("click", () => sortBy(body, k)));
    }
    let sorted = null;
    function sortBy(body, k) {     // a second click on the same heading reverses the order
      const rows = Array.from(body.children), num = (r) => parseFloat(r.children[k].textContent);
      const numeric = rows.every((r) => r.children[k].textContent === "" || !isNaN(num(r)));
      const sign = sorted === k ? -1 : 1;
      sorted = sorted === k ? null : k;
      rows.sort((a, b) => sign * (numeric ? (num(b) || 0) - (num(a) || 0)
        : a.children[k].textContent.localeCompare(b.children[k].textContent)));
      body.replaceChildren(...rows);
    }

    function openAll() {
      items.forEach((it) => { if (it.k === "g") open.add(it.v); });
      render();
    }
    // a link can say what to show: #open-all, #step=N (that instruction, selected) or #buffer=S
    // (arena slot S lit up as when the pointer is on it)
    function fromLink() {
      const want = decodeURIComponent(location.hash.slice(1)), step = /^step=(\d+)$/.exec(want);
      const buffer = /^buffer=(\d+)$/.exec(want);
      if (want === "open-all") openAll();
      if (buffer) light(Number(buffer[1]));
      if (step) {
        const i = items.findIndex((it) => it.k === "i" && it.step === Number(step[1]));
        if (i >= 0) reveal(i);
      }
    }

    // -- the toolbar --------------------------------------------------------------------------
    function toolbar() {
      const zoom = (f) => { scale = f === 0 ? 1 : Math.min(4, Math.max(0.1, scale * f)); render(); };
      document.getElementById("zoom-in").addEventListener("click", () => zoom(1.25));
      document.getElementById("zoom-out").addEventListener("click", () => zoom(0.8));
      document.getElementById("zoom-fit").addEventListener("click", () => {
        const top = measure(0, {});
        scale = Math.min(1, (box.clientWidth - 4) / top.W);
        render();
      });
      document.getElementById("open-all").addEventListener("click", openAll);
      document.getElementById("close-all").addEventListener("click", () => { open.clear(); render(); });
      const colour = document.getElementById("colour-by");
      if (colour) colour.addEventListener("change", () => { colourBy = colour.value; render(); });
      const find = document.getElementById("find");
      find.addEventListener("keydown", (e) => {
        if (e.key !== "Enter") return;
        const q = find.value.trim().toLowerCase(), from = selected === null ? 0 : selected + 1;
        const matches = (it) => it.k !== "g" && (String(it.step) === q ||
          (it.op || "").toLowerCase().includes(q) || (it.name || "").toLowerCase().includes(q));
        for (let n = 0; n < items.length; n++) {   // the next match after the selected box
          const i = (from + n) % items.length;
          if (matches(items[i])) { reveal(i); break; }
        }
      });
    }

    render();
    arena();
    table();
    toolbar();
    fromLink();
  }
})();
