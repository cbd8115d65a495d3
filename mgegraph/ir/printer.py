"""The IR text form and its DOT picture. The grammar is published in docs/ir.md."""
from __future__ import annotations

import html
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Graph prints itself with this module: the names are for the annotations
    from .graph import Graph, Node


def format_attr_value(value) -> str:
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple):
        return "(" + ",".join(format_attr_value(v) for v in value) + ")"
    if isinstance(value, str):
        return value
    return str(value)


def format_attrs(attrs) -> str:
    if not attrs:
        return ""
    return "[" + ", ".join(f"{k}={format_attr_value(v)}" for k, v in attrs) + "]"


def format_node(node: Node) -> str:
    outs = ", ".join(f"%{v.id}:{v.type}" for v in node.outputs)
    args = " ".join(f"%{v.id}" for v in node.inputs)
    return f"{outs} = {node.op.name}{format_attrs(node.attrs)}{' ' + args if args else ''}"


def format_graph(graph: Graph) -> str:
    return "\n".join(format_node(n) for n in graph.nodes)


# The one colour table of op categories (ops.registry.CATEGORIES), stable, so that the same
# kind of op looks the same in every picture: the DOT graph here and the planner's memory
# pictures, which import it from this, the lowest layer both may import. Black text reads on
# each (contrast 4.6:1 or more).
CATEGORY_COLOURS = {"source": "#9c755f", "elementwise": "#4e79a7", "reduce": "#f28e2b",
                    "matmul": "#e15759", "movement": "#76b7b2", "nn": "#59a14f"}
OTHER_COLOUR = "#bab0ac"  # a category without a colour of its own


def dot_text(text: str) -> str:
    r"""``text`` as the inside of a DOT double-quoted string: a backslash and a quote escaped,
    a line break as DOT's ``\n``, and any other control character (which no picture can
    show, and which the SVG that Graphviz makes of it would carry) as U+FFFD.

    >>> print(dot_text('a\ "b"'))   # a\\ \"b\"
    """
    text = text.replace("\\", "\\\\").replace('"', '\\"').replace("\r\n", "\n")
    return _DOT_CONTROL.sub("\ufffd", text).replace("\n", "\\n")


_DOT_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f]")


# what XML 1.0 forbids in a document: control characters but tab, line feed and carriage
# return; lone surrogates; U+FFFE and U+FFFF. A name holding one would make an SVG unreadable
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` for an SVG (or HTML) element or attribute: ``& < > " '`` escaped and each
    character XML 1.0 forbids shown as U+FFFD, so the document stays well-formed XML. Every
    picture writer (the viewer's SVG, the memory and remat pictures) escapes through this.

    >>> xml_text("a\x01<b>")   # 'a\ufffd&lt;b&gt;'
    """
    return html.escape(_NOT_XML.sub("\ufffd", text))


def graph_to_dot(graph: Graph) -> str:
    lines = ["digraph mgegraph {", "  rankdir=TB;", '  node [shape=box, style="rounded,filled"];']
    for i, node in enumerate(graph.nodes):
        types = "\n".join(str(v.type) for v in node.outputs)
        label = dot_text(f"{node.op.name}{format_attrs(node.attrs)}\n{types}")
        colour = CATEGORY_COLOURS.get(node.op.category, OTHER_COLOUR)
        lines.append(f'  n{i} [label="{label}", fillcolor="{colour}"];')
    producer = {v.id: i for i, n in enumerate(graph.nodes) for v in n.outputs}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            lines.append(f'  n{producer[v.id]} -> n{i} [label="%{v.id}"];')
    lines.append("}")
    return "\n".join(lines)
