"""Op family (being written)."""
__all__ = []
