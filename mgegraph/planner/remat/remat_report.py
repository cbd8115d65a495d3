"""The remat report: what rematerialisation kept and recomputed, what it saved and what it cost.

Design: like the memory report, one summary dict is built and every format renders it. Every
byte figure is a planned arena (workspaces included), never an estimate; the curve replans the
same candidates under a few budgets.

>>> plan = mg.compile([loss], remat="auto"); print(plan.remat_report())
>>> mg.planner.save_remat_picture(plan, "remat.svg")   # the arena without and with remat
"""
from __future__ import annotations

import json

from ..memory.report import human, memory_svg
from .remat_search import smallest_peak, within_budget

FORMATS = ("text", "json")
CURVE_FRACTIONS = (1.0, 0.75, 0.5, 0.35, 0.25, 0.15)  # budgets, as fractions of the plain arena


class RematReport:
    """Kept by ``Plan.remat``: the split, the candidates and their plans."""

    def __init__(self, split, judge, pool, chosen, options, base_flops, plan_of):
        self.split, self.judge, self.pool, self.chosen = split, judge, pool, chosen
        self.options, self.base_flops, self.plan_of = options, base_flops, plan_of
        self._curve = None

    def percent(self, flops: float) -> float:
        return 100.0 * flops / self.base_flops if self.base_flops else 0.0

    def baseline_plan(self):
        """The plan of the same graph without rematerialisation."""
        return self.plan_of(self.pool[0])

    def curve(self) -> list[dict]:
        """Peak against extra compute: for a few budgets, the least recomputation that fits,
        and the smallest peak any candidate reaches."""
        if self._curve is None:
            plain = self.judge.arena(self.pool[0])
            points = {}
            for fraction in CURVE_FRACTIONS:
                c = within_budget(self.judge, self.pool, int(plain * fraction))
                if c is not None:
                    points.setdefault((c.kept, c.mirror), (fraction, c))
            least = smallest_peak(self.judge, self.pool)
            points.setdefault((least.kept, least.mirror), (None, least))
            self._curve = [{"budget_fraction": f, "candidate": c.name,
                            "arena_bytes": self.judge.arena(c),
                            "extra_flops_percent": round(self.percent(c.extra_flops), 3)}
                           for f, c in points.values()]
        return self._curve

    def _values(self, kept: bool) -> list[dict]:
        chosen = self.chosen.kept | self.split.always_kept
        rows = [{"value": f"%{v.id}", "op": v.node.op.name, "type": str(v.type),
                 "bytes": v.type.nbytes}
                for rid, v in self.split.crossing.items() if (rid in chosen) == kept]
        return sorted(rows, key=lambda r: (-r["bytes"], int(r["value"][1:])))

    def recomputed_steps(self, plan) -> frozenset[int]:
        """Steps of ``plan`` (the plan this report was made for) that recompute a forward
        value: the clones lowering ordered behind the step before them (``Lowered.after``), in
        the chosen candidate's schedule. Empty when ``plan`` is not the chosen candidate's."""
        judged = self.judge(self.chosen)
        clones = {j for _, j in judged.lowered.after}
        order = judged.scheduled.order
        if [judged.lowered.instructions[j] for j in order] != list(plan.instructions):
            return frozenset()
        return frozenset(k for k, j in enumerate(order) if j in clones)

    def brief(self) -> dict:
        """The chosen candidate, the arena without remat and the extra FLOPs (the memory
        report's remat line)."""
        return {"candidate": self.chosen.name,
                "arena_bytes_without_remat": self.judge.arena(self.pool[0]),
                "extra_flops_percent": round(self.percent(self.chosen.extra_flops), 3)}

    def summary(self) -> dict:
        brief, arena = self.brief(), self.judge.arena(self.chosen)
        plain = brief["arena_bytes_without_remat"]
        judged = self.judge(self.chosen)
        return {
            **brief,
            "mode": self.options.mode, "overhead_bound": self.options.overhead,
            "candidates": len(self.pool), "arena_bytes": arena,
            "bytes_saved": plain - arena, "peak_ratio": plain / arena if arena else 1.0,
            "base_flops": self.base_flops, "extra_flops": self.chosen.extra_flops,
            "kept": self._values(True), "recomputed": self._values(False),
            "recomputed_nodes": len(judged.remat.clones),
            "recomputations": [{"before": user.op.name, "nodes": len(nodes)}
                               for user, nodes in judged.remat.groups],
            "curve": self.curve(),
        }

    def render(self, format: str = "text"):
        if format not in FORMATS:
            raise ValueError(f"remat_report format {format!r} is not one of {FORMATS}")
        s = self.summary()
        return json.dumps(s, indent=1) if format == "json" else "\n".join(_text(s))


def _text(s: dict) -> list[str]:
    mode = s["mode"] if isinstance(s["mode"], str) else f"budget {human(s['mode'])}"
    if s["mode"] == "auto":
        mode += f", at most {s['overhead_bound']:.0%} extra FLOPs"
    kept_bytes = sum(r["bytes"] for r in s["kept"])
    redo_bytes = sum(r["bytes"] for r in s["recomputed"])
    lines = [
        f"remat ({mode}): {s['candidate']}, chosen from {s['candidates']} candidates",
        (f"  arena          {human(s['arena_bytes']):>12}  without remat "
         f"{human(s['arena_bytes_without_remat'])} ({s['peak_ratio']:.2f}x smaller)"),
        f"  bytes saved    {human(s['bytes_saved']):>12}",
        (f"  extra compute  {s['extra_flops_percent']:>11.1f}%  {s['extra_flops']:.3g} of "
         f"{s['base_flops']:.3g} FLOPs, {s['recomputed_nodes']} nodes recomputed in "
         f"{len(s['recomputations'])} groups"),
        f"  kept           {len(s['kept']):>5} activations, {human(kept_bytes)}",
        f"  recomputed     {len(s['recomputed']):>5} activations, {human(redo_bytes)}",
    ]
    for title, rows in (("kept", s["kept"]), ("recomputed", s["recomputed"])):
        shown = ", ".join(f"{r['value']} {r['op']} {r['type']}" for r in rows[:8])
        more = f" ... and {len(rows) - 8} more" if len(rows) > 8 else ""
        lines.append(f"  {title}: {shown or '-'}{more}")
    lines.append("peak against extra compute (least recomputation under each budget):")
    lines.append(f"  {'budget':>12} {'arena':>12} {'extra':>8}  candidate")
    for p in s["curve"]:
        budget = "smallest" if p["budget_fraction"] is None else \
            f"{p['budget_fraction']:.0%} plain"
        lines.append(f"  {budget:>12} {human(p['arena_bytes']):>12} "
                     f"{p['extra_flops_percent']:>7.1f}%  {p['candidate']}")
    return lines


def remat_svg(plan) -> str:
    """The arena without rematerialisation (top) and with it (bottom), on one byte scale.

    >>> open("remat.svg", "w").write(remat_svg(plan))
    """
    if plan.remat is None:
        raise ValueError("the plan was compiled without remat=")
    plain = plan.remat.baseline_plan()
    top = max(plain.arena_bytes, plan.arena_bytes, 1)
    upper = memory_svg(plain, "without remat: " + _caption(plain), scale_bytes=top)
    lower = memory_svg(plan, "with remat: " + _caption(plan), scale_bytes=top)
    height = int(upper.split('height="', 1)[1].split('"', 1)[0])
    width = int(upper.split('width="', 1)[1].split('"', 1)[0])
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{2 * height}">',
        upper.replace("<svg ", '<svg x="0" y="0" ', 1),
        lower.replace("<svg ", f'<svg x="0" y="{height}" ', 1), "</svg>"])


def _caption(plan) -> str:
    return f"arena {human(plan.arena_bytes)}, {len(plan.instructions)} steps"


def save_remat_picture(plan, path) -> None:
    """Write ``remat_svg(plan)`` to ``path`` (an .svg file)."""
    path = str(path)
    if not path.endswith(".svg"):
        raise ValueError(f"save_remat_picture writes .svg files, not {path!r}")
    with open(path, "w", encoding="utf-8") as f:
        f.write(remat_svg(plan))
