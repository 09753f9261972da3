"""The arithmetic the classic mistakes' runnable variants share (each check module's
`_…_variant`): one standardization with a switch per slip, for every norm that subtracts a mean
and divides by a root."""

from __future__ import annotations

import torch


def root(var: torch.Tensor, eps: float, *, eps_outside: bool = False) -> torch.Tensor:
    """√(var + ε); with `eps_outside`, the slip √var + ε."""
    return var.sqrt() + eps if eps_outside else (var + eps).sqrt()


def standardized(
    x: torch.Tensor,
    dims: tuple[int, ...],
    eps: float,
    *,
    correction: int = 0,
    eps_outside: bool = False,
    naive: bool = False,
) -> torch.Tensor:
    """(x − μ) / √(σ² + ε) over `dims`, with the slips: the n−1 estimator (`correction=1`), ε
    outside the root, σ² as E[x²]−E[x]² (`naive`)."""
    mean = x.mean(dims, keepdim=True)
    if naive:
        var = (x * x).mean(dims, keepdim=True) - mean * mean
    else:
        var = x.var(dims, keepdim=True, correction=correction)
    return (x - mean) / root(var, eps, eps_outside=eps_outside)
