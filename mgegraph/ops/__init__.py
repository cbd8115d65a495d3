"""Every op family registers its OpDefs on import; this package imports them all."""
from . import elementwise  # noqa: F401
from .registry import OpDef, Launch, all_ops, get_op, register  # noqa: F401
