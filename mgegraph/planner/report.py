"""Memory reports a user can read: text, JSON, and a picture of the arena over time.

Design: one summary dict (``memory_summary``) is built from the plan alone, and every format
renders it, so the text, the JSON and the picture never disagree. The peak is recomputed here
from the buffers' steps, independently of the planner's own lower bound; the tests compare the
two.

>>> print(plan.memory_report())
>>> save_memory_picture(plan, "memory.svg")
"""
from __future__ import annotations

import json
from html import escape

from ..ops import get_op

FORMATS = ("text", "json")
# stable colours per op category, so pictures of different plans read alike
COLOURS = {"elementwise": "#4e79a7", "reduce": "#f28e2b", "matmul": "#e15759",
           "movement": "#76b7b2", "nn": "#59a14f", "workspace": "#b07aa1", "source": "#9c755f"}


def human(nbytes: int) -> str:
    """``1536`` -> ``"1.50 KiB"``."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


def _aligned(nbytes: int, alignment: int) -> int:
    return -(-nbytes // alignment) * alignment


def _producers(plan) -> dict[int, tuple[str, str]]:
    """Arena slot -> (what wrote it, op category): an op, or "workspace of <op>"."""
    made = {}
    for ins in plan.instructions:
        category = get_op(ins.op).category
        for s in ins.outputs:
            made.setdefault(s, (ins.op, category))
        if ins.workspace is not None:
            made[ins.workspace] = (f"workspace of {ins.op}", "workspace")
    return made


def _buffers(plan) -> list[dict]:
    memory, made = plan.memory, _producers(plan)
    rows = []
    for s, (begin, end) in memory.spans.items():
        slot = plan.slots[s]
        took = memory.overwrites.get(s)
        rows.append({"slot": s, "op": made[s][0], "category": made[s][1],
                     "type": str(slot.type), "bytes": slot.nbytes,
                     "aligned_bytes": _aligned(slot.nbytes, memory.options.alignment),
                     "offset": memory.offsets[s], "begin": begin, "end": end,
                     "in_place_of": None if took is None else took[0]})
    rows.sort(key=lambda r: (-r["bytes"], r["slot"]))
    return rows


def _peak(buffers: list[dict]) -> tuple[int, int, list[dict]]:
    """(step, aligned bytes live, buffers live there, largest first). A buffer written in
    place over another shares its bytes at the handover step, so it counts from the next."""
    delta: dict[int, int] = {}
    for b in buffers:
        start = b["begin"] + (b["in_place_of"] is not None)
        if start < b["end"]:
            delta[start] = delta.get(start, 0) + b["aligned_bytes"]
            delta[b["end"]] = delta.get(b["end"], 0) - b["aligned_bytes"]
    step, best, live = 0, 0, 0
    for t in sorted(delta):
        live += delta[t]
        if live > best:
            step, best = t, live
    there = [b for b in buffers
             if b["begin"] + (b["in_place_of"] is not None) <= step < b["end"]]
    return step, best, there


def memory_summary(plan) -> dict:
    """Everything the reports show, as plain data (the JSON report is this dict)."""
    m = plan.memory
    buffers = _buffers(plan)
    step, live, there = _peak(buffers)
    persistent: dict[str, int] = {}
    for s in plan.slots:
        if s.alias is None and s.offset is None and s.role not in ("temp", "workspace"):
            persistent[s.role] = persistent.get(s.role, 0) + s.nbytes
    return {
        "arena_bytes": m.arena_bytes, "lower_bound_bytes": m.lower_bound_bytes,
        "ratio": m.arena_bytes / m.lower_bound_bytes if m.lower_bound_bytes else 1.0,
        "naive_bytes": m.naive_bytes, "inplace_saved_bytes": m.inplace_saved_bytes,
        "reuse_saved_bytes": m.reuse_saved_bytes, "persistent_bytes": m.persistent_bytes,
        "persistent_by_role": persistent, "strategy": m.strategy,
        "alignment": m.options.alignment, "schedule": m.schedule,
        "lower_bound_by_schedule": dict(m.lower_bounds), "steps": len(plan.instructions),
        "peak": {"step": step, "op": plan.instructions[step].op if there else None,
                 "bytes": live, "live": [b["slot"] for b in there]},
        "buffers": buffers,
    }


def memory_report(plan, format: str = "text", top: int = 10) -> str:
    """The plan's memory explained, as text or as JSON (``format="json"``)."""
    if format not in FORMATS:
        raise ValueError(f"memory_report format {format!r} is not one of {FORMATS}")
    summary = memory_summary(plan)
    if format == "json":
        return json.dumps(summary, indent=1)
    return "\n".join(_text(summary, top))


def _schedule_line(s: dict) -> str:
    bounds = s["lower_bound_by_schedule"]
    if s["schedule"] == "memory":
        return (f"memory-aware order (lower bound {human(bounds['memory'])}; "
                f"your order's {human(bounds['user'])})")
    if "memory" in bounds:
        return (f"your order (lower bound {human(bounds['user'])}; the memory-aware order's "
                f"{human(bounds['memory'])} is no lower)")
    return "your order (the memory-aware order is the same)"


def _text(s: dict, top: int) -> list[str]:
    roles = ", ".join(f"{role}s {human(n)}" for role, n in sorted(s["persistent_by_role"].items()))
    lines = [
        f"memory plan: arena {human(s['arena_bytes'])}, {s['ratio']:.3f}x the lower bound "
        f"{human(s['lower_bound_bytes'])} ({s['strategy']}, {s['alignment']}-byte aligned)",
        f"  naive total      {human(s['naive_bytes']):>12}  every temporary in bytes of its own",
        f"  saved in place   {human(s['inplace_saved_bytes']):>12}  outputs written over a "
        f"dying input",
        f"  saved by reuse   {human(s['reuse_saved_bytes']):>12}  buffers sharing bytes at "
        f"different steps",
        f"  persistent       {human(s['persistent_bytes']):>12}  outside the arena: {roles or '-'}",
        f"  schedule: {_schedule_line(s)}",
        f"largest buffers (of {len(s['buffers'])}):",
        f"  {'slot':>6} {'made by':<28} {'type':<20} {'bytes':>11} {'offset':>10} "
        f"{'steps':>13}  in place of",
    ]
    for b in s["buffers"][:top]:
        lines.append(_buffer_line(b))
    peak = s["peak"]
    lines.append(f"peak at step {peak['step']} ({peak['op']}): {human(peak['bytes'])} live in "
                 f"{len(peak['live'])} buffers")
    by_slot = {b["slot"]: b for b in s["buffers"]}
    for slot in peak["live"][:top]:
        lines.append(_buffer_line(by_slot[slot]))
    if len(peak["live"]) > top:
        lines.append(f"  ... and {len(peak['live']) - top} more")
    return lines


def _buffer_line(b: dict) -> str:
    steps = f"[{b['begin']}, {b['end']})"
    took = "" if b["in_place_of"] is None else f"s{b['in_place_of']}"
    return (f"  {'s' + str(b['slot']):>6} {b['op'][:28]:<28} {b['type'][:20]:<20} "
            f"{human(b['bytes']):>11} {b['offset']:>#10x} {steps:>13}  {took}").rstrip()


# -- the picture -------------------------------------------------------------------------------
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 960, 540, 90, 20, 40, 50


def _ticks(top: float, count: int = 5) -> list[float]:
    return [top * k / count for k in range(count + 1)]


def memory_svg(plan, title: str | None = None) -> str:
    """The arena over time as SVG text: steps across, byte offsets up, one rectangle per
    buffer coloured by op category, the peak step and the lower bound marked."""
    s = memory_summary(plan)
    steps, height = max(s["steps"], 1), max(s["arena_bytes"], 1)
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(step):
        return round(_LEFT + pw * step / steps, 1)

    def y(nbytes):
        return round(_TOP + ph * (1 - nbytes / height), 1)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect class="frame" x="{_LEFT}" y="{_TOP}" width="{pw}" height="{ph}" '
           f'fill="#fafafa" stroke="#888"/>',
           f'<text x="{_LEFT}" y="20" font-size="13">{escape(title or _caption(s))}</text>']
    for b in s["buffers"]:
        if b["aligned_bytes"] == 0:
            continue
        top, bottom = y(b["offset"] + b["aligned_bytes"]), y(b["offset"])
        tip = (f"s{b['slot']} {b['op']} {b['type']} {human(b['bytes'])} @+{b['offset']:#x} "
               f"steps [{b['begin']}, {b['end']})")
        out.append(f'<rect class="buffer" x="{x(b["begin"])}" y="{top}" '
                   f'width="{round(x(b["end"]) - x(b["begin"]), 1)}" '
                   f'height="{round(bottom - top, 1)}" fill="{COLOURS[b["category"]]}" '
                   f'stroke="#fff" stroke-width="0.3"><title>{escape(tip)}</title></rect>')
    out += _svg_axes(s, x, y)
    out.append("</svg>")
    return "\n".join(out)


def _caption(s: dict) -> str:
    return (f"arena {human(s['arena_bytes'])} = {s['ratio']:.3f}x lower bound "
            f"{human(s['lower_bound_bytes'])}, {s['steps']} steps, {s['strategy']}")


def _svg_axes(s, x, y) -> list[str]:
    peak, bound = s["peak"], s["lower_bound_bytes"]
    out = [f'<line class="peak" x1="{x(peak["step"] + 0.5)}" x2="{x(peak["step"] + 0.5)}" '
           f'y1="{_TOP}" y2="{_H - _BOTTOM}" stroke="#d00" stroke-dasharray="4 3"/>',
           f'<text x="{x(peak["step"] + 0.5) + 3}" y="{_TOP + 12}" fill="#d00">peak, step '
           f'{peak["step"]}: {human(peak["bytes"])}</text>',
           f'<line class="bound" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{y(bound)}" '
           f'y2="{y(bound)}" stroke="#333" stroke-dasharray="2 2"/>',
           f'<text x="{_W - _RIGHT - 150}" y="{y(bound) - 3}">lower bound {human(bound)}</text>',
           f'<text x="{_LEFT + (_W - _LEFT - _RIGHT) // 2 - 20}" y="{_H - 12}">step</text>',
           f'<text x="14" y="{_TOP + 10}">offset</text>']
    for value in _ticks(max(s["steps"], 1)):
        out.append(f'<text x="{x(value)}" y="{_H - _BOTTOM + 15}" text-anchor="middle">'
                   f'{int(value)}</text>')
    for value in _ticks(max(s["arena_bytes"], 1)):
        out.append(f'<text x="{_LEFT - 5}" y="{y(value) + 4}" text-anchor="end">'
                   f'{human(int(value))}</text>')
    return out


def save_memory_picture(plan, path, title: str | None = None) -> None:
    """Write the arena picture to ``path``: ``.svg`` needs nothing else, ``.png`` needs
    matplotlib.

    >>> save_memory_picture(step.plan, "memory.svg")
    """
    path = str(path)
    if path.endswith(".svg"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(memory_svg(plan, title))
    elif path.endswith(".png"):
        _save_png(plan, path, title)
    else:
        raise ValueError(f"save_memory_picture writes .svg or .png files, not {path!r}")


def _save_png(plan, path: str, title) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError("a .png memory picture needs matplotlib (pip install matplotlib); "
                          "a .svg one needs nothing") from None
    s = memory_summary(plan)
    fig, ax = plt.subplots(figsize=(10, 5.6))
    for b in s["buffers"]:
        if b["aligned_bytes"]:
            ax.add_patch(Rectangle((b["begin"], b["offset"]), b["end"] - b["begin"],
                                   b["aligned_bytes"], facecolor=COLOURS[b["category"]],
                                   edgecolor="white", linewidth=0.3))
    ax.axvline(s["peak"]["step"] + 0.5, color="#d00", linestyle="--")
    ax.axhline(s["lower_bound_bytes"], color="#333", linestyle=":")
    ax.set(xlim=(0, max(s["steps"], 1)), ylim=(0, max(s["arena_bytes"], 1)),
           xlabel="step", ylabel="offset (bytes)", title=title or _caption(s))
    fig.savefig(path, dpi=120)
    plt.close(fig)
