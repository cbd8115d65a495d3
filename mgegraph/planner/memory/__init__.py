"""Memory planning of a lowered plan, in the order it runs: ``schedule`` (a memory-aware
order), ``liveness`` (the steps each buffer is live), ``inplace`` (outputs that take a dying
input's bytes), the arena allocator (``arena``, with ``arena_place``, ``arena_search`` and the
checker ``arena_check``), ``plan`` (MemoryOptions, MemoryPlan and the driver that makes one),
``report`` (text, JSON and pictures), ``formula`` (memory as a line in a named dimension,
fitted over the plans a symbolic plan specialised) and ``verify`` (the plan verifier, sharing no
code with the planner).

The modules are imported by name; this package itself imports nothing.
"""
