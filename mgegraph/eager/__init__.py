"""Eager mode: Tensors computed op by op (tensor.py, dispatch.py), GradManager's tape
(grad_manager.py), and the bridge to plans: trace (trace.py) and lazy (lazy.py)."""
