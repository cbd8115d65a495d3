"""What the viewer draws: a plan's instructions (or a graph's nodes) as items, grouped into
collapsible views, each laid out by ``layout``.

Design: every drawn thing is an *item* (a plain dict that goes to the page as JSON): an
instruction or graph node ("i"), a graph input ("s"), a group ("g") or a step of a fused
program ("p"). A *view* is a set of items with the edges between them and their layout; an
item that opens (a group, a fused instruction) names the view it opens into. Large graphs stay
usable because the top view holds blocks, not instructions: the schedule is cut where at most
one value is live between consecutive instructions of the same part (forward, or the rest:
backward and updates), the segments between cuts become blocks, and runs of blocks with the
same ops (a network's repeated layers) become one group of repeats. Instructions nothing reads
(optimiser updates, running statistics), and chains of single readers ending in one, join the
block of their last input, so that they do not hold values live across cuts; the cuts are
looked for in an order where each instruction comes as soon as its inputs are made, since a
memory-aware schedule defers some (weight gradients) to the end.
"""
from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from ..ir.printer import format_attr_value
from ..ops import get_op
from ..ops.fused_program import reads, steps
from .layout import layout

GROUP_ABOVE = 120     # more items than this in the top view: group them into blocks
OPEN_BELOW = 60       # fewer instructions than this: every group starts open
SEGMENT_MAX = 60      # a segment longer than this is split into chunks (no cut point inside)
CHAR_W, LINE_H, PAD = 7.0, 14.0, 8.0


@dataclass
class Drawing:
    """Items, the top-level units (item ids in schedule order), their edges, which are in the
    forward part, and the views built from them (``views[0]`` is the top)."""

    items: list[dict]
    units: list[int]
    edges: list[tuple[int, int]]
    forward: set[int]
    views: list = field(default_factory=lambda: [None])  # views[0], the top, comes last
    opened: list[int] = field(default_factory=list)   # views open when the page loads


def size(lines) -> tuple[float, float]:
    """A box's (width, height) for its label ``lines`` (the page draws 11px text)."""
    return (round(max(len(s) for s in lines) * CHAR_W + 2 * PAD, 1),
            round(len(lines) * LINE_H + PAD, 1))


def short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


def attrs_of(attrs) -> list[list[str]]:
    """[name, value] pairs for the details panel; a fused program is listed on its own."""
    return [[k, short(format_attr_value(v), 200)] for k, v in attrs if k != "code"]


# -- a plan ----------------------------------------------------------------------------------------
def recomputed_steps(plan) -> frozenset[int]:
    """Steps of ``plan`` that rematerialisation added (clones recomputing forward values)."""
    return frozenset() if plan.remat is None else plan.remat.recomputed_steps(plan)


def _slot_type(plan, s: int) -> str:
    return str(plan.slots[s].type)


def op_label(op: str, attrs) -> str:
    """The op's name, with the activation the epilogue pass fused into it (``conv2d+relu``)."""
    act = dict(attrs).get("activation")
    return short(f"{op}+{act}" if act not in (None, "", "none") else op)


def _instruction(plan, step: int, ins, category: str, remat: bool, time) -> dict:
    outs = ", ".join(short(_slot_type(plan, o), 28) for o in ins.outputs[:2])
    item = {"k": "i", "op": ins.op, "cat": category, "kernel": ins.kernel, "step": step,
            "lab": [op_label(ins.op, ins.attrs), outs or "-"], "attrs": attrs_of(ins.attrs),
            "ins": list(ins.inputs), "outs": list(ins.outputs), "ws": ins.workspace,
            "loc": ins.location, "remat": remat}
    if time is not None:
        item["t"] = time
    return item


def plan_drawing(plan, times=None) -> Drawing:
    """The items of ``plan``: one per instruction (ids = steps), then one per input; edges
    follow the slots (a view's reader reads its root's writer)."""
    redo = recomputed_steps(plan)
    items = [_instruction(plan, k, ins, get_op(ins.op).category, k in redo,
                          None if times is None else times[k])
             for k, ins in enumerate(plan.instructions)]
    writer = {}
    for name, slot in plan.feeds.items():
        writer[slot] = len(items)
        items.append({"k": "s", "op": "input", "cat": "source", "name": name, "slot": slot,
                      "lab": [short(name), _slot_type(plan, slot)]})
    edges = []
    for k, ins in enumerate(plan.instructions):
        for s in ins.inputs:
            root = plan.slots[s].alias if plan.slots[s].alias is not None else s
            if root in writer:
                edges.append((writer[root], k))
        for o in ins.outputs:
            writer[plan.slots[o].alias if plan.slots[o].alias is not None else o] = k
    d = Drawing(items, list(range(len(items))), sorted(set(edges)),
                _forward(edges, plan_output_items(plan)))
    for k, ins in enumerate(plan.instructions):
        if ins.op == "fused_elementwise":
            items[k]["prog"] = program_lines(dict(ins.attrs))
            program_view(d, k, dict(ins.attrs))
    return d


def plan_output_items(plan) -> list[int]:
    """The instructions that write the plan's outputs, first output first."""
    made = {}
    for k, ins in enumerate(plan.instructions):
        for o in ins.outputs:
            made[o] = k
    roots = [plan.slots[s].alias if plan.slots[s].alias is not None else s for s in plan.outputs]
    return [made[r] for r in roots if r in made]


def _forward(edges, outputs) -> set[int]:
    """What the first output depends on (for a training step, the forward part)."""
    if not outputs:
        return set()
    preds: dict[int, list[int]] = {}
    for u, v in edges:
        preds.setdefault(v, []).append(u)
    seen, stack = set(), [outputs[0]]
    while stack:
        v = stack.pop()
        if v not in seen:
            seen.add(v)
            stack += preds.get(v, [])
    return seen


# -- a graph ---------------------------------------------------------------------------------------
def graph_drawing(graph) -> Drawing:
    """The items of a Graph: one per node that is not a param or a constant (those are listed
    in their readers' details), inputs included."""
    items, item_of, edges = [], {}, []
    for node in graph.nodes:
        if node.op.name in ("param", "const"):
            continue
        item_of[id(node)] = len(items)
        types = ", ".join(short(str(v.type), 28) for v in node.outputs[:2])
        if node.op.name == "input":
            items.append({"k": "s", "op": "input", "cat": "source", "name": node.attr["name"],
                          "lab": [short(node.attr["name"]), types]})
            continue
        items.append({"k": "i", "op": node.op.name, "cat": node.op.category,
                      "lab": [op_label(node.op.name, node.attrs), types or "-"],
                      "attrs": attrs_of(node.attrs),
                      "vins": [_var_text(v) for v in node.inputs],
                      "vouts": [f"%{v.id}: {v.type}" for v in node.outputs],
                      "loc": node.location, "remat": False})
        for v in node.inputs:
            if v.node is not None and id(v.node) in item_of:
                edges.append((item_of[id(v.node)], len(items) - 1))
    scalar = {item_of[id(n)] for n in graph.nodes if id(n) in item_of
              and n.outputs and n.outputs[0].size == 1}
    return Drawing(items, list(range(len(items))), sorted(set(edges)),
                   _forward(edges, _first_result(items, edges, scalar)))


def _first_result(items, edges, scalar) -> list[int]:
    """A graph knows no outputs: its first node that nothing reads and that is not an assign,
    a scalar one first (the loss of a training graph; an unused gradient is not one), stands
    for the first output."""
    read = {u for u, _ in edges}
    unread = [i for i, it in enumerate(items) if it["k"] == "i" and i not in read
              and it["op"] != "assign"]
    first = next((i for i in unread if i in scalar), unread[0] if unread else None)
    return [] if first is None else [first]


def _var_text(v) -> str:
    node = v.node
    if node is not None and node.op.name in ("param", "const", "input"):
        return f"%{v.id}: {v.type} ({node.op.name} {node.attr.get('name', '')})".rstrip()
    return f"%{v.id}: {v.type}"


# -- fused programs ------------------------------------------------------------------------------
def program_lines(attrs: dict) -> list[str]:
    """A fused program as text, one step a line (``v4 = add v2 c1``)."""
    k = attrs.get("constants", ())
    out = []
    for op, dst, a, b, c in steps(attrs["code"]):
        if op == "load":
            out.append(f"v{dst} = input {a}")
        elif op == "const":
            out.append(f"v{dst} = {k[a]:.7g}")
        elif op == "store":
            out.append(f"output {dst} = v{a}")
        else:
            out.append(f"v{dst} = {op} " + " ".join(f"v{r}" for r in reads(op, a, b, c)))
    return out


def program_view(d: Drawing, owner: int, attrs: dict) -> int:
    """A view of a fused instruction's program: a box per load, op and store (constants are
    written into their readers' labels); returns the view's index."""
    k = attrs.get("constants", ())
    const, made, ids, edges = {}, {}, [], []
    for op, dst, a, b, c in steps(attrs["code"]):
        if op == "const":
            const[dst] = k[a]
            continue
        args = [] if op in ("load", "store") else reads(op, a, b, c)
        label = {"load": f"input {a}", "store": f"output {dst}"}.get(op, op)
        extra = ", ".join(f"{const[r]:.7g}" for r in args if r in const)
        d.items.append({"k": "p", "op": op, "cat": "elementwise",
                        "lab": [label] + ([short(extra, 24)] if extra else [])})
        ids.append(len(d.items) - 1)
        for r in ([a] if op == "store" else args):
            if r in made:
                edges.append((made[r], len(d.items) - 1))
        if op != "store":
            made[dst] = len(d.items) - 1
    return add_view(d, owner, ids, edges)


# -- views -----------------------------------------------------------------------------------------
def add_view(d: Drawing, owner: int | None, ids: list[int], edges, top: bool = False) -> int:
    """Lay out ``ids`` (items) with ``edges`` (item pairs; those leaving the set are dropped)
    as a new view opened by item ``owner`` (or as the top view); returns its index."""
    where = {item: k for k, item in enumerate(ids)}
    local = sorted({(where[u], where[v]) for u, v in edges if u in where and v in where
                    and u != v})
    # an item that opens gets room for its +/- toggle
    sizes = [_room(size(d.items[i]["lab"]), "v" in d.items[i]) for i in ids]
    box = layout(sizes, local)
    view = {"owner": owner, "n": ids, "e": local, "sz": sizes, "x": box.x, "y": box.y,
            "rows": box.rows, "W": box.width, "H": box.height}
    if top:
        d.views[0] = view
        return 0
    d.views.append(view)
    if owner is not None:
        d.items[owner]["v"] = len(d.views) - 1
    return len(d.views) - 1


def _room(box: tuple[float, float], toggle: bool) -> tuple[float, float]:
    return (box[0] + 14, box[1]) if toggle else box


def _sinks(d: Drawing, outputs: set[int]) -> set[int]:
    """Instructions nothing reads, and the chains of single readers that end in one (an
    update's arithmetic before its assign), outputs aside. (Not everything that leads only to
    them: in a training step the whole backward part does.)"""
    readers: dict[int, list[int]] = {}
    for u, v in d.edges:
        readers.setdefault(u, []).append(v)
    sinks: set[int] = set()
    for u in reversed(d.units):
        read_by = readers.get(u, ())
        if d.items[u]["k"] == "i" and u not in outputs and \
                (not read_by or (len(set(read_by)) == 1 and read_by[0] in sinks)):
            sinks.add(u)
    return sinks


def segments(d: Drawing, outputs=()) -> list[list[int]]:
    """The units cut into segments (see the module's note), in schedule order."""
    sinks = _sinks(d, set(outputs))
    kept = [u for u in d.units if u not in sinks and d.items[u]["k"] == "i"]
    seq = _chains([u for u in kept if u in d.forward], d.edges) + \
        _chains([u for u in kept if u not in d.forward], d.edges)
    pos = {u: k for k, u in enumerate(seq)}
    last: dict[int, int] = {}
    for u, v in d.edges:
        if u in pos and v in pos and (u in d.forward) == (v in d.forward):
            last[u] = max(last.get(u, 0), pos[v])
    # values live between consecutive instructions, counted per part (forward, the rest)
    live = {True: [0] * (len(seq) + 1), False: [0] * (len(seq) + 1)}
    for u, end in last.items():
        live[u in d.forward][pos[u] + 1] += 1
        live[u in d.forward][end + 1] -= 1
    out, running = [], {True: 0, False: 0}
    for k, u in enumerate(seq):
        for part in running:
            running[part] += live[part][k]
        phase_change = k and (u in d.forward) != (seq[k - 1] in d.forward)
        if not out or running[u in d.forward] <= 1 or phase_change or len(out[-1]) >= SEGMENT_MAX:
            out.append([])
        out[-1].append(u)
    return _attach_sinks(d, _merge_singles(d, out), sinks)


def _merge_singles(d: Drawing, segs) -> list[list[int]]:
    """A segment of one instruction joins the block after it (a backward block starts with
    the activation's gradient, which is live alone on both of its sides)."""
    out: list[list[int]] = []
    for seg in segs:
        if out and len(out[-1]) == 1 and len(seg) > 2 and \
                (out[-1][0] in d.forward) == (seg[0] in d.forward):
            out[-1] = out[-1] + seg
        else:
            out.append(seg)
    return out


def _chains(units, edges) -> list[int]:
    """``units`` in a topological order where each unit comes as soon as its inputs are made
    (first ready, first placed; the earlier unit first among those ready at once): a
    memory-aware schedule defers some instructions (weight gradients) to the end, which would
    hide the cuts between blocks."""
    inside = set(units)
    succs: dict[int, list[int]] = {}
    waiting = dict.fromkeys(units, 0)
    for u, v in edges:
        if u in inside and v in inside:
            succs.setdefault(u, []).append(v)
            waiting[v] += 1
    ready = deque(u for u in units if waiting[u] == 0)
    out = []
    while ready:
        u = ready.popleft()
        out.append(u)
        ready.extend(sorted(v for v in succs.get(u, ()) if _release(waiting, v)))
    return out


def _release(waiting: dict, v: int) -> bool:
    waiting[v] -= 1
    return waiting[v] == 0


def _attach_sinks(d: Drawing, segs, sinks) -> list[list[int]]:
    where = {u: k for k, seg in enumerate(segs) for u in seg}
    preds: dict[int, list[int]] = {}
    for u, v in d.edges:
        preds.setdefault(v, []).append(u)
    for u in sorted(sinks):
        home = max((where[p] for p in preds.get(u, ()) if p in where), default=None)
        if home is None:
            segs.append([u])
            where[u] = len(segs) - 1
        else:
            segs[home].append(u)
            where[u] = home
    return segs


def signature(d: Drawing, seg) -> tuple:
    return tuple(sorted(Counter(d.items[u]["op"] for u in seg).items()))


def _group(d: Drawing, members: list[int], label: list[str]) -> int:
    d.items.append({"k": "g", "op": "group", "cat": "group", "lab": label,
                    "members": len(members)})
    return len(d.items) - 1


def _summary(d: Drawing, seg) -> str:
    counts = Counter(d.items[u]["op"] for u in seg).most_common(3)
    return ", ".join(f"{op}\u00d7{n}" if n > 1 else op for op, n in counts)


def _block(d: Drawing, seg, parent_of: dict) -> int:
    g = _group(d, seg, [f"block of {len(seg)} ops", short(_summary(d, seg), 44)])
    add_view(d, g, sorted(seg), d.edges)
    parent_of.update((u, g) for u in seg)
    return g


def _lift(edges, parent_of) -> list[tuple[int, int]]:
    """Edges between the top-level representatives of their ends."""
    def top(u):
        while u in parent_of:
            u = parent_of[u]
        return u
    return sorted({(top(u), top(v)) for u, v in edges if top(u) != top(v)})


def build_views(d: Drawing, outputs=(), group=None) -> Drawing:
    """The views of ``d``: fused programs, then (when there are more than ``GROUP_ABOVE``
    units, or ``group=True``) blocks and groups of repeated blocks; ``views[0]`` is the top."""
    grouped = group if group is not None else len(d.units) > GROUP_ABOVE
    top, parent_of = list(d.units), {}
    if grouped:
        top = _grouped_top(d, segments(d, outputs), parent_of)
    add_view(d, None, top, _lift(d.edges, parent_of), top=True)
    small = sum(1 for i in d.items if i["k"] == "i") < OPEN_BELOW
    d.opened = [k for k in range(1, len(d.views)) if small]
    return d


def _grouped_top(d: Drawing, segs, parent_of) -> list[int]:
    top, k = [], 0
    inputs = [u for u in d.units if d.items[u]["k"] == "s"]
    while k < len(segs):
        run = k + 1
        while run < len(segs) and len(segs[k]) > 2 and signature(d, segs[run]) == \
                signature(d, segs[k]):
            run += 1
        if run - k >= 2:
            blocks = [_block(d, seg, parent_of) for seg in segs[k:run]]
            g = _group(d, blocks, [f"{run - k} \u00d7 block of {len(segs[k])} ops",
                                   short(_summary(d, segs[k]), 44)])
            add_view(d, g, blocks, _lift(d.edges, parent_of))
            parent_of.update((b, g) for b in blocks)
            top.append(g)
        elif len(segs[k]) > 2:
            top.append(_block(d, segs[k], parent_of))
        else:
            top += segs[k]
        k = run
    return inputs + top
