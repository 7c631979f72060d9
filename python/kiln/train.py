"""Training with kiln: forward, backward and the optimizer step compiled into one module.

    from kiln import graph as kg, train
    g = kg.Graph("mlp")
    x, y = g.input("x", "float32", [64, 2]), g.input("y", "float32", [64, 2])
    w = g.input("w", "float32", [2, 2])
    loss = kg.mean((x @ w - y) * (x @ w - y))
    t = train.Trainer(g, loss, {w: np.zeros((2, 2), np.float32)}, "adam:lr=0.01")
    for batch in data:
        t.step(x=batch_x, y=batch_y)        # the loss before the update
    t.parameter("w")                         # the numpy array the steps update in place
"""
import numpy as np

from . import _kiln
from .graph import add_optimizer_step

__all__ = ["Trainer"]


class Trainer:
    """Compiles `graph` with the gradient of the scalar `loss` and an optimizer step
    ("sgd:lr=0.1,momentum=0.9", "adam:lr=1e-3") over `params` (graph inputs, mapped to their
    starting values, which are copied). Parameters and optimizer state live here as numpy
    arrays that every step updates in place."""

    def __init__(self, graph, loss, params, optimizer="adam", device="cpu"):
        self._state = {}
        for var, value in params.items():
            self._state[var.name] = np.array(value, dtype=var.dtype, copy=True, order="C")
        graph.set_outputs([loss])
        for var in add_optimizer_step(loss, list(params), optimizer):
            shape = tuple(var.shape)
            self._state[var.name] = np.zeros(shape, dtype=var.dtype)
        self.function = _kiln.compile_graph(graph, device, None)

    def step(self, **batch):
        """One training step on a batch (the data inputs by name); returns the loss."""
        args = dict(self._state)
        for name, value in batch.items():
            if name in self._state:
                raise ValueError(f"'{name}' is a parameter or optimizer state, not a data input")
            args[name] = value
        return float(np.asarray(self.function(**args)[0]))

    def parameter(self, name):
        return self._state[name]

    @property
    def state(self):
        """Every parameter and optimizer-state array, by graph input name."""
        return dict(self._state)
