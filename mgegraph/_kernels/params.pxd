# Parameter blocks by name: each kernel module declares its ints layout as a struct of
# Py_ssize_t fields (which overlays the int array a lowering writes, no padding) and exports the
# struct's field names, so the lowering packs them by name (lowering/layout.py, pack).


cdef inline tuple fields_of(dict blank, size_t size):
    """The field names of a parameter struct, in memory order; ``blank`` is the struct itself,
    which Cython converts to a dict of its fields in declaration order, ``size`` its sizeof.

    >>> CONV_FIELDS = fields_of(_conv, sizeof(Conv))
    """
    if len(blank) * sizeof(Py_ssize_t) != size:
        raise ImportError(f"parameter struct {tuple(blank)} is not all Py_ssize_t fields")
    return tuple(blank)
