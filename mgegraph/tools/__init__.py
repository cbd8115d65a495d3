"""Tools for seeing into plans: the HTML viewer (``html``, ``layout``), the profiler
(``profiler``) and the benchmark table (``bench``). The command line is ``mgegraph.cli``."""
