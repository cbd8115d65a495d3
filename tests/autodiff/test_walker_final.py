"""The walker's ``on_final``: each ``wrt`` entry's gradient is handed over once no node left to
walk reads it, in the order the walk finishes them, and it is the gradient the walk returns."""
import mgegraph as mg
import mgegraph.functional as F
from mgegraph.autodiff import backward


def test_each_gradient_is_handed_over_once_the_walk_has_passed_its_first_reader():
    g = mg.Graph()
    x = g.input("x", (4, 3), "float32")
    w1, w2 = g.input("w1", (3, 5), "float32"), g.input("w2", (5, 2), "float32")
    b2 = g.input("b2", (2,), "float32")
    unused = g.input("unused", (2,), "float32")
    h = F.relu(x @ w1)
    loss = F.sum(h @ w2 + b2) + F.sum(w1)  # w1 read twice: by the matmul and by the last sum
    seed = F.ones_like(loss)
    nodes = list(g.nodes)
    handed, at = [], []

    def on_final(v, grad):
        handed.append((v, grad))
        at.append(walked[0])

    walked = [0]

    def after_node():
        walked[0] += 1

    grads = backward(nodes, [(loss, seed)], [w1, w2, b2, unused, x], on_final=on_final,
                     after_node=after_node)
    called = {w1.id: "w1", w2.id: "w2", b2.id: "b2", unused.id: "unused", x.id: "x"}
    names = [called[v.id] for v, _ in handed]
    assert set(names) == {"w1", "w2", "b2", "x"} and "unused" not in names
    # b2 and w2 before w1, which the first matmul (the walk's last step to it) reads
    assert names.index("b2") < names.index("w1") and names.index("w2") < names.index("w1")
    assert at == sorted(at) and at[names.index("b2")] < at[names.index("w1")] < walked[0]
    assert at[names.index("x")] == at[names.index("w1")]  # both read by the first matmul
    assert all(grads[v.id] is grad for v, grad in handed)  # the final gradient, not a part
