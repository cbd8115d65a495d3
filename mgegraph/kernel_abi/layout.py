"""What lowerings hand to kernels: parameter blocks packed by field name, broadcast strides,
collapsed dimensions, and the threads field of a device that plans no host threads."""
from __future__ import annotations

MAX_DIMS = 8  # mirrors nditer.pxd


def one_thread(node) -> int:
    """The threads field of a block for a device whose kernels do not read it (CUDA's grid is
    its steps'); the CPU plans its own (_kernels/lowering/threads.py)."""
    return 1


def pack(fields: tuple[str, ...], **values) -> tuple[int, ...]:
    """The ints of a kernel's parameter struct, in the order of its ``fields`` (the names a
    family declares, e.g. ``kernel_abi.conv.FIELDS``); a missing or unknown name is a
    ValueError, so a lowering and its kernel cannot disagree on the layout silently.

    >>> pack(("m", "n", "k"), k=4, m=2, n=3)
    (2, 3, 4)
    """
    missing = [f for f in fields if f not in values]
    unknown = sorted(set(values) - set(fields))
    if missing or unknown:
        raise ValueError(f"parameter block {fields}: missing fields {missing}, "
                         f"unknown fields {unknown}")
    return tuple(int(values[f]) for f in fields)


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def broadcast_strides(in_shape, out_shape) -> tuple[int, ...]:
    """Element strides of a contiguous ``in_shape`` read as ``out_shape`` (0 where broadcast)."""
    pad = len(out_shape) - len(in_shape)
    base = contiguous_strides(in_shape)
    return tuple(0 if i < pad or in_shape[i - pad] == 1 else base[i - pad]
                 for i in range(len(out_shape)))


def collapse(shape, operand_strides):
    """Merge adjacent dims that every operand (and the contiguous output) steps through evenly.

    Returns (shape, [strides per operand]) with at least one dimension.
    """
    dims = [(d, [s[i] for s in operand_strides]) for i, d in enumerate(shape) if d != 1]
    if any(d == 0 for d, _ in dims):
        return (0,), [(0,) for _ in operand_strides]
    merged: list[tuple[int, list[int]]] = []
    for size, strides in dims:
        if merged:
            prev_size, prev_strides = merged[-1]
            if all(p == s * size for p, s in zip(prev_strides, strides)):
                merged[-1] = (prev_size * size, strides)
                continue
        merged.append((size, strides))
    if not merged:
        return (1,), [(0,) for _ in operand_strides]
    if len(merged) > MAX_DIMS:
        raise ValueError(f"layout needs {len(merged)} dimensions after merging; at most {MAX_DIMS}")
    return tuple(m[0] for m in merged), [tuple(m[1][k] for m in merged)
                                         for k in range(len(operand_strides))]


def elementwise_params(opcode: int, out_shape, in_shapes, in_strides=None,
                       threads: int = 1) -> tuple[int, ...]:
    """[opcode, ndim, shape, strides per input, threads] for kernels of
    _kernels/elementwise.pyx."""
    strides = [broadcast_strides(s, out_shape) for s in in_shapes] if in_strides is None \
        else list(in_strides)
    out = contiguous_strides(out_shape)
    shape, merged = collapse(out_shape, [out] + strides)
    params = [opcode, len(shape), *shape]
    for s in merged[1:]:
        params.extend(s)
    return (*params, threads)
