"""Backends defined by the tests: the NumPy reference backend (reference.py)."""
