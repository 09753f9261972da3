"""The checks every backward exercise shares: its two edges, whatever the norm."""

from __future__ import annotations

from collections.abc import Callable

from grader.checks.core import Arrays, Check, hidden


def backward_edges(
    case: Callable[..., Arrays],
    unweighted: tuple[int, ...],
    near_eps: tuple[int, ...],
    scale: float,
    sets: str,
) -> tuple[Check, Check]:
    """Without a weight (grad_x alone, no gradient for it), and with the variance of each of the
    norm's `sets` (rows, channels) close to the caller's ε: `case(rng, *shape, weight=…,
    scale=…, eps=…)` draws the inputs, of shape `unweighted` and `near_eps`."""
    return (
        hidden(0.5, "no weight: grad_x alone", lambda rng: case(rng, *unweighted, weight=False)),
        hidden(
            0.5,
            f"{sets} whose variance is close to ε, with eps=1e-3 given",
            lambda rng: case(rng, *near_eps, scale=scale, eps=1e-3),
            rtol=1e-6,
            atol=1e-6,
        ),
    )
