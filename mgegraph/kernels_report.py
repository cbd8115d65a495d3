"""``plan.kernels_report()``: which way each instruction's kernel takes and why (the backend's
rules, a measurement now, or one stored for this machine: ``compile(tune=...)``), with the time
of one call and of the runner-up where measured."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class KernelRow:
    index: int            # the instruction's position in the plan
    op: str
    inputs: str           # the input types, "f32[1, 64, 56, 56], f32[64, 64, 3, 3]"
    path: str
    how: str              # "rules", "measured", "cached" or "deterministic"
    seconds: float | None
    runner_up: str | None
    runner_up_seconds: float | None
    location: str


class KernelsReport:
    """The rows of the instructions whose kernel has several ways; ``str()`` is a table,
    ``to_dict()`` plain data."""

    def __init__(self, plan):
        self.rows = [KernelRow(i, ins.op, ", ".join(str(plan.slots[s].type) for s in ins.inputs),
                               ins.choice.path, ins.choice.how, ins.choice.seconds,
                               ins.choice.runner_up, ins.choice.runner_up_seconds, ins.location)
                     for i, ins in enumerate(plan.instructions) if ins.choice is not None]

    def to_dict(self) -> dict:
        return {"instructions": [asdict(r) for r in self.rows]}

    def __str__(self) -> str:
        if not self.rows:
            return "kernels: no instruction has a choice of way"
        counts = {how: sum(r.how == how for r in self.rows) for how in ("measured", "cached",
                                                                         "rules")}
        lines = [f"kernels: {len(self.rows)} instructions with a choice of way ("
                 + ", ".join(f"{n} {how}" for how, n in counts.items() if n) + ")",
                 (f"{'#':>4} {'op':22} {'way':28} {'how':8} {'us':>9} {'runner-up':28} "
                  f"{'us':>9}  inputs")]
        for r in self.rows:
            lines.append(f"{r.index:>4} {r.op:22} {r.path:28} {r.how:8} {_us(r.seconds):>9} "
                         f"{r.runner_up or '-':28} {_us(r.runner_up_seconds):>9}  {r.inputs}")
        return "\n".join(lines)

    __repr__ = __str__


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"
