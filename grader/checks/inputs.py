"""Input-drawing helpers shared by the check modules."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Case = Callable[[np.random.Generator], dict[str, np.ndarray]]


def randn(rng: np.random.Generator, *shape: int, dtype=np.float32) -> np.ndarray:
    """Standard normal values of `shape`, in `dtype` (float32 unless said)."""
    return rng.standard_normal(shape).astype(dtype)


def with_spread(
    rng: np.random.Generator, x: np.ndarray, group: int, low: float = 0.8, high: float = 1.5
) -> np.ndarray:
    """`x` with each run of `group` consecutive values (in C order) rescaled about its mean to a
    biased std drawn from [low, high].

    A few standard normal values now and then have a tiny variance, where ε's placement moves
    the output by more than the tolerance. A check about something else (which variance
    estimator?) would then fail an answer whose only slip is ε, on some grading seeds and not on
    others: the same notebook would not get the same score twice.
    """
    runs = x.astype(np.float64).reshape(-1, group)
    centred = runs - runs.mean(1, keepdims=True)
    scale = rng.uniform(low, high, (len(runs), 1)) / centred.std(1, keepdims=True)
    return (runs.mean(1, keepdims=True) + centred * scale).reshape(x.shape).astype(x.dtype)


def judging(part: str, case: Case) -> Case:
    """`case`, of which the probe keeps only `part` (its outputs, its running statistics, its
    evaluation: `grader.grading.sandboxed.probes.judged`), so that part earns its own points."""
    return lambda rng: case(rng) | {"judged": np.array(part)}
