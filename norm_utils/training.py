"""Notebook 05's experiments: a deep MLP on scikit-learn's bundled digits, trained with and
without normalization, and what is recorded while it trains.

`sklearn.datasets.load_digits` reads a file inside the scikit-learn wheel (1,797 8×8 images of
the UCI optical digits), so nothing is downloaded; `digit_arrays` reads that file itself, since
importing scikit-learn (and SciPy with it) takes seconds. Everything is float32 and small enough
that a run takes a fraction of a second on one core.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "Digits",
    "Run",
    "accuracy",
    "deep_mlp",
    "digit_arrays",
    "digits",
    "evaluated",
    "train",
]

Norm = Callable[[int], nn.Module] | None


@dataclass(frozen=True)
class Digits:
    """A train/test split of the digits, pixels scaled to [0, 1] (they are 0..16 in the file)."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor


@functools.cache
def digit_arrays() -> tuple[np.ndarray, np.ndarray]:
    """`load_digits()`'s images, pixels scaled to [0, 1] as float32 (1797, 64), and its labels
    (1797,): read from the file it reads (each row 64 pixels 0..16, then the label), without
    importing scikit-learn."""
    spec = importlib.util.find_spec("sklearn")  # finds the package without running it
    assert spec is not None and spec.submodule_search_locations, "scikit-learn is not installed"
    folder = Path(next(iter(spec.submodule_search_locations)))
    table = np.loadtxt(folder / "datasets" / "data" / "digits.csv.gz", delimiter=",")
    return (table[:, :-1] / 16).astype(np.float32), table[:, -1].astype(np.int64)


def digits(n_train: int = 1200, seed: int = 0) -> Digits:
    """The 1,797 digits, shuffled with `seed`: the first `n_train` to train on, the rest to test."""
    images, labels = digit_arrays()
    order = np.random.default_rng(seed).permutation(len(labels))
    x, y = torch.from_numpy(images[order]), torch.from_numpy(labels[order])
    return Digits(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def deep_mlp(norm: Norm, depth: int = 10, width: int = 64, d_in: int = 64) -> nn.Sequential:
    """`depth` hidden blocks Linear → norm → ReLU (no norm if `norm` is None), then a Linear to
    the 10 classes. He initialization (weights of variance 2/fan_in, zero biases), which keeps a
    plain ReLU net's activations at one scale at initialization: the plain net's best chance."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(d_in if i == 0 else width, width)]
        layers += [norm(width)] if norm is not None else []
        layers += [nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, 10))
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.zeros_(m.bias)
    return model


@dataclass
class Run:
    """What one training run recorded."""

    loss: list[float] = field(default_factory=list)  # each step's mini-batch loss
    test_accuracy: list[float] = field(default_factory=list)  # after each epoch, eval mode
    test_loss: list[float] = field(default_factory=list)  # every `evaluate_every` steps, eval mode
    # per recorded step: the std of each hidden block's output, and the norm of the gradient of
    # each hidden Linear's weight
    activation_std: list[list[float]] = field(default_factory=list)
    gradient_norm: list[list[float]] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return not math.isfinite(self.loss[-1]) or self.loss[-1] > 2 * math.log(10)


def _forward(model: nn.Sequential, x: torch.Tensor, stds: list[float] | None) -> torch.Tensor:
    """The model's output; with `stds`, the std of every ReLU's output appended to it."""
    h = x
    for layer in model:
        h = layer(h)
        if stds is not None and isinstance(layer, nn.ReLU):
            stds.append(h.detach().std().item())
    return h


def evaluated(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The logits of `x`, without a graph, with the model switched to evaluation mode (it stays
    there: `train` switches it back before each step)."""
    model.eval()
    with torch.no_grad():
        return model(x)


def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """The share of `x` classified right, in evaluation mode (`evaluated`)."""
    return (evaluated(model, x).argmax(1) == y).float().mean().item()


def train(
    model: nn.Module,
    data: Digits,
    *,
    lr: float = 0.1,
    epochs: int = 8,
    batch_size: int = 64,
    momentum: float = 0.9,
    seed: int = 0,
    steps: int | None = None,
    record_every: int = 0,
    evaluate_every: int = 0,
) -> Run:
    """SGD on cross-entropy, mini-batches drawn with `seed`, for `epochs` (or only the first
    `steps` steps). With `record_every`, per-layer statistics every that many steps; with
    `evaluate_every`, the test loss in evaluation mode (`Run`). A run whose loss turns NaN stops
    there."""
    order = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    run, step = Run(), 0
    for _ in range(epochs):
        for idx in torch.randperm(len(data.y_train), generator=order).split(batch_size):
            model.train()
            x, y = data.x_train[idx], data.y_train[idx]
            recording = bool(record_every) and step % record_every == 0
            stds: list[float] | None = [] if recording else None
            loss = F.cross_entropy(_forward(model, x, stds), y)
            opt.zero_grad()
            loss.backward()
            if recording:
                run.activation_std.append(stds)
                linears = [m for m in model if isinstance(m, nn.Linear)][:-1]
                run.gradient_norm.append([m.weight.grad.norm().item() for m in linears])
            opt.step()
            run.loss.append(loss.item())
            step += 1
            if evaluate_every and step % evaluate_every == 0:
                logits = evaluated(model, data.x_test)
                run.test_loss.append(F.cross_entropy(logits, data.y_test).item())
            if not math.isfinite(run.loss[-1]) or step == steps:
                return run
        run.test_accuracy.append(accuracy(model, data.x_test, data.y_test))
    return run
