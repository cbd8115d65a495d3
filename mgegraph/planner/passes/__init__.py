"""The graph passes: each a pure ``(graph, outputs) -> PassResult`` built with ``rewrite``'s
Builder, and ``pipeline``, the ordered list of them with the runner that applies them.

The modules are imported by name (``mgegraph.planner.passes.fuse``); this package itself
imports nothing, so that taking one pass does not load the others.
"""
