"""The parameter blocks both backends' kernels read, and the lowerings that fill them.

A kernel of _kernels/ (CPU) and its twin of csrc_cuda/ (CUDA) read the same ints and floats for
an op, so the lowering of a node to that block (``Launch``) is written once, here, one module
per kernel family: the struct's field names, the codes of its modes and its limits, declared
in Python, and ``implement(table, ...)``, which registers the family's ops on a backend's
``KernelTable``. What only one device decides (the CPU's threads, conv paths, GEMM tiles) comes
in as an argument; the CPU passes its rules (_kernels/lowering/), CUDA the plain defaults and
its own workspaces (cuda/kernels/).

The compiled CPU kernels export the fields of the structs they were built with; the CPU backend
refuses to load when they differ from these (_kernels/lowering/built.py); csrc_cuda's kernels
read the same fields by position, and the CUDA tests run them on these blocks against the CPU's
results. This layer sits with ``lowering.py`` and ``backend.py``, below both backends, and
imports nothing compiled.

>>> from mgegraph.kernel_abi import reduce
>>> reduce.FIELDS
('op', 'kept_ndim')
"""
