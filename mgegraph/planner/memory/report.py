"""Memory reports a user can read: text, JSON, and a picture of the arena over time.

Design: one summary dict (``memory_summary``) is built from the plan alone, and every format
renders it, so the text, the JSON and the picture never disagree. The peak is recomputed here
from the buffers' steps, independently of the planner's own lower bound; the tests compare the
two.

>>> print(plan.memory_report())
>>> save_memory_picture(plan, "memory.svg")
"""
from __future__ import annotations

import dataclasses
import json
import math

from ...ir.printer import CATEGORY_COLOURS, OTHER_COLOUR
from ...ir.printer import xml_text as escape
from ...ops import get_op
from .arena_check import aligned
from .liveness import is_arena_buffer

FORMATS = ("text", "json")
ROLES = ("input", "param", "const", "output")
# the op categories' colours (one table for every picture), and kernel workspaces, which no op
# category describes, in a colour of their own
COLOURS = {**CATEGORY_COLOURS, "workspace": "#b07aa1"}
UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def human(nbytes: int) -> str:
    """``1536`` -> ``"1.50 KiB"``; below 1 KiB exact bytes, ``"64 B"``."""
    for unit, size in UNITS[:-1]:
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"



# -- the summary -------------------------------------------------------------------------------
def _producers(plan) -> dict[int, tuple[str, str]]:
    """Arena slot -> (what wrote it, op category): an op, or "workspace of <op>"."""
    made = {}
    for ins in plan.instructions:
        category = get_op(ins.op).category
        for s in ins.outputs:
            made.setdefault(s, (ins.op, category))
            if plan.slots[s].alias is not None:  # kernels write views only into a bucket
                made.setdefault(plan.slots[s].alias, ("gradient bucket", "collective"))
        if ins.workspace is not None:
            made[ins.workspace] = (f"workspace of {ins.op}", "workspace")
    return made


def _buffers(plan) -> list[dict]:
    """Every arena buffer, largest first (ties by slot)."""
    memory, made = plan.memory, _producers(plan)
    rows = []
    for s, (begin, end) in memory.spans.items():
        slot = plan.slots[s]
        took = memory.overwrites.get(s)
        rows.append({"slot": s, "op": made[s][0], "category": made[s][1],
                     "type": str(slot.type), "bytes": slot.nbytes,
                     "aligned_bytes": aligned(slot.nbytes, memory.options.alignment),
                     "offset": memory.offsets[s], "begin": begin, "end": end,
                     "in_place_of": None if took is None else took[0]})
    rows.sort(key=lambda r: (-r["bytes"], r["slot"]))
    return rows


def _counted_from(b: dict) -> int:
    # A buffer written in place over another shares its bytes at the handover step, so its
    # own bytes count from the next step on (the planner's lower bound counts them so too).
    return b["begin"] + (b["in_place_of"] is not None)


def _peak(buffers: list[dict]) -> tuple[int, int, list[dict]]:
    """(step, aligned bytes live, buffers live there, largest first): the first step with the
    most bytes live."""
    delta: dict[int, int] = {}
    for b in buffers:
        if _counted_from(b) < b["end"]:
            delta[_counted_from(b)] = delta.get(_counted_from(b), 0) + b["aligned_bytes"]
            delta[b["end"]] = delta.get(b["end"], 0) - b["aligned_bytes"]
    step, best, live = 0, 0, 0
    for t in sorted(delta):
        live += delta[t]
        if live > best:
            step, best = t, live
    there = [b for b in buffers if _counted_from(b) <= step < b["end"]]
    return step, best, there


def _persistent_by_role(plan) -> dict[str, int]:
    found = {}
    for s in plan.slots:
        if s.alias is None and not is_arena_buffer(s):
            found[s.role] = found.get(s.role, 0) + s.nbytes
    return {role: found[role] for role in (*ROLES, *sorted(set(found) - set(ROLES)))
            if role in found}


def memory_summary(plan) -> dict:
    """Everything the reports show, as plain data with exact integers (the JSON report).

    >>> memory_summary(plan)["peak"]["bytes"] == plan.lower_bound_bytes
    True
    """
    m = plan.memory
    buffers = _buffers(plan)
    step, live, there = _peak(buffers)
    return {
        "arena_bytes": m.arena_bytes, "lower_bound_bytes": m.lower_bound_bytes,
        "ratio": m.arena_bytes / m.lower_bound_bytes if m.lower_bound_bytes else 1.0,
        "naive_bytes": m.naive_bytes, "inplace_saved_bytes": m.inplace_saved_bytes,
        "reuse_saved_bytes": m.reuse_saved_bytes, "persistent_bytes": m.persistent_bytes,
        "persistent_by_role": _persistent_by_role(plan), "strategy": m.strategy,
        "options": dataclasses.asdict(m.options), "schedule": m.schedule,
        "lower_bound_by_schedule": dict(m.lower_bounds), "steps": len(plan.instructions),
        "peak": {"step": step, "op": plan.instructions[step].op if there else None,
                 "bytes": live, "live": [b["slot"] for b in there]},
        "buffers": buffers,
        "remat": _remat_line(plan),
        "buckets": _buckets(plan),
    }


def _buckets(plan) -> list[dict]:
    """Each gradient bucket (planner/memory/buckets.py): its slot, values, bytes, and the
    steps its all-reduce is sent (the start) and awaited (the wait)."""
    found: dict[int, dict] = {}
    for step, ins in enumerate(plan.instructions):
        if ins.op not in ("all_reduce_start", "all_reduce_wait"):
            continue
        values = ins.inputs if ins.op == "all_reduce_start" else ins.outputs
        root = plan.slots[values[0]].alias
        entry = found.setdefault(dict(ins.attrs)["bucket"], {
            "bucket": dict(ins.attrs)["bucket"], "slot": root, "values": len(values),
            "bytes": plan.slots[root].nbytes, "group": dict(ins.attrs)["group"]})
        entry["sent" if ins.op == "all_reduce_start" else "awaited"] = step
    return sorted(found.values(), key=lambda b: b["sent"])


def _remat_line(plan) -> dict | None:
    """What rematerialisation did, in short (``plan.remat_report()`` has the rest)."""
    return None if plan.remat is None else plan.remat.brief()


# -- the text report ---------------------------------------------------------------------------
def memory_report(plan, format: str = "text", top: int = 10) -> str:
    """The plan's memory explained, as text or as JSON (``format="json"``), with the ``top``
    largest buffers and the ``top`` largest of those live at the peak.

    >>> print(mg.compile([y]).memory_report(top=5))
    """
    if format not in FORMATS:
        raise ValueError(f"memory_report format {format!r} is not one of {FORMATS}")
    if top < 0:
        raise ValueError(f"memory_report top must be >= 0, got {top}")
    summary = memory_summary(plan)
    if format == "json":
        return json.dumps(summary, indent=1)
    return "\n".join(_text(summary, top))


def _schedule_line(s: dict) -> str:
    bounds, options = s["lower_bound_by_schedule"], s["options"]
    if s["schedule"] == "memory":
        return (f"memory-aware order (lower bound {human(bounds['memory'])}; "
                f"your order's {human(bounds['user'])})")
    if "memory" in bounds:
        return (f"your order (lower bound {human(bounds['user'])}; the memory-aware order's "
                f"{human(bounds['memory'])} is no lower)")
    if options["schedule"] == "user" or options["strategy"] == "none":
        return "your order (the memory-aware order was not tried)"
    return "your order (the memory-aware order is the same)"


def _head(s: dict) -> list[str]:
    roles = ", ".join(f"{role}s {human(n)}" for role, n in s["persistent_by_role"].items())
    return [
        f"memory plan: arena {human(s['arena_bytes'])}, {s['ratio']:.3f}x the lower bound "
        f"{human(s['lower_bound_bytes'])} ({s['strategy']}, {s['options']['alignment']}-byte "
        f"aligned, {s['steps']} steps)",
        f"  naive total      {human(s['naive_bytes']):>12}  every temporary in bytes of its own",
        f"  saved in place   {human(s['inplace_saved_bytes']):>12}  outputs written over a "
        f"dying input",
        f"  saved by reuse   {human(s['reuse_saved_bytes']):>12}  buffers sharing bytes at "
        f"different steps",
        f"  persistent       {human(s['persistent_bytes']):>12}  outside the arena: {roles or '-'}",
        f"  schedule: {_schedule_line(s)}",
    ] + _remat_text(s["remat"])


def _remat_text(r: dict | None) -> list[str]:
    if r is None:
        return []
    return [(f"  remat: {r['candidate']}, {r['extra_flops_percent']:.1f}% extra FLOPs; arena "
             f"without remat {human(r['arena_bytes_without_remat'])} (plan.remat_report())")]


def _text(s: dict, top: int) -> list[str]:
    lines = _head(s)
    if not s["buffers"]:
        return lines + ["no arena buffers: every value is an input, parameter, constant, "
                        "output or view"]
    by_slot = {b["slot"]: b for b in s["buffers"]}
    peak = s["peak"]
    shown = s["buffers"][:top] + [by_slot[slot] for slot in peak["live"][:top]]
    row = _row_format(shown)
    lines += [f"largest buffers (of {len(s['buffers'])}):",
              row(("slot", "made by", "type", "bytes", "offset", "steps", "in place of"))]
    lines += [row(_cells(b)) for b in s["buffers"][:top]]
    lines.append(f"peak at step {peak['step']} ({peak['op']}): {human(peak['bytes'])} live in "
                 f"{len(peak['live'])} buffers")
    lines += [row(_cells(by_slot[slot])) for slot in peak["live"][:top]]
    if len(peak["live"]) > top:
        lines.append(f"  ... and {len(peak['live']) - top} more")
    if s["buckets"]:
        lines.append(f"gradient buckets ({len(s['buckets'])}): all-reduced in place, live "
                     "until their wait")
        lines += [f"  bucket{b['bucket']} s{b['slot']}: {b['values']} values, "
                  f"{human(b['bytes'])}, group [{b['group']}], sent at step {b['sent']}, "
                  f"awaited at step {b['awaited']}" for b in s["buckets"]]
    return lines


def _cells(b: dict) -> tuple[str, ...]:
    took = "" if b["in_place_of"] is None else f"s{b['in_place_of']}"
    return (f"s{b['slot']}", b["op"], b["type"], human(b["bytes"]), f"{b['offset']:#x}",
            f"[{b['begin']}, {b['end']})", took)


def _row_format(buffers: list[dict]):
    """A formatter of table rows, the name columns as wide as their longest entry shown."""
    op_w = max([len("made by")] + [len(b["op"]) for b in buffers])
    type_w = max([len("type")] + [len(b["type"]) for b in buffers])

    def row(c):
        return (f"  {c[0]:>6} {c[1]:<{op_w}} {c[2]:<{type_w}} {c[3]:>11} {c[4]:>10} "
                f"{c[5]:>13}  {c[6]}").rstrip()
    return row


# -- the picture -------------------------------------------------------------------------------
_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 960, 560, 80, 20, 44, 70
_HEADROOM = 1.05  # the y axis goes a little past the arena so that its line shows


def _colour(category: str) -> str:
    return COLOURS.get(category, OTHER_COLOUR)


def _nice(raw: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``raw``."""
    magnitude = 10.0 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw * (1 - 1e-9))


def _step_ticks(steps: int) -> list[tuple[float, str]]:
    every = max(1, int(_nice(steps / 6)))
    return [(k, str(k)) for k in range(0, steps + 1, every)]


def _byte_ticks(top: float) -> list[tuple[float, str]]:
    """Ticks up to ``top`` bytes, labelled in the one unit that suits ``top``."""
    unit, size = next((u, n) for u, n in UNITS if top >= n or n == 1)
    every = max(_nice(top / size / 6), 1 if size == 1 else 0)
    count = int(top / size / every + 1e-9)
    return [(k * every * size, f"{round(k * every, 6):g} {unit}") for k in range(count + 1)]


@dataclasses.dataclass(frozen=True)
class _Canvas:
    """Plot coordinates: steps across, byte offsets up (SVG y grows downwards)."""

    steps: int
    top: float

    def x(self, step: float) -> float:
        return round(_LEFT + (_W - _LEFT - _RIGHT) * step / self.steps, 1)

    def y(self, nbytes: float) -> float:
        return round(_H - _BOTTOM - (_H - _TOP - _BOTTOM) * nbytes / self.top, 1)


def memory_svg(plan, title: str | None = None, scale_bytes: int | None = None) -> str:
    """The arena over time as SVG text: steps across, byte offsets up, one rectangle per
    buffer coloured by op category (tooltip: slot, op, type, bytes, steps), the peak step, the
    arena size and the lower bound marked. ``scale_bytes`` sets the top of the byte axis (to
    draw two plans on one scale; the default is this plan's arena).

    >>> open("memory.svg", "w").write(memory_svg(plan, "forward"))
    """
    s = memory_summary(plan)
    c = _Canvas(max(s["steps"], 1), max(scale_bytes or s["arena_bytes"], 1) * _HEADROOM)
    # NOTE: strokes sit in one style rule, not on each of maybe 10k rectangles; on narrow
    # steps they would hide the fill, so they thin out with the width of a step.
    stroke = round(min(0.5, (c.x(1) - c.x(0)) / 4), 2)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" '
           f'viewBox="0 0 {_W} {_H}" font-family="sans-serif" font-size="11">',
           f"<style>.buffer{{stroke:#fff;stroke-width:{stroke if stroke >= 0.05 else 0}}}"
           f"</style>",
           f'<rect class="frame" x="{_LEFT}" y="{_TOP}" width="{_W - _LEFT - _RIGHT}" '
           f'height="{_H - _TOP - _BOTTOM}" fill="#fafafa" stroke="#888"/>',
           f'<text x="{_LEFT}" y="22" font-size="13">{escape(title or _caption(s))}</text>']
    out += [_svg_rect(b, c) for b in s["buffers"] if b["aligned_bytes"]]
    out += _svg_marks(s, c) + _svg_axes(c) + _svg_legend(s["buffers"])
    out.append("</svg>")
    return "\n".join(out)


def _svg_rect(b: dict, c: _Canvas) -> str:
    tip = (f"s{b['slot']} {b['op']} {b['type']} {human(b['bytes'])} @+{b['offset']:#x} "
           f"steps [{b['begin']}, {b['end']})")
    if b["in_place_of"] is not None:
        tip += f" in place of s{b['in_place_of']}"
    x0, x1 = c.x(b["begin"]), c.x(b["end"])
    y0, y1 = c.y(b["offset"] + b["aligned_bytes"]), c.y(b["offset"])
    # data-slot: the HTML viewer (mgegraph/tools/html.py) links a buffer to its instruction
    return (f'<rect class="buffer" data-slot="{b["slot"]}" x="{x0}" y="{y0}" '
            f'width="{round(x1 - x0, 1)}" '
            f'height="{round(y1 - y0, 1)}" fill="{_colour(b["category"])}">'
            f"<title>{escape(tip)}</title></rect>")


def _caption(s: dict) -> str:
    return (f"arena {human(s['arena_bytes'])} = {s['ratio']:.3f}x lower bound "
            f"{human(s['lower_bound_bytes'])}, {s['steps']} steps, {s['strategy']}")


def _svg_marks(s: dict, c: _Canvas) -> list[str]:
    """The peak step (a vertical line) and the arena and lower bound (horizontal lines)."""
    peak, arena, bound = s["peak"], s["arena_bytes"], s["lower_bound_bytes"]
    px = c.x(peak["step"] + 0.5)
    # the label goes on the side of the line with more room, so it is never cut off
    anchor, lx = ("end", px - 3) if px > _W / 2 else ("start", px + 3)
    return [f'<line class="peak" x1="{px}" x2="{px}" y1="{_TOP}" y2="{_H - _BOTTOM}" '
            f'stroke="#d00" stroke-dasharray="4 3"/>',
            f'<text x="{round(lx, 1)}" y="{_TOP - 5}" fill="#d00" text-anchor="{anchor}">'
            f'peak at step {peak["step"]} ({escape(str(peak["op"]))}): '
            f'{human(peak["bytes"])}</text>',
            f'<line class="arena" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{c.y(arena)}" '
            f'y2="{c.y(arena)}" stroke="#333"/>',
            f'<text x="{_LEFT + 4}" y="{c.y(arena) - 3}">arena {human(arena)}</text>',
            f'<line class="bound" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{c.y(bound)}" '
            f'y2="{c.y(bound)}" stroke="#333" stroke-dasharray="2 2"/>',
            f'<text x="{_W - _RIGHT - 4}" y="{c.y(bound) - 3}" text-anchor="end">'
            f"lower bound {human(bound)}</text>"]


def _svg_axes(c: _Canvas) -> list[str]:
    base, mid = _H - _BOTTOM, (_TOP + _H - _BOTTOM) / 2
    out = [f'<text x="{(_LEFT + _W - _RIGHT) / 2}" y="{base + 32}" text-anchor="middle">'
           f"step</text>",
           f'<text x="16" y="{mid}" text-anchor="middle" transform="rotate(-90 16 {mid})">'
           f"byte offset</text>"]
    for value, label in _step_ticks(c.steps):
        out.append(f'<line class="tick" x1="{c.x(value)}" x2="{c.x(value)}" y1="{base}" '
                   f'y2="{base + 4}" stroke="#888"/><text x="{c.x(value)}" y="{base + 16}" '
                   f'text-anchor="middle">{label}</text>')
    for value, label in _byte_ticks(c.top):
        out.append(f'<line class="tick" x1="{_LEFT - 4}" x2="{_LEFT}" y1="{c.y(value)}" '
                   f'y2="{c.y(value)}" stroke="#888"/><text x="{_LEFT - 6}" '
                   f'y="{c.y(value) + 4}" text-anchor="end">{label}</text>')
    return out


def _categories(buffers: list[dict]) -> list[str]:
    present = {b["category"] for b in buffers if b["aligned_bytes"]}
    return [k for k in COLOURS if k in present] + sorted(present - set(COLOURS))


def _svg_legend(buffers: list[dict]) -> list[str]:
    out, x = [], _LEFT
    for name in _categories(buffers):
        out.append(f'<rect class="legend" x="{x}" y="{_H - 20}" width="10" height="10" '
                   f'fill="{_colour(name)}"/><text x="{x + 14}" y="{_H - 11}">{name}</text>')
        x += 30 + 7 * len(name)
    return out


def save_memory_picture(plan, path, title: str | None = None) -> None:
    """Write the arena picture to ``path``: ``.svg`` needs nothing else, ``.png`` needs
    matplotlib.

    >>> save_memory_picture(step.plan, "memory.svg", title="train step")
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
        import matplotlib  # lazy: optional dependency (matplotlib), for .png pictures only
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # lazy: optional dependency (matplotlib)
        from matplotlib.patches import Patch, Rectangle  # lazy: optional dependency (matplotlib)
    except ImportError:
        raise ImportError("a .png memory picture needs matplotlib (pip install matplotlib); "
                          "save to a .svg path instead, which needs nothing") from None
    s = memory_summary(plan)
    steps, top = max(s["steps"], 1), max(s["arena_bytes"], 1) * _HEADROOM
    fig, ax = plt.subplots(figsize=(10, 5.8))
    for b in s["buffers"]:
        if b["aligned_bytes"]:
            ax.add_patch(Rectangle((b["begin"], b["offset"]), b["end"] - b["begin"],
                                   b["aligned_bytes"], facecolor=_colour(b["category"]),
                                   edgecolor="white", linewidth=0.3))
    ax.axvline(s["peak"]["step"] + 0.5, color="#d00", linestyle="--",
               label=f"peak at step {s['peak']['step']}: {human(s['peak']['bytes'])}")
    ax.axhline(s["arena_bytes"], color="#333", label=f"arena {human(s['arena_bytes'])}")
    ax.axhline(s["lower_bound_bytes"], color="#333", linestyle=":",
               label=f"lower bound {human(s['lower_bound_bytes'])}")
    handles = ax.get_legend_handles_labels()[0]
    handles += [Patch(color=_colour(k), label=k) for k in _categories(s["buffers"])]
    ticks = _byte_ticks(top)
    ax.set_yticks([v for v, _ in ticks], [label for _, label in ticks])
    ax.set(xlim=(0, steps), ylim=(0, top), xlabel="step", ylabel="byte offset",
           title=title or _caption(s))
    ax.legend(handles=handles, loc="upper left", fontsize=8, framealpha=0.9)
    fig.savefig(path, dpi=120)
    plt.close(fig)
