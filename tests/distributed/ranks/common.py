"""What the rank programs share: the report line a test reads, and each rank's data, which
every rank can make for every other (seeded by the rank), so a rank checks a collective's
result against NumPy on the data of all."""
from __future__ import annotations

import json

import numpy as np
from ml_dtypes import bfloat16

DTYPES = ("float32", "float64", "int32", "int64", "bool", "uint8", "int8", "int16", "float16",
          "bfloat16")
HALF = ("float16", "bfloat16")


def report(rank: int, **values) -> None:
    print("REPORT " + json.dumps({"rank": rank, **values}), flush=True)


def data(rank: int, shape, dtype: str, salt: int = 0) -> np.ndarray:
    """Rank ``rank``'s array: small integers for integer types (so sums stay in range),
    normal numbers for floats."""
    rng = np.random.default_rng([salt, rank, len(shape)] + list(shape))
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("float32", "float64", "float16"):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == "bfloat16":
        return rng.standard_normal(shape).astype(bfloat16)
    low = 0 if dtype == "uint8" else -20
    return rng.integers(low, 20, shape).astype(dtype)


def summed(arrays, dtype: str) -> np.ndarray:
    """NumPy's sum of the ranks' arrays in their dtype (bool: "or"); half types summed in
    float32 and rounded once, as the collectives do."""
    stack = np.stack(arrays)
    if dtype in HALF:
        return np.add.reduce(stack.astype(np.float32)).astype(stack.dtype)
    return np.add.reduce(stack, dtype=stack.dtype)


def assert_close(got, want, dtype: str, what: str) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    tol = {"float32": 1e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 1e-2}.get(dtype)
    if tol is None:
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, err_msg=what)
