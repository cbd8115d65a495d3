"""One self-contained HTML page per plan (or graph): the graph, the arena over time, the
instructions, the reports and, after a profiled run, the time per instruction.

Design: Python computes everything that needs the plan (items, groups, layouts:
``graphview``; the arena picture and reports: the planner's own ``memory_svg`` and report
functions), and the page carries it as one JSON block that ``viewer.js`` draws; the script, the
stylesheet and the arena SVG are inlined, so the file opens with no network. The JSON is
escaped for a ``<script>`` element (``<``, ``>`` and ``&`` as ``\\u`` escapes) and the script
sets every string from the plan as text, so hostile names stay text.

>>> write_page(plan, "plan.html")
"""
from __future__ import annotations

import json
from importlib import resources

from ..ir.printer import CATEGORY_COLOURS, OTHER_COLOUR
from ..planner.memory.report import human, memory_svg
from ..planner.remat.remat_report import remat_svg
from .graphview import build_views, graph_drawing, plan_drawing, plan_output_items
from .svg import escape

_ON_ERROR = ("window.onerror=function(m,s,l,c){var e=document.getElementById('js-errors');"
             "if(!e)return;var i=document.createElement('li');i.textContent=m+' ('+s+':'+l+')';"
             "e.appendChild(i);document.body.setAttribute('data-errors',String(e.children.length))"
             ";};")


def _asset(name: str) -> str:
    return resources.files("mgegraph.tools").joinpath(name).read_text(encoding="utf-8")


def script_json(data) -> str:
    """``data`` as JSON that is safe inside a ``<script>`` element.

    >>> script_json({"a": "</script>"})
    '{"a":"\\\\u003c/script\\\\u003e"}'
    """
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# -- the data ------------------------------------------------------------------------------------
def _slots(plan) -> list:
    spans = plan.memory.spans
    return [[str(s.type), str(s.role), s.name, s.offset, *spans.get(s.index, (None, None)),
             s.alias] for s in plan.slots]


def plan_data(plan, times=None, title=None, group=None) -> dict:
    """What the page of ``plan`` shows, as plain data (``times``: seconds per instruction)."""
    d = build_views(plan_drawing(plan, times), plan_output_items(plan), group)
    return {"kind": "plan", "title": title or "plan", "items": d.items, "views": d.views,
            "opened": d.opened, "slots": _slots(plan), "times": times is not None,
            "total_time": sum(times) if times is not None else 0,
            "cats": CATEGORY_COLOURS, "other": OTHER_COLOUR}


def graph_data(graph, title=None, group=None) -> dict:
    """What the page of a Graph shows: its nodes (no plan: no arena, no slots)."""
    d = build_views(graph_drawing(graph), (), group)
    return {"kind": "graph", "title": title or "graph", "items": d.items, "views": d.views,
            "opened": d.opened, "slots": None, "times": False, "total_time": 0,
            "cats": CATEGORY_COLOURS, "other": OTHER_COLOUR}


# -- the sections --------------------------------------------------------------------------------
def _facts_plan(plan, times) -> list[tuple[str, str]]:
    facts = [("device", plan.device), ("instructions", str(len(plan.instructions))),
             ("arena", human(plan.arena_bytes)), ("lower bound", human(plan.lower_bound_bytes)),
             ("persistent", human(plan.persistent_bytes))]
    if plan.prologue is not None:  # the weight-only instructions, rerun when a weight changes
        facts.append(("prologue", f"{len(plan.prologue.instructions)} instructions"))
    if plan.remat is not None:
        facts.append(("remat", plan.remat.brief()["candidate"]))
    if times is not None:
        facts.append(("profiled run", f"{sum(times) * 1e3:.3f} ms"))
    return facts


def _header(title: str, facts, links) -> str:
    facts_html = " &middot; ".join(f"{escape(k)} <b>{escape(v)}</b>" for k, v in facts)
    nav = "".join(f'<a href="#{a}">{escape(t)}</a>' for a, t in links)
    return (f"<header><h1>{escape(title)}</h1><div class=\"facts\">{facts_html}</div>"
            f"<nav>{nav}</nav></header>")


def _legend(times: bool) -> str:
    spans = [f'<span><i style="background:{c}"></i>{escape(k)}</span>'
             for k, c in {**CATEGORY_COLOURS, "other": OTHER_COLOUR}.items()]
    spans.append('<span><i style="background:#fff;border-style:dashed"></i>group '
                 '(double-click or + opens it)</span>')
    spans.append('<span><i style="background:#fff;border:2px dashed #d9480f"></i>recomputed by '
                 'remat</span>')
    if times:
        spans.append('<span><i style="background:rgb(255,95,30)"></i>slow (colour by time)</span>')
    return f'<div class="legend">{"".join(spans)}</div>'


def _graph_section(times: bool) -> str:
    colour = ('<select id="colour-by" title="colour boxes by"><option value="category">colour by '
              'op category</option><option value="time">colour by time</option></select>'
              if times else "")
    return ('<section id="graph"><h2>Graph</h2><div class="toolbar">'
            '<button id="zoom-out" title="zoom out">&minus;</button>'
            '<button id="zoom-in" title="zoom in">+</button>'
            '<button id="zoom-fit">fit width</button><button id="open-all">open all groups'
            '</button><button id="close-all">close all</button>'
            f'{colour}<input id="find" placeholder="find op, input or step (Enter)" size="28">'
            '<span class="hint">click a box for details</span></div>'
            f'{_legend(times)}<div id="graph-area"><div id="graph-box"></div>'
            '<aside id="details"><p class="empty">Click a box to see its op, attributes, '
            'input and output types, slots, arena offsets, live steps and the line of your '
            'code that made it. Double-click a group or a fused box (marked +) to open it in '
            'place; the find box and the instruction table take you to any instruction.</p>'
            '</aside></div></section>')


def _arena_section(plan) -> str:
    return ('<section id="arena"><h2>Arena over time</h2><p class="hint">Each rectangle is a '
            "buffer: its steps across, its bytes up. Hover one to light up the instruction "
            "that made it and the steps it is live; click it to find that instruction.</p>"
            f'<div id="arena-box">{memory_svg(plan)}</div><div id="arena-info"></div></section>')


def _table_section(times: bool, title: str = "Instructions") -> str:
    heads = (["step", "op", "kernel", "outputs", "offset"] if title == "Instructions" else
             ["node", "op", "outputs"]) + (["time (ms)"] if times else []) + ["made at"]
    cells = "".join(f"<th>{h}</th>" for h in heads)
    return (f'<section id="instructions"><h2>{title}</h2><p class="hint">Click a row to '
            "show it in the graph; click a heading to sort.</p><div id=\"table-box\">"
            f'<table class="list"><thead><tr>{cells}</tr></thead><tbody></tbody></table>'
            "</div></section>")


def _report(anchor: str, title: str, text: str, extra: str = "") -> str:
    return (f'<section id="{anchor}"><h2>{escape(title)}</h2>'
            f'<pre class="report">{escape(text)}</pre>{extra}</section>')


def _reports(plan) -> list[str]:
    out = [_report("memory", "Memory report", plan.memory_report()),
           _report("passes", "Passes report", plan.passes_report())]
    if plan.remat is not None:
        out.append(_report("remat", "Remat report", plan.remat_report(),
                           f'<div class="remat-picture">{remat_svg(plan)}</div>'))
    return out


def _document(title: str, body: list[str], data: dict) -> str:
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title>", f"<script>{_ON_ERROR}</script>",
        f"<style>{_asset('viewer.css')}</style></head><body>", *body,
        '<ul id="js-errors"></ul>',
        f'<script type="application/json" id="mg-data">{script_json(data)}</script>',
        f"<script>{_asset('viewer.js')}</script>", "</body></html>"])


# -- the page ------------------------------------------------------------------------------------
def plan_page(plan, times=None, title=None, group=None) -> str:
    """The HTML page of ``plan``; ``times`` (seconds per instruction, in order) adds the
    profile: a time column, the time in each node's details and a colouring by time.

    >>> open("plan.html", "w").write(plan_page(plan))
    """
    title = title or f"mgegraph plan: {len(plan.instructions)} instructions on {plan.device}"
    data = plan_data(plan, times, title, group)
    links = [("graph", "Graph"), ("arena", "Arena"), ("instructions", "Instructions"),
             ("memory", "Memory report"), ("passes", "Passes")]
    if plan.remat is not None:
        links.append(("remat", "Remat"))
    body = [_header(title, _facts_plan(plan, times), links), _graph_section(times is not None),
            _arena_section(plan), _table_section(times is not None), *_reports(plan)]
    return _document(title, body, data)


def graph_page(graph, title=None, group=None) -> str:
    """The HTML page of a Graph: the nodes and their types (no plan: no arena or reports).

    >>> open("graph.html", "w").write(graph_page(g))
    """
    title = title or f"mgegraph graph: {len(graph.nodes)} nodes"
    data = graph_data(graph, title, group)
    facts = [("nodes", str(len(graph.nodes))), ("inputs", str(len(graph.inputs))),
             ("params", str(len(graph.params)))]
    body = [_header(title, facts, [("graph", "Graph"), ("instructions", "Nodes")]),
            _graph_section(False), _table_section(False, "Nodes")]
    return _document(title, body, data)


def write_page(path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
