"""A plan's or a graph's drawing as static SVG (``mg.viz.to_svg``): the page's views, groups
open as the page opens them, placed with ``layout.grow`` as ``viewer.js`` places them.

>>> open("plan.svg", "w").write(drawing_svg(plan))
"""
from __future__ import annotations

from ..ir.printer import CATEGORY_COLOURS, OTHER_COLOUR
from ..ir.printer import xml_text as escape
from ..plan import Plan
from .graphview import PAD, build_views, graph_drawing, plan_drawing, plan_output_items
from .layout import Layout, grow

HEAD = 22.0  # the title line of an open group (viewer.js: HEAD)
_ARROW = ('<defs><marker id="arrow" viewBox="0 0 8 8" refX="8" refY="4" markerWidth="6" '
          'markerHeight="6" markerUnits="userSpaceOnUse" orient="auto">'
          '<path d="M0,0 L8,4 L0,8 z" fill="#9aa3b2"/></marker></defs>')


def _placed(d, vid: int, opened: set, memo: dict) -> tuple[Layout, list]:
    """The view's layout with its open groups grown to hold their own views."""
    if vid in memo:
        return memo[vid]
    v = d.views[vid]
    box = Layout(v["x"], v["y"], (), v["rows"], v["W"], v["H"])
    sizes, grown = list(v["sz"]), {}
    for k, i in enumerate(v["n"]):
        inner = d.items[i].get("v")
        if inner is not None and inner in opened:
            got, _ = _placed(d, inner, opened, memo)
            grown[k] = (max(sizes[k][0], got.width + 2 * PAD), HEAD + got.height + PAD)
    memo[vid] = grow(box, sizes, grown), [grown.get(k, s) for k, s in enumerate(sizes)]
    return memo[vid]


def _view(d, vid, ox, oy, opened, memo, out: list) -> None:
    v = d.views[vid]
    box, sizes = _placed(d, vid, opened, memo)
    for a, b in v["e"]:
        x1, y1 = ox + box.x[a] + sizes[a][0] / 2, oy + box.y[a] + sizes[a][1]
        x2, y2 = ox + box.x[b] + sizes[b][0] / 2, oy + box.y[b]
        c, bow = max(16.0, (y2 - y1) / 2), min(240.0, (y2 - y1) * 0.12) if y2 - y1 > 160 else 0
        out.append(f'<path class="edge" d="M{x1:.1f},{y1:.1f} C{x1 + bow:.1f},{y1 + c:.1f} '
                   f'{x2 + bow:.1f},{y2 - c:.1f} {x2:.1f},{y2:.1f}" marker-end="url(#arrow)"/>')
    for k, i in enumerate(v["n"]):
        _node(d, i, ox + box.x[k], oy + box.y[k], sizes[k], opened, memo, out)


def _node(d, i, x, y, size, opened, memo, out: list) -> None:
    item = d.items[i]
    is_open = item.get("v") in opened
    fill = "#f3f5f8" if is_open else "#ffffff" if item["k"] == "g" else \
        CATEGORY_COLOURS.get(item["cat"], OTHER_COLOUR)
    dash = ' stroke-dasharray="4 2"' if item["k"] == "g" and not is_open else ""
    if item.get("remat"):
        dash = ' stroke="#d9480f" stroke-width="2.2" stroke-dasharray="5 2"'
    tip = escape("  ".join(item["lab"]))
    out.append(f'<g transform="translate({x:.1f},{y:.1f})"><title>{tip}</title>'
               f'<rect width="{size[0]}" height="{size[1]}" rx="4" fill="{fill}" '
               f'stroke="#4a5261"{dash}/>')
    for k, line in enumerate(item["lab"][:1] if is_open else item["lab"]):
        weight = ' font-weight="600"' if k == 0 else ""
        out.append(f'<text x="{PAD}" y="{15 + 14 * k}"{weight}>{escape(line)}</text>')
    out.append("</g>")
    if is_open:
        _view(d, item["v"], x + PAD, y + HEAD, opened, memo, out)


def drawing_svg(target, group=None) -> str:
    """SVG text of a Plan's instructions or a Graph's nodes (see the module's note)."""
    if isinstance(target, Plan):
        d = build_views(plan_drawing(target), plan_output_items(target), group)
    else:
        d = build_views(graph_drawing(target), (), group)
    opened, memo = set(d.opened), {}
    top, _ = _placed(d, 0, opened, memo)
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{top.width}" '
            f'height="{top.height}" viewBox="0 0 {top.width} {top.height}" '
            'font-family="sans-serif" font-size="11">')
    out = [head, "<style>.edge{fill:none;stroke:#9aa3b2;stroke-width:1}</style>", _ARROW]
    _view(d, 0, 0.0, 0.0, opened, memo, out)
    out.append("</svg>")
    return "\n".join(out)
