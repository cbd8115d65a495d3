"""Rematerialisation: ``remat`` (the split into forward and backward, a remat plan as data
and the graph it makes), ``remat_search`` (candidate plans judged by their planned arenas)
and ``remat_report`` (what was kept and recomputed, and the pictures).

The modules are imported by name; this package itself imports nothing.
"""
