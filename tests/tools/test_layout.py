"""The layered layout (mgegraph/tools/layout.py): ranks respect edges, boxes never overlap, the
same graph always gives the same picture, and grow keeps all of that."""
import itertools
import random

import pytest

from mgegraph.tools.layout import GAP_X, coordinates, grow, layout, order, ranks


def random_dag(seed: int, n: int = 40, p: float = 0.08):
    rng = random.Random(seed)
    edges = [(u, v) for v in range(n) for u in range(v) if rng.random() < p]
    sizes = [(rng.randint(30, 160), rng.choice((24, 38, 52))) for _ in range(n)]
    return sizes, edges


def overlaps(box, sizes) -> list[tuple[int, int]]:
    found = []
    for a in range(len(sizes)):
        for b in range(a + 1, len(sizes)):
            apart_x = box.x[a] + sizes[a][0] <= box.x[b] or box.x[b] + sizes[b][0] <= box.x[a]
            apart_y = box.y[a] + sizes[a][1] <= box.y[b] or box.y[b] + sizes[b][1] <= box.y[a]
            if not (apart_x or apart_y):
                found.append((a, b))
    return found


@pytest.mark.parametrize("seed", range(12))
def test_ranks_respect_every_edge(seed):
    sizes, edges = random_dag(seed)
    rank = ranks(len(sizes), edges)
    assert all(rank[u] < rank[v] for u, v in edges)
    assert min(rank) == 0


def test_a_source_sits_just_above_its_first_reader():
    # 0 -> 1 -> 2 -> 3, and the input 4 read only by 3: drawn in the row above 3, not at the top
    assert ranks(5, [(0, 1), (1, 2), (2, 3), (4, 3)]) == [0, 1, 2, 3, 2]


def test_a_value_read_late_moves_down_to_its_reader():
    # 1 is computed from 0 but read only by 4 (a recomputation for the backward part)
    rank = ranks(5, [(0, 1), (0, 2), (2, 3), (3, 4), (1, 4)])
    assert rank[1] == rank[4] - 1


@pytest.mark.parametrize("seed", range(12))
def test_no_two_boxes_overlap(seed):
    sizes, edges = random_dag(seed)
    box = layout(sizes, edges)
    assert overlaps(box, sizes) == []
    assert all(0 <= box.x[v] and box.x[v] + sizes[v][0] <= box.width for v in range(len(sizes)))
    assert all(0 <= box.y[v] and box.y[v] + sizes[v][1] <= box.height for v in range(len(sizes)))


def test_boxes_in_a_row_keep_the_gap():
    box = layout([(50, 20)] * 4, [(0, 1), (0, 2), (0, 3)])
    row = sorted(box.x[v] for v in (1, 2, 3))
    assert [b - a for a, b in itertools.pairwise(row)] == [50 + GAP_X] * 2


@pytest.mark.parametrize("seed", range(4))
def test_layout_is_deterministic_and_ignores_the_order_edges_come_in(seed):
    sizes, edges = random_dag(seed)
    shuffled = edges[:]
    random.Random(99).shuffle(shuffled)
    assert layout(sizes, edges) == layout(sizes, edges) == layout(sizes, shuffled + edges[:3])


def test_barycentres_uncross_two_edges():
    # 0 feeds 3 and 1 feeds 2: the second row is reordered so the edges do not cross
    assert order([0, 0, 1, 1], [(0, 3), (1, 2)]) == [[0, 1], [3, 2]]


def test_a_box_sits_under_its_predecessor():
    box = layout([(200, 20), (60, 20)], [(0, 1)])
    assert box.x[1] + 30 == pytest.approx(box.x[0] + 100)


def test_coordinates_of_an_empty_graph():
    assert coordinates([], [], [])[2:] == (16.0, 16.0)
    assert layout([], []).rows == ()


def test_cycles_and_bad_edges_are_refused():
    with pytest.raises(ValueError, match="cycle"):
        ranks(3, [(0, 1), (1, 2), (2, 0)])
    with pytest.raises(ValueError, match=r"edge \(0, 5\)"):
        ranks(3, [(0, 5)])
    with pytest.raises(ValueError, match=r"edge \(1, 1\)"):
        ranks(3, [(1, 1)])


@pytest.mark.parametrize("seed", range(8))
def test_grow_keeps_boxes_apart_and_in_their_rows(seed):
    sizes, edges = random_dag(seed)
    box = layout(sizes, edges)
    rng = random.Random(seed)
    grown = {v: (sizes[v][0] + rng.randint(0, 300), sizes[v][1] + rng.randint(0, 200))
             for v in rng.sample(range(len(sizes)), 6)}
    big = grow(box, sizes, grown)
    final = [grown.get(v, s) for v, s in enumerate(sizes)]
    assert overlaps(big, final) == []
    assert big.rows == box.rows
    for row in box.rows:  # left to right order and a shared top per row are kept
        assert sorted(row, key=lambda v: big.x[v]) == list(row)
        assert len({big.y[v] for v in row}) == 1
    assert all(big.x[v] + final[v][0] <= big.width for v in range(len(sizes)))
    assert all(big.y[v] + final[v][1] <= big.height for v in range(len(sizes)))


def test_grow_moves_later_rows_down_by_the_growth():
    sizes = [(40, 20), (40, 20), (40, 20)]
    box = layout(sizes, [(0, 1), (1, 2)])
    big = grow(box, sizes, {1: (40, 120)})
    assert big.y[:2] == box.y[:2]
    assert big.y[2] == box.y[2] + 100
    assert big.height == box.height + 100
    assert grow(box, sizes, {}) == box
