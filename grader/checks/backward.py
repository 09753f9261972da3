"""What every backward exercise shares, whatever the norm: what it forbids, its tolerance, and its
two edge checks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.checks.core import Arrays, Check, Exercise, Mistake, hidden, known_mistake
from grader.checks.library import AUTOGRAD, NORMALIZATIONS, forbid

# A derived gradient in float64 is within a few roundings of the reference (at most 5e-15 here,
# measured over the hidden checks of five seeds); finite differences are off by about 1e-9 (h²
# plus the rounding over h) and float32 by about 1e-7, so this tolerance tells them apart.
DERIVED = {"rtol": 1e-9, "atol": 1e-11}


def backward_exercise(**declared: Any) -> Exercise:
    """A backward exercise: the gradient is derived, so neither the library's normalizations
    (their backward kernels among them) nor autograd nor finite differences may compute it, and
    float64 answers are judged within a few roundings of the float64 reference."""
    return Exercise(forbidden=forbid(AUTOGRAD, *NORMALIZATIONS), **DERIVED, **declared)


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
            twin=0.25,  # the student's own check() sees an ε slip too
        ),
    )


# The magnitude of x in every backward check but ε's: there σ ≥ 5e6, so ε=1e-5 moves the gradient
# by ε/σ ≤ 2e-12 when outside the root and ε/2σ² when left out or fixed otherwise, inside
# `DERIVED`: an ε slip costs the check on ε alone. Finite differences are off by ~1e-3 there.
LARGE = 1e7


def eps_slips(variant: Callable[..., Any], norm: str) -> tuple[Mistake, ...]:
    """The ε slips of a backward pass as known mistakes of `variant` (`variants.eps_rstds`)."""
    return tuple(
        known_mistake(
            variant,
            name,
            f"{said} ({norm} adds the caller's ε to the variance, under the "
            "root, in every 1/σ of the backward: it matters when the variance is close to ε).",
            **switches,
        )
        for name, said, switches in (
            ("eps left out", "ε is left out of your 1/σ", {"eps_in": "nowhere"}),
            (
                "eps outside the square root",
                "ε is added outside the square root, 1/(σ+ε)",
                {"eps_outside": True},
            ),
            (
                "eps argument ignored",
                "Your backward ignores the `eps` it is given (it always uses 1e-5)",
                {"fixed_eps": 1e-5},
            ),
            (
                "eps dropped in the factor of grad_x",
                "The factor 1/σ of your grad_x leaves ε out (x̂ keeps it)",
                {"eps_in": "x_hat"},
            ),
            (
                "eps dropped in grad_weight's x̂",
                "The x̂ of your grad_weight leaves ε out",
                {"eps_in": "not weight"},
            ),
        )
    )
