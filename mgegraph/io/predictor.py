"""A loaded model, ready to run: ``Predictor``, what ``mg.load`` and ``mg.runtime.load`` give.

It lives with the model file it is read from; ``mgegraph.runtime`` is its public name for a
deployment (``from mgegraph import runtime; runtime.load(path)``).

>>> predictor = runtime.load("model.mgm"); (y,) = predictor.run({"x": x})
"""
from __future__ import annotations

import numpy as np

from ..ir.errors import FeedError, ModelFormatError
from .container import Limits
from .model_file import LoadedModel, read


class Predictor:
    """A loaded model: its input and output names, shapes and dtypes, and ``run``.

    >>> predictor.input_names, predictor.input_shapes  # (('x',), ((8, 3),))
    """

    def __init__(self, loaded: LoadedModel):
        self.plan, self.kind = loaded.plan, loaded.kind
        self.input_names, self.output_names = loaded.input_names, loaded.output_names
        inputs = [self.plan.slots[self.plan.feeds[n]].type for n in self.input_names]
        outputs = [self.plan.slots[s].type for s in self.plan.outputs]
        self.input_shapes = tuple(t.shape for t in inputs)
        self.input_dtypes = tuple(t.dtype for t in inputs)
        self.output_shapes = tuple(t.shape for t in outputs)
        self.output_dtypes = tuple(t.dtype for t in outputs)

    def run(self, feeds) -> list[np.ndarray]:
        """The outputs, in ``output_names`` order, for ``feeds``: a dict of input name to
        array, or the arrays in ``input_names`` order."""
        if isinstance(feeds, (list, tuple)):
            if len(feeds) != len(self.input_names):
                raise FeedError(f"run() got {len(feeds)} inputs, the model takes "
                                f"{len(self.input_names)}: {list(self.input_names)}")
            feeds = dict(zip(self.input_names, feeds))
        return self.plan.run(feeds)

    def __call__(self, *inputs):
        """``predictor(x)``: positional inputs; one output alone, several as a list."""
        outs = self.run([np.asarray(a) for a in inputs])
        return outs[0] if len(outs) == 1 else outs

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in
                        zip(self.input_names, self.input_shapes, self.input_dtypes))
        return f"<mgegraph.runtime.Predictor ({ins}) -> {len(self.output_names)} outputs>"


def load(path, limits: Limits | None = None, device: str | None = None):
    """What ``mg.save`` wrote: a ``Predictor`` for a model (``.run(feeds)``, its input and
    output names, shapes and dtypes; ``.plan``), a dict of arrays for a state dict.
    ``device`` compiles the model for another device than the one it was saved from.

    >>> weights = mg.load("weights.mgm"); model.load_state_dict(weights)
    """
    loaded = read(path, limits, device)
    return loaded if isinstance(loaded, dict) else Predictor(loaded)


def load_predictor(path, limits: Limits | None = None, device: str | None = None) -> Predictor:
    """The model saved at ``path`` (``mg.save``), validated, compiled and ready to run;
    a ``ModelFormatError`` names what is wrong with a broken or hostile file, or says that
    the file holds weights only.

    >>> predictor = runtime.load("model.mgm"); outputs = predictor.run([x])
    """
    loaded = read(path, limits, device)
    if not isinstance(loaded, LoadedModel):
        raise ModelFormatError(f"model file: {path!r} holds a state dict (weights only), not "
                               "a model; mg.load it and load_state_dict the weights")
    return Predictor(loaded)
