"""The check that a compiled kernel module was built with the parameter blocks the lowerings
pack (mgegraph/kernel_abi/): the structs' field names, the codes of their modes and their
limits, which each .pyx exports as read from its structs and enums."""
from __future__ import annotations


def check_built(module, **declared) -> None:
    """ImportError naming the first export of ``module`` that differs from its declared value
    (``FIELDS=(...)``, ``MODES={...}``): a stale build, or a struct edited on one side only.

    >>> from mgegraph._kernels import reduce
    >>> check_built(reduce, REDUCE_FIELDS=("op", "kept_ndim"))
    """
    for name, want in declared.items():
        have = getattr(module, name)
        if have != want:
            raise ImportError(f"{module.__name__}.{name} = {have!r} and the shared parameter "
                              f"block's {want!r} (mgegraph/kernel_abi/) differ: rebuild the "
                              "kernels (python setup.py build_ext --inplace) or edit both")
