"""The benchmark table: rows built from what pytest-benchmark measured, rendered as text and JSON.

``benchmarks/conftest.py`` (at the end of ``python -m pytest benchmarks --benchmark-only``) and
``mgegraph bench`` (from the ``--benchmark-json`` file of each run) both call ``rows_from_runs``
on pytest-benchmark's own dicts, so the table shows the medians pytest-benchmark measured and
nothing timed a second time.

A benchmark becomes a row when its ``extra_info`` carries the tags that the conftest's ``tag``
fixture sets: ``workload`` (a name of shared/BENCHMARKS.md), ``case`` (shape or batch),
``implementation``, ``threads``; optionally ``role="limit"`` with ``limit_scale`` and
``limit_what`` (the workload's physical limit is this median times the scale), ``arena_bytes``,
``peak_bytes`` with ``peak_kind``, and ``ops`` (op-overhead's chain length, for us per op).
The conftest adds the tagged benchmarks that were skipped (a peer not installed) to the JSON
under ``"skipped"``; they become rows with the reason as their note.

>>> rows = rows_from_runs([json.load(open("bench.json"))])
>>> print(render(rows))
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass

from ..planner.memory.report import human

# The workloads of shared/BENCHMARKS.md that have timed benchmarks, in the table's order
# (planner-suite has none: benchmarks/test_planner.py prints its own tables).
WORKLOADS = ("mlp-train", "mlp-infer", "deep-mlp-remat", "op-overhead", "fusion-chain",
             "convnet-train", "resnet-infer")
BASELINE = "torch eager"
TABLE_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One implementation of one workload case at one thread count. Times are seconds; a
    skipped row has no median and says why in ``note``."""

    workload: str
    case: str
    threads: int
    implementation: str
    median_s: float | None = None
    rounds: int = 0
    vs_torch: float | None = None      # median over PyTorch eager's, same workload/case/threads
    limit_s: float | None = None       # the physical limit of this workload/case/threads
    vs_limit: float | None = None      # median over limit_s
    is_limit: bool = False             # this row measures the limit (GEMMs, a copy)
    limit_what: str = ""
    arena_bytes: int | None = None
    peak_bytes: int | None = None
    peak_kind: str = ""
    ops: int | None = None
    source: str = ""                   # the benchmark module that measured it
    note: str = ""

    @property
    def group(self) -> tuple[str, str, int]:
        return self.workload, self.case, self.threads


# -- building rows -----------------------------------------------------------------------------
def rows_from_runs(runs: Iterable[dict]) -> list[Row]:
    """The table's rows from pytest-benchmark JSON documents (one per run, e.g. per thread
    count): every tagged benchmark and every tagged skip, with ratios, sorted.

    >>> rows_from_runs([{"benchmarks": [], "skipped": []}])
    []
    """
    raw = []
    for run in runs:
        raw += [_measured(b) for b in run.get("benchmarks", []) if _tagged(b.get("extra_info"))]
        raw += [_skipped(s) for s in run.get("skipped", []) if _tagged(s)]
    return sort_rows(with_ratios(raw))


def _tagged(info) -> bool:
    return bool(info) and all(k in info for k in ("workload", "case", "implementation"))


def _common(tags: dict, fullname: str) -> dict:
    return {"workload": tags["workload"], "case": str(tags["case"]),
            "threads": int(tags.get("threads", 0)), "implementation": tags["implementation"],
            "arena_bytes": tags.get("arena_bytes"), "peak_bytes": tags.get("peak_bytes"),
            "peak_kind": tags.get("peak_kind", ""), "ops": tags.get("ops"),
            "source": fullname.split("::")[0].rsplit("/", 1)[-1].removesuffix(".py")}


def _measured(bench: dict) -> Row:
    tags, stats = bench["extra_info"], bench["stats"]
    is_limit = tags.get("role") == "limit"
    limit = stats["median"] * tags.get("limit_scale", 1.0) if is_limit else None
    return Row(**_common(tags, bench.get("fullname", "")), median_s=stats["median"],
               rounds=stats.get("rounds", 0), is_limit=is_limit, limit_s=limit,
               limit_what=tags.get("limit_what", ""))


def _skipped(entry: dict) -> Row:
    return Row(**_common(entry, entry.get("fullname", "")),
               note=f"skipped: {entry.get('reason', 'no reason given')}")


def with_ratios(rows: list[Row]) -> list[Row]:
    """Each measured row's ratios to PyTorch eager and to the limit of its group.

    When a group holds several PyTorch eager or limit rows (modules that measure the same
    workload each time their own peers), a row is compared with the one its own module
    measured, the nearest in time, else with the first.
    """
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    out = []
    for members in groups.values():
        bases = [r for r in members if r.implementation == BASELINE and r.median_s]
        limits = [r for r in members if r.is_limit and r.limit_s]
        for row in members:
            out.append(_compared(row, _nearest(bases, row), _nearest(limits, row)))
    return out


def _nearest(candidates: list[Row], row: Row) -> Row | None:
    same = [c for c in candidates if c.source == row.source]
    return (same or candidates or [None])[0]


def _compared(row: Row, base: Row | None, limit: Row | None) -> Row:
    if row.median_s is None:
        return row
    vs_torch = row.median_s / base.median_s if base else None
    if row.is_limit:
        return dataclasses.replace(row, vs_torch=vs_torch)
    limit_s = limit.limit_s if limit else None
    return dataclasses.replace(row, vs_torch=vs_torch, limit_s=limit_s,
                               vs_limit=row.median_s / limit_s if limit_s else None)


def sort_rows(rows: Iterable[Row]) -> list[Row]:
    """Workloads in BENCHMARKS.md's order, then case and thread count; in a group the limit
    first, then the measured rows fastest first, then the skipped ones."""
    def key(row: Row):
        order = WORKLOADS.index(row.workload) if row.workload in WORKLOADS else len(WORKLOADS)
        rank = 0 if row.is_limit else (1 if row.median_s is not None else 2)
        return (order, row.workload, row.case.casefold(), row.threads, rank, row.median_s or 0.0,
                row.implementation, row.source)

    return sorted(rows, key=key)


# -- JSON --------------------------------------------------------------------------------------
def to_json(rows: list[Row], machine: str = "") -> dict:
    """The rows as plain data for tools (``mgegraph bench --json``); ``from_json`` reads it.

    >>> from_json(to_json(rows)) == rows
    True
    """
    return {"version": TABLE_VERSION, "machine": machine,
            "rows": [dataclasses.asdict(r) for r in rows]}


def from_json(doc: dict) -> list[Row]:
    if doc.get("version") != TABLE_VERSION:
        raise ValueError(f"benchmark table version {doc.get('version')!r} is not "
                         f"{TABLE_VERSION}, the one this mgegraph reads")
    return [Row(**r) for r in doc["rows"]]


# -- text --------------------------------------------------------------------------------------
COLUMNS = ("workload", "case", "threads", "implementation", "median", "x torch", "x limit",
           "arena", "peak", "note")
RIGHT = {"threads", "median", "x torch", "x limit", "arena", "peak", "torch eager"}


def fmt_time(seconds: float | None) -> str:
    """Seconds with a unit that keeps three or four significant digits: '11.02 ms'."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.4g} {unit}"
    return f"{seconds / 1e-9:.4g} ns"


def fmt_bytes(nbytes: int | None) -> str:
    """The memory report's units ('1.50 KiB'), '-' for no figure."""
    return "-" if nbytes is None else human(nbytes)


def _ratio(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value >= 0.095 else f"{value:.2g}"  # 0.0024, not 0.00


def labels(rows: list[Row]) -> list[str]:
    """Implementation names, with the module added where a group holds the name twice."""
    counts = collections.Counter(r.group + (r.implementation,) for r in rows)
    return [f"{r.implementation} [{r.source}]" if counts[r.group + (r.implementation,)] > 1
            else r.implementation for r in rows]


def _note(row: Row) -> str:
    parts = [row.note] if row.note else []
    if row.is_limit:
        parts.append(f"the limit, {fmt_time(row.limit_s)}: {row.limit_what}".rstrip(": "))
    if row.ops and row.median_s is not None:
        parts.append(f"{row.median_s / row.ops * 1e6:.4f} us per op")
    return "; ".join(parts)


def _cells(row: Row, label: str, peak_marks: dict[str, str]) -> list[str]:
    if row.median_s is None:
        return [label, "skipped", "", "", "", "", _note(row)]
    peak = fmt_bytes(row.peak_bytes) + peak_marks.get(row.peak_kind, "")
    return [label, fmt_time(row.median_s), _ratio(row.vs_torch),
            "limit" if row.is_limit else _ratio(row.vs_limit), fmt_bytes(row.arena_bytes),
            peak if row.peak_bytes is not None else "-", _note(row)]


def table_lines(rows: list[Row]) -> list[str]:
    """The rows as aligned text lines (a header, then one line per row, a blank line between
    workloads); workload, case and threads are written once per group."""
    kinds = sorted({r.peak_kind for r in rows if r.peak_bytes is not None and r.peak_kind})
    marks = {kind: "*" * (i + 1) for i, kind in enumerate(kinds)}
    body, previous = [], None
    for row, label in zip(rows, labels(rows)):
        lead = [row.workload, row.case, str(row.threads)]
        if previous is not None and previous.workload != row.workload:
            body.append(None)  # a blank line between workloads
        if previous is not None and previous.group == row.group:
            lead = ["", "", ""]
        body.append(lead + _cells(row, label, marks))
        previous = row
    lines = _aligned([list(COLUMNS)] + body)
    return lines + [f"{mark} peak: {kind}" for kind, mark in marks.items()]


def _aligned(table: list[list[str] | None], columns=COLUMNS) -> list[str]:
    cells = [r for r in table if r is not None]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = []
    for r in table:
        if r is None:
            lines.append("")
            continue
        line = "  ".join(c.rjust(w) if name in RIGHT else c.ljust(w)
                         for c, w, name in zip(r, widths, columns))
        lines.append(line.rstrip())
    return lines


def render(rows: list[Row], title: str = "") -> str:
    """The benchmark table as text: medians from pytest-benchmark, the ratio to PyTorch eager
    and to the workload's physical limit in the same run, the arena and the peak memory.

    >>> print(render(rows_from_runs([doc]), title="2 cores, shared"))
    """
    head = [title] if title else []
    if not rows:
        return "\n".join(head + ["(no tagged benchmark ran)"])
    return "\n".join(head + table_lines(rows))


# -- the summary: one line per workload, case and thread count (issue 19's table) ---------------
SUMMARY = ("workload", "case", "threads", "mgegraph (fastest)", "x limit", "torch eager",
           "best peer", "limit")


def _fastest(rows: list[Row]) -> Row | None:
    return min(rows, key=lambda r: r.median_s, default=None)


def summary_cells(members: list[Row]) -> list[str]:
    """mgegraph's fastest row, PyTorch eager, the fastest peer and the limit of one group."""
    measured = [r for r in members if r.median_s is not None and not r.is_limit]
    ours = _fastest([r for r in measured if r.implementation.startswith("mgegraph")])
    peer = _fastest([r for r in measured if not r.implementation.startswith("mgegraph")])
    torch = next((r for r in measured if r.implementation == BASELINE), None)
    limit = next((r for r in members if r.is_limit and r.limit_s), None)

    def named(row: Row | None, prefix: str = "") -> str:
        return "-" if row is None else \
            f"{fmt_time(row.median_s)} {row.implementation.removeprefix(prefix)}"

    return [named(ours, "mgegraph "), _ratio(ours.vs_limit) if ours else "-",
            fmt_time(torch.median_s) if torch else "-", named(peer),
            f"{fmt_time(limit.limit_s)} ({limit.implementation})" if limit else "-"]


def render_summary(rows: list[Row], title: str = "") -> str:
    """One line per workload, case and thread count: mgegraph's fastest implementation (and its
    ratio to the limit), PyTorch eager, the fastest peer and the physical limit, side by side.

    >>> print(render_summary(rows))
    """
    groups: dict[tuple, list[Row]] = {}
    for row in sort_rows(rows):
        groups.setdefault(row.group, []).append(row)
    body = [[w, c, str(t)] + summary_cells(m) for (w, c, t), m in groups.items()]
    head = [title] if title else []
    return "\n".join(head + _aligned([list(SUMMARY)] + body, SUMMARY))
