"""The arithmetic the classic mistakes' runnable variants share (each check module's
`_…_variant`): one variance and one standardization with a switch per slip, for every norm that
subtracts a mean and divides by a root (and for `stable_var`)."""

from __future__ import annotations

import torch

# A fixed ε (the default 1e-5) where the caller gives its own: the known mistake of every exercise
# taking an `eps`, said the same way in each.
IGNORED_EPS = 1e-5


def eps_ignored(norm: str) -> str:
    """The message of the slip 'eps argument ignored' of `norm`."""
    return (
        f"Your answer ignores the `eps` it is given (it always uses 1e-5): {norm} adds the "
        "caller's ε, which matters when the variance is close to ε."
    )


def root(var: torch.Tensor, eps: float, *, eps_outside: bool = False) -> torch.Tensor:
    """√(var + ε); with `eps_outside`, the slip √var + ε."""
    return var.sqrt() + eps if eps_outside else (var + eps).sqrt()


def variance_of(
    x: torch.Tensor, dims: tuple[int, ...], *, correction: int = 0, naive: bool = False
) -> torch.Tensor:
    """σ² over `dims` (kept), with the slips: the n−1 estimator (`correction=1`), E[x²]−E[x]²
    (`naive`)."""
    if naive:
        mean = x.mean(dims, keepdim=True)
        return (x * x).mean(dims, keepdim=True) - mean * mean
    return x.var(dims, keepdim=True, correction=correction)


def standardized(
    x: torch.Tensor, dims: tuple[int, ...], eps: float, *, eps_outside: bool = False, **slips
) -> torch.Tensor:
    """(x − μ) / √(σ² + ε) over `dims`, with the slips of `variance_of` and ε outside the
    root."""
    mean = x.mean(dims, keepdim=True)
    return (x - mean) / root(variance_of(x, dims, **slips), eps, eps_outside=eps_outside)


def with_affine(
    y: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    shape: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """y·γ + β, each where given: elementwise, or per channel with γ and β viewed as `shape`
    against y ((1, −1, 1, …))."""
    if weight is not None:
        y = y * (weight if shape is None else weight.reshape(shape))
    if bias is not None:
        y = y + (bias if shape is None else bias.reshape(shape))
    return y


def eps_rstds(
    var: torch.Tensor,
    eps: float,
    *,
    eps_in: str = "everywhere",
    eps_outside: bool = False,
    fixed_eps: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """1/√(σ² + ε) as a backward pass uses it in three places: the factor of grad_x, the x̂ in
    grad_x's terms and the x̂ of grad_weight; with the ε slips: ε left out of the factor
    (`eps_in="x_hat"`: dropped in the backward only), of grad_weight's x̂ (`eps_in="not weight"`)
    or everywhere (`eps_in="nowhere"`), outside the root, or a fixed value for the caller's."""
    eps = eps if fixed_eps is None else fixed_eps
    with_eps = 1 / root(var, eps, eps_outside=eps_outside)
    without = 1 / root(var, 0.0)
    places = {
        "everywhere": (with_eps, with_eps, with_eps),
        "x_hat": (without, with_eps, with_eps),
        "not weight": (with_eps, with_eps, without),
        "nowhere": (without, without, without),
    }
    return places[eps_in]
