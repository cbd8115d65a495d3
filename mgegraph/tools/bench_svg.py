"""A bar chart of the benchmark table as one self-contained SVG (no matplotlib).

One block per workload, case and thread count; one bar per measured implementation, its length
the median on the block's own linear scale (a block's bars compare; blocks do not). A green
dashed line marks the physical limit, an orange one PyTorch eager.

>>> Path("bench.svg").write_text(render_svg(rows, "mgegraph bench"))
"""
from __future__ import annotations

from mgegraph.tools.bench_table import BASELINE, Row, fmt_time, labels, sort_rows
from mgegraph.tools.svg import escape

WIDTH, LABEL_X, BAR_X, BAR_W = 960, 330, 340, 470
ROW_H, HEAD_H, GAP = 16, 20, 10
COLOURS = {"limit": "#4a9d5b", "mgegraph": "#3b6fb6", "peer": "#9a9a9a"}


def _colour(row: Row) -> str:
    if row.is_limit:
        return COLOURS["limit"]
    return COLOURS["mgegraph" if row.implementation.startswith("mgegraph") else "peer"]


def _text(x: float, y: float, text: str, **attrs) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in attrs.items())
    return f'<text x="{x:.1f}" y="{y:.1f}"{extra}>{escape(text)}</text>'


def _marker(x: float, top: float, bottom: float, colour: str) -> str:
    return (f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" '
            f'stroke="{colour}" stroke-dasharray="4 3"/>')


def _block(members: list[Row], y: float) -> tuple[list[str], float]:
    """The SVG elements of one group starting at height ``y``, and the height after it."""
    first = members[0]
    threads = f"{first.threads} thread{'' if first.threads == 1 else 's'}"
    parts = [_text(8, y + 14, f"{first.workload} · {first.case} · {threads}", font_weight="bold")]
    y += HEAD_H
    measured = [r for r in members if r.median_s is not None]
    scale = BAR_W / max([r.median_s for r in measured] + [r.limit_s or 0 for r in measured])
    top, names = y, dict(zip(map(id, members), labels(members)))
    for row in measured:
        w = max(row.median_s * scale, 1.0)
        bar = (f'<rect x="{BAR_X}" y="{y + 2:.1f}" width="{w:.1f}" height="{ROW_H - 4}" '
               f'fill="{_colour(row)}"><title>{escape(fmt_time(row.median_s))}</title></rect>')
        parts += [_text(LABEL_X, y + 12, names[id(row)], text_anchor="end"), bar,
                  _text(BAR_X + w + 4, y + 12, fmt_time(row.median_s))]
        y += ROW_H
    limit = next((r.limit_s for r in measured if r.limit_s), None)
    torch = next((r.median_s for r in measured if r.implementation == BASELINE), None)
    for value, colour in ((limit, COLOURS["limit"]), (torch, "#d9822b")):
        if value:
            parts.append(_marker(BAR_X + value * scale, top, y, colour))
    for row in (r for r in members if r.median_s is None):
        parts.append(_text(LABEL_X, y + 12, f"{names[id(row)]}: {row.note}",
                           text_anchor="end", fill="#888"))
        y += ROW_H
    return parts, y + GAP


def render_svg(rows: list[Row], title: str = "") -> str:
    """The table's rows as an SVG document (a string)."""
    groups: dict[tuple, list[Row]] = {}
    for row in sort_rows(rows):
        groups.setdefault(row.group, []).append(row)
    parts, y = [_text(8, 18, title or "mgegraph bench", font_weight="bold")], 30.0
    for members in groups.values():
        if any(r.median_s is not None for r in members):
            block, y = _block(members, y)
            parts += block
    legend = ("blue: mgegraph; grey: peers; green: the limit measurement, dashed green: the "
              "limit; dashed orange: PyTorch eager")
    parts.append(_text(8, y + 12, legend, fill="#555"))
    height = y + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif" font-size="11">\n'
            + "\n".join(parts) + "\n</svg>\n")
