"""A layered drawing of a directed acyclic graph, computed in Python (no Graphviz needed).

Design: the classic three steps of Sugiyama's method, each a pure function of plain data.
``ranks`` puts every node one row below its deepest predecessor (longest path), then moves each
node with slack down to the row just above its first successor, so an input read late, or a
value rematerialisation recomputes, is drawn where it is read. ``order`` orders each row by the barycentre of its neighbours' positions over a
few down and up sweeps; long edges get no dummy nodes (a training step has hundreds of edges from
the forward part to the backward part, each spanning most of the rows), the barycentre simply
reads neighbours in any row. ``coordinates`` places boxes of any size in their rows, each as near
to the mean of its predecessors as the boxes beside it allow. ``grow`` moves a finished drawing
apart so that some boxes can become larger (a collapsed group opened in place); the viewer's
JavaScript does the same arithmetic (``viewer.js``: ``grow``), so both draw one picture.

>>> box = layout([(80, 30), (80, 30), (80, 30)], [(0, 1), (0, 2)])
>>> box.rank
(0, 1, 1)
"""
from __future__ import annotations

from dataclasses import dataclass

GAP_X, GAP_Y, MARGIN = 24.0, 40.0, 8.0
SWEEPS = 4


@dataclass(frozen=True)
class Layout:
    """Boxes placed in rows: ``x``/``y`` are each box's left and top, ``rows`` the node indices
    of each row from left to right, ``width``/``height`` the size of the whole drawing."""

    x: tuple[float, ...]
    y: tuple[float, ...]
    rank: tuple[int, ...]
    rows: tuple[tuple[int, ...], ...]
    width: float
    height: float


def _neighbours(n: int, edges) -> tuple[list[list[int]], list[list[int]]]:
    preds: list[list[int]] = [[] for _ in range(n)]
    succs: list[list[int]] = [[] for _ in range(n)]
    for u, v in sorted(set(edges)):
        if not (0 <= u < n and 0 <= v < n) or u == v:
            raise ValueError(f"edge ({u}, {v}) is not between two of the {n} nodes")
        preds[v].append(u)
        succs[u].append(v)
    return preds, succs


def _topological(preds, succs) -> list[int]:
    waiting = [len(p) for p in preds]
    ready = [v for v, k in enumerate(waiting) if k == 0]
    out = []
    while ready:
        u = ready.pop()
        out.append(u)
        for v in succs[u]:
            waiting[v] -= 1
            if waiting[v] == 0:
                ready.append(v)
    if len(out) != len(preds):
        raise ValueError("the graph has a cycle; a layered layout needs a DAG")
    return out


def ranks(n: int, edges) -> list[int]:
    """The row of each of ``n`` nodes: one below its deepest predecessor, then moved down to
    just above its first successor where there is room (a value recomputed for the backward
    part is drawn where it is used, not beside the forward part).

    >>> ranks(3, [(0, 2), (1, 2)])
    [0, 0, 1]
    """
    preds, succs = _neighbours(n, edges)
    rank = [0] * n
    order_ = _topological(preds, succs)
    for v in order_:
        rank[v] = max((rank[u] + 1 for u in preds[v]), default=0)
    for v in reversed(order_):
        if succs[v]:
            rank[v] = max(rank[v], min(rank[w] for w in succs[v]) - 1)
    return rank


def _sweep(rows, neighbours, position) -> list[list[int]]:
    """Each row sorted by the mean position of the nodes' ``neighbours`` (a node with none
    keeps its place); ties keep the current order, so the result is deterministic."""
    out = []
    for row in rows:
        def key(v, i):
            near = [position[u] for u in neighbours[v] if u in position]
            return (sum(near) / len(near) if near else position[v], i)
        row = [v for _, v in sorted((key(v, i), v) for i, v in enumerate(row))]
        position.update({v: i - (len(row) - 1) / 2 for i, v in enumerate(row)})
        out.append(row)
    return out


def order(rank, edges, sweeps: int = SWEEPS) -> list[list[int]]:
    """The nodes of each row, left to right: first by index, then ordered by barycentres over
    ``sweeps`` down-and-up passes.

    >>> order([0, 0, 1, 1], [(0, 3), (1, 2)])
    [[0, 1], [3, 2]]
    """
    preds, succs = _neighbours(len(rank), edges)
    rows: list[list[int]] = [[] for _ in range(max(rank, default=-1) + 1)]
    for v, r in enumerate(rank):
        rows[r].append(v)
    position = {v: i - (len(row) - 1) / 2 for row in rows for i, v in enumerate(row)}
    for _ in range(sweeps):
        rows = _sweep(rows, preds, position)
        rows = _sweep(rows[::-1], succs, position)[::-1]
    return rows


def _pack(desired: list[float], widths: list[float], gap: float) -> list[float]:
    """Centres as near to ``desired`` as a row of boxes without overlap allows: the mean of a
    left-to-right pass (pushing right) and a right-to-left one (pushing left), which keeps the
    spacing of both."""
    n = len(desired)
    right, left = desired[:], desired[:]
    for i in range(1, n):
        right[i] = max(right[i], right[i - 1] + (widths[i - 1] + widths[i]) / 2 + gap)
    for i in range(n - 2, -1, -1):
        left[i] = min(left[i], left[i + 1] - (widths[i + 1] + widths[i]) / 2 - gap)
    return [(a + b) / 2 for a, b in zip(right, left)]


def _desired(row, preds, centre, widths, gap) -> list[float]:
    """Where each box of ``row`` would like its centre: the mean of its placed predecessors';
    a box with none sits beside its left neighbour (or at 0)."""
    out: list[float] = []
    for i, v in enumerate(row):
        near = [centre[u] for u in preds[v] if u in centre]
        if near:
            out.append(sum(near) / len(near))
        elif out:
            out.append(out[-1] + (widths[row[i - 1]] + widths[v]) / 2 + gap)
        else:
            out.append(0.0)
    return out


def coordinates(rows, sizes, edges, gap_x: float = GAP_X, gap_y: float = GAP_Y):
    """(x, y, width, height): each box's left and top, and the drawing's size, for ``rows``
    (``order``'s result) of boxes of ``sizes`` ((width, height) per node)."""
    preds, _ = _neighbours(len(sizes), edges)
    widths = [w for w, _ in sizes]
    centre: dict[int, float] = {}
    x, y = [0.0] * len(sizes), [0.0] * len(sizes)
    top = MARGIN
    for row in rows:
        packed = _pack(_desired(row, preds, centre, widths, gap_x), [widths[v] for v in row], gap_x)
        centre.update(zip(row, packed))
        for v in row:
            y[v] = top
        top += max((sizes[v][1] for v in row), default=0) + gap_y
    left = min((centre[v] - widths[v] / 2 for v in centre), default=0.0)
    for v, c in centre.items():
        x[v] = round(c - widths[v] / 2 - left + MARGIN, 1)
    width = max((x[v] + widths[v] for v in centre), default=MARGIN) + MARGIN
    return x, y, round(width, 1), round(max(top - gap_y + MARGIN, 2 * MARGIN), 1)


def layout(sizes, edges, sweeps: int = SWEEPS) -> Layout:
    """Boxes of ``sizes`` ((width, height) per node) placed in rows for the DAG of ``edges``
    ((from, to) node indices).

    >>> layout([(80, 30), (80, 30)], [(0, 1)]).y
    (8.0, 78.0)
    """
    rank = ranks(len(sizes), edges)
    rows = order(rank, edges, sweeps)
    x, y, width, height = coordinates(rows, sizes, edges)
    return Layout(tuple(x), tuple(y), tuple(rank), tuple(tuple(r) for r in rows), width, height)


def grow(box: Layout, sizes, grown: dict[int, tuple[float, float]]) -> Layout:
    """``box`` with the nodes in ``grown`` made larger (node -> new (width, height), at least
    its size in ``sizes``): every later row moves down by how much taller the rows above it
    became, and every box moves right by how much wider the boxes left of it in its row became.
    Order and gaps are kept, so no two boxes overlap if none did.

    >>> grow(layout([(10, 10), (10, 10)], [(0, 1)]), [(10, 10)] * 2, {0: (50, 30)}).y
    (8.0, 78.0)
    """
    x, y = list(box.x), list(box.y)
    down, width = 0.0, box.width
    for row in box.rows:
        right = 0.0
        for v in row:
            w, _ = grown.get(v, sizes[v])
            x[v] += right
            y[v] += down
            right += w - sizes[v][0]
            width = max(width, x[v] + w + MARGIN)
        down += max((grown.get(v, sizes[v])[1] for v in row), default=0) - \
            max((sizes[v][1] for v in row), default=0)
    return Layout(tuple(x), tuple(y), box.rank, box.rows, round(width, 1),
                  round(box.height + down, 1))
