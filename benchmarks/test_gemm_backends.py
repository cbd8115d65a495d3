"""GEMM backends (SciPy's OpenBLAS, NumPy's OpenBLAS, MKL) on the mlp-* shapes, one group per shape.

Backends form the outer loop so that every MKL run comes after the OpenBLAS ones: MKL's OpenMP
threads spin after each call and would otherwise steal the CPUs of the next OpenBLAS benchmark.
"""
import functools

import pytest

import gemm_backends as gb

SHAPES = {g.label: g for g in gb.SHAPES}


@functools.cache
def built(backend, label):
    return gb.build(backend, SHAPES[label])


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("backend", gb.BACKENDS)
def test_gemm(benchmark, backend, shape):
    benchmark.group = f"gemm {shape}"
    run = built(backend, shape)
    if run is None:
        pytest.skip(f"{backend} is not installed")
    benchmark.extra_info.update(run.info)
    benchmark(run)
