# Eager dispatch's C path: a cached op runs, and its result becomes a Tensor, without Python code.
#
# Design: eager/dispatch.py prepares each (op, attributes, input types) once (the op's rules, the
# backend's lowering and its eager launcher) into an ``Entry``. Once an op has run on some input
# types, the next call on the same types that nothing records and that needs no cast comes here:
# Python's operators on a Tensor (``add`` ... below are Tensor's ``__add__`` ...) and the eager
# graph's ``add_node`` (what ``F.relu`` and every other function call) find the Entry by the
# identity of the inputs' types (eager types are interned by ``tensor.type_of``; an op with
# attributes by dispatch's own key), allocate the output, call the kernel and make the output
# Tensor. Everything else (the first call, a cast, a recorder or a lazy block on any thread, a
# view, several outputs, a workspace, more than two inputs) takes dispatch.py's Python path,
# which makes the same node, so the results are the same bits.
#
# A Tensor is a Python class (a subclass of the IR's Var), so its fields are slots: the C path
# writes a new Tensor's slots at the offsets their member descriptors give (what
# ``tensor.set_array`` sets, in the same order), since a generic setattr per slot would cost more
# than the kernel. Nothing here is shared scratch: each call's pointers live on its C stack, and
# the caches change only by replacing one reference at a time, under the GIL.

cimport cython
cimport numpy as cnp
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF
from libc.math cimport copysign

from mgegraph._kernels.launch cimport Held, Launcher

import types as _types

cnp.import_array()

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    object PyType_GenericAlloc(PyTypeObject* type, Py_ssize_t nitems)

cdef extern from "structmember.h":
    int T_OBJECT_EX

cdef enum:
    MAX_FAST_INPUTS = 2  # the C path runs unary and binary ops (the elementwise table's)

# What dispatch.py installs (``install``)
cdef object TENSOR = None       # eager.tensor.Tensor
cdef object GRAPH = None        # the eager graph every Tensor belongs to
cdef object IDS = None          # tensor.py's counter of tensor ids
cdef dict ENTRIES = None        # dispatch's Entries by (op, attributes, *input types)
cdef dict SCALARS = None        # dispatch's tensors of Python scalars by their key
cdef object SLOW_BINARY = None  # dispatch.binary: an operator through mgegraph.functional
cdef object SLOW_ADD_NODE = None  # the eager graph's add_node in Python
cdef object FAILURE = None      # (entry, status, inputs) -> the KernelError to raise
cdef object ZERO = 0

# Tensor's slots: byte offsets in its instances
cdef Py_ssize_t OFF_GRAPH, OFF_ID, OFF_TYPE, OFF_NODE, OFF_INDEX
cdef Py_ssize_t OFF_VALUE, OFF_BASE, OFF_LAZY, OFF_GRAD, OFF_HELD

# Threads on which a recorder or a lazy block is active (dispatch's _Mode counts them): while
# any is, every op takes the Python path, which asks the thread's own mode.
cdef Py_ssize_t BUSY = 0


cdef Py_ssize_t _slot(cls, str name) except -1:
    """The byte offset of ``cls``'s slot ``name``."""
    for klass in cls.__mro__:
        descr = klass.__dict__.get(name)
        if descr is not None:
            break
    if type(descr) is not _types.MemberDescriptorType:
        raise TypeError(f"{cls.__name__}.{name} is not a slot")
    member = (<PyMemberDescrObject*>descr).d_member
    if member.type != T_OBJECT_EX:
        raise TypeError(f"{cls.__name__}.{name} is not an object slot")
    return member.offset


# every slot ``_tensor`` writes (the ones tensor.set_array sets)
SLOTS = frozenset({"graph", "id", "type", "node", "index", "_value", "_base", "_lazy", "grad",
                   "_held"})
# the slots a new Tensor may leave unset, which Tensor reads with a default (tensor.UNSET_SLOTS)
UNSET_SLOTS = frozenset({"_name", "_device", "_format", "_qparams"})


def _slot_names(cls) -> set:
    names = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names - {"__weakref__", "__dict__"}


def install(tensor, graph, ids, dict entries, dict scalars, slow_binary, slow_add_node,
            failure):
    """Eager dispatch's objects, read by the C path (dispatch.py calls it once)."""
    if _slot_names(tensor) - UNSET_SLOTS != SLOTS:  # an unset slot would raise where read
        raise TypeError(f"eager/fastpath.pyx makes Tensors with the slots {sorted(SLOTS)}, "
                        f"but Tensor has {sorted(_slot_names(tensor))}: write the new ones in "
                        "_tensor as tensor.set_array does")
    global TENSOR, GRAPH, IDS, ENTRIES, SCALARS, SLOW_BINARY, SLOW_ADD_NODE, FAILURE
    global OFF_GRAPH, OFF_ID, OFF_TYPE, OFF_NODE, OFF_INDEX
    global OFF_VALUE, OFF_BASE, OFF_LAZY, OFF_GRAD, OFF_HELD
    OFF_GRAPH, OFF_ID, OFF_TYPE = _slot(tensor, "graph"), _slot(tensor, "id"), _slot(tensor, "type")
    OFF_NODE, OFF_INDEX = _slot(tensor, "node"), _slot(tensor, "index")
    OFF_VALUE, OFF_BASE, OFF_LAZY = _slot(tensor, "_value"), _slot(tensor, "_base"), \
        _slot(tensor, "_lazy")
    OFF_GRAD, OFF_HELD = _slot(tensor, "grad"), _slot(tensor, "_held")
    TENSOR, GRAPH, IDS, ENTRIES, SCALARS = tensor, graph, ids, entries, scalars
    SLOW_BINARY, SLOW_ADD_NODE, FAILURE = slow_binary, slow_add_node, failure


def busy(Py_ssize_t change):
    """A thread started (+1) or stopped (-1) recording or being lazy."""
    global BUSY
    BUSY += change


cdef inline PyObject* _get(object t, Py_ssize_t offset) noexcept:
    """A Tensor's slot (borrowed; NULL when unset)."""
    return (<PyObject**>((<char*><PyObject*>t) + offset))[0]


cdef inline void _put(object t, Py_ssize_t offset, object value) noexcept:
    """Set a slot of a Tensor just allocated (every slot still NULL)."""
    Py_INCREF(value)
    (<PyObject**>((<char*><PyObject*>t) + offset))[0] = <PyObject*>value


cdef object _tensor(cnp.ndarray array, object type, Py_ssize_t nbytes):
    """A new Tensor owning ``array`` of ``type``: tensor.wrap(array, type) in C."""
    t = PyType_GenericAlloc(<PyTypeObject*>TENSOR, 0)
    _put(t, OFF_GRAPH, GRAPH)
    _put(t, OFF_ID, next(IDS))
    _put(t, OFF_NODE, None)
    _put(t, OFF_INDEX, ZERO)
    _put(t, OFF_TYPE, type)
    _put(t, OFF_VALUE, array)
    _put(t, OFF_BASE, None)
    _put(t, OFF_LAZY, None)
    _put(t, OFF_GRAD, None)
    cdef Held held = Held.__new__(Held)
    held.hold(nbytes)
    _put(t, OFF_HELD, held)
    return t


cdef inline object _value_of(object t):
    """A Tensor's array if the C path can hand it to a kernel (computed, C-contiguous), else
    None."""
    cdef PyObject* p = _get(t, OFF_VALUE)
    if p == NULL:
        return None
    value = <object>p
    if not cnp.PyArray_Check(value) or not cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>value):
        return None
    return value


cdef class Entry:
    """What running one (op, attributes, input types) needs: output types, and either the view
    offset or the backend's eager launcher and its workspace bytes. ``run`` is the C path of a
    simple entry (one output, no workspace, no view); dispatch.py runs the others."""

    cdef public object opdef, attrs, kernel, launcher, view
    cdef public tuple types, in_types
    cdef public Py_ssize_t workspace
    cdef public bint widened     # a half-precision op run in float32 between casts (dispatch.py)
    cdef readonly bint simple
    cdef bint one_dtype          # its inputs have one dtype (Python's operators need no cast)
    cdef Launcher cpu            # the launcher itself when it is the CPU's: called in C
    cdef object out_type
    cdef object x_type, y_type   # the input types (None past their count), compared by identity
    cdef Py_ssize_t n_inputs, out_nbytes
    cdef int out_nd, out_typenum
    cdef cnp.npy_intp out_dims[cnp.NPY_MAXDIMS]

    def ready(self):
        """Derive the C path's fields once dispatch has set the others."""
        cdef Py_ssize_t i
        self.n_inputs = len(self.in_types)
        self.simple = (self.view is None and len(self.types) == 1 and not self.workspace
                       and not self.widened and 1 <= self.n_inputs <= MAX_FAST_INPUTS)
        self.cpu = self.launcher if isinstance(self.launcher, Launcher) else None
        if not self.simple:
            return
        self.x_type = self.in_types[0]
        self.y_type = self.in_types[1] if self.n_inputs == 2 else None
        self.one_dtype = self.y_type is None or self.y_type.dtype == self.x_type.dtype
        self.out_type = self.types[0]
        shape = self.out_type.shape
        self.out_nd = len(shape)
        for i in range(self.out_nd):
            self.out_dims[i] = shape[i]
        self.out_typenum = self.out_type.dtype.num
        self.out_nbytes = self.out_type.nbytes

    def run(self, inputs):
        """The output Tensors of a simple entry on ``inputs`` (Tensors of its input types)."""
        if len(inputs) == 1:
            return (self._run(inputs[0], None, inputs),)
        return (self._run(inputs[0], inputs[1], inputs),)

    cdef object _run(self, x, y, inputs):
        cdef char* pointers[MAX_FAST_INPUTS + 1]
        cdef int status
        xv = _value_of(x)
        yv = _value_of(y) if y is not None else None
        out = cnp.PyArray_EMPTY(self.out_nd, self.out_dims, self.out_typenum, 0)
        if self.cpu is None or xv is None or (y is not None and yv is None):
            # another backend's launcher, or an array the buffer protocol must judge
            values = (x._value, out) if y is None else (x._value, y._value, out)
            status = self.launcher(values)
        else:
            pointers[0] = cnp.PyArray_BYTES(<cnp.ndarray>xv)
            if y is None:
                pointers[1] = cnp.PyArray_BYTES(<cnp.ndarray>out)
            else:
                pointers[1] = cnp.PyArray_BYTES(<cnp.ndarray>yv)
                pointers[2] = cnp.PyArray_BYTES(<cnp.ndarray>out)
            status = self.cpu.launch(pointers)
        if status:
            raise FAILURE(self, status, inputs if inputs is not None else (x, y))
        return _tensor(out, self.out_type, self.out_nbytes)


cdef class Op:
    """One op's Entries by its inputs' types, the last one used tried first."""

    cdef str name
    cdef Entry last
    cdef dict by_types  # (id of each input type) -> Entry, which keeps those types alive
    cdef tuple last_number  # (a Python number, a dtype, its tensor): the one met last

    def __cinit__(self, str name):
        self.name = name
        self.by_types = {}

    cdef Entry find(self, x_type, y_type):
        """The simple Entry of this op on these types (y_type None: one input), or None."""
        cdef Entry entry = self.last
        if entry is not None and entry.x_type is x_type and entry.y_type is y_type:
            return entry
        key = (id(x_type), id(y_type))
        entry = self.by_types.get(key)
        if entry is None:
            found = ENTRIES.get((self.name, (), x_type) if y_type is None else
                                (self.name, (), x_type, y_type))
            if type(found) is not Entry or not (<Entry>found).simple:
                return None
            entry = found
            self.by_types[key] = entry
        if entry.x_type is not x_type or entry.y_type is not y_type:
            return None
        self.last = entry
        return entry


cdef dict OPS = {}  # op name -> Op


cdef Op _op(str name):
    cdef Op op = OPS.get(name)
    if op is None:
        op = OPS[name] = Op(name)
    return op


def clear():
    """Forget the Entries found (dispatch.clear_cache)."""
    cdef Op op
    for op in OPS.values():
        op.last = None
        op.last_number = None
        op.by_types.clear()


@cython.no_gc  # it holds a tuple of Tensors, which never refer back to it
cdef class Made:
    """What ``add_node`` returns when it keeps no Node: the outputs."""

    cdef readonly tuple outputs


cdef object _scalar_key(value, dtype):
    # dispatch._scalar_key: a float's sign is part of its key (-0.0 == 0.0)
    if type(value) is float:
        return (float, value, dtype, copysign(1.0, <double>value))
    return (type(value), value, dtype)


cdef object _number(Op op, value, dtype):
    """The tensor dispatch lifted Python number ``value`` to as ``dtype``, or None. The same
    number object as last time (a loop's constant) is found by identity, which also tells
    -0.0 from 0.0 and 1 from 1.0."""
    cdef tuple last = op.last_number
    if last is not None and last[0] is value and last[1] is dtype:
        return last[2]
    t = SCALARS.get(_scalar_key(value, dtype))
    if t is not None:
        op.last_number = (value, dtype, t)
    return t


cdef object _binary(Op op, a, b, bint swapped):
    """``a <op> b`` (``b <op> a`` when ``swapped``) for Python's operators on a Tensor."""
    cdef Entry entry
    if BUSY == 0 and _computed(a):
        a_type = <object>_get(a, OFF_TYPE)
        kind = type(b)
        other = None
        if kind is TENSOR:
            if _computed(b):
                other = b
        elif kind is float or kind is int:
            other = _number(op, b, a_type.dtype)
        if other is not None:
            o_type = <object>_get(other, OFF_TYPE)
            entry = op.find(o_type, a_type) if swapped else op.find(a_type, o_type)
            if entry is not None and entry.one_dtype:  # else functional casts first
                return entry._run(other, a, None) if swapped else entry._run(a, other, None)
    return SLOW_BINARY(op.name, a, b, swapped)


cdef Op ADD = _op("add")
cdef Op SUB = _op("sub")
cdef Op MUL = _op("mul")
cdef Op DIV = _op("div")


def add(a, b): return _binary(ADD, a, b, False)
def radd(a, b): return _binary(ADD, a, b, True)
def sub(a, b): return _binary(SUB, a, b, False)
def rsub(a, b): return _binary(SUB, a, b, True)
def mul(a, b): return _binary(MUL, a, b, False)
def rmul(a, b): return _binary(MUL, a, b, True)
def truediv(a, b): return _binary(DIV, a, b, False)
def rtruediv(a, b): return _binary(DIV, a, b, True)


def add_node(graph, op, inputs, attrs, types=None, location=None):
    """The eager graph's ``add_node``: a cached simple op on computed Tensors runs here, the rest
    in Python (dispatch.EagerGraph._add_node)."""
    cdef Entry entry
    cdef Py_ssize_t n
    cdef Made made
    if BUSY == 0 and type(op) is str and type(inputs) is tuple:
        n = len(<tuple>inputs)
        if n == 1 or n == 2:
            x = (<tuple>inputs)[0]
            y = (<tuple>inputs)[1] if n == 2 else None
            if _computed(x) and (y is None or _computed(y)):
                x_type = <object>_get(x, OFF_TYPE)
                y_type = None if y is None else <object>_get(y, OFF_TYPE)
                entry = _op(op).find(x_type, y_type) if not attrs else \
                    _with_attrs(op, attrs, x_type, y_type)
                if entry is not None:
                    made = Made.__new__(Made)
                    made.outputs = (entry._run(x, y, inputs),)
                    return made
    return SLOW_ADD_NODE(graph, op, inputs, attrs, types, location)


cdef Entry _with_attrs(str op, attrs, x_type, y_type):
    """The simple Entry of ``op`` with attributes, by dispatch's own key, or None."""
    if type(attrs) is not dict:
        return None
    items = tuple((<dict>attrs).items())
    try:
        found = ENTRIES.get((op, items, x_type) if y_type is None else (op, items, x_type, y_type))
    except TypeError:  # an attribute that is not hashable: never cached
        return None
    return found if type(found) is Entry and (<Entry>found).simple else None


cdef inline bint _computed(v):
    """A Tensor (of any subclass) whose value is not pending in a lazy graph."""
    return isinstance(v, TENSOR) and _get(v, OFF_VALUE) != NULL \
        and <object>_get(v, OFF_VALUE) is not None
