"""Checks for notebook 02's `batch_norm_backward`: the gradients of training-mode BatchNorm.

The answer is judged against the closed form (which autograd matches to float64 rounding) in
float64, where a correct answer is within ~1e-15 and every slip moves some gradient by order
one: each path through the statistics (the mean, the variance) carries a term as large as the
direct one; the unbiased variance rescales x̂ by √(n/(n−1)), 7 % for the 8 values per channel of
the visible check; sums over N only leave grad_weight and grad_bias of shape (C, L).

Rubric (6 points): grad_x through both statistics, in a weighted (N, C) batch, 2; the set of
values per channel, over N and L, and the sums of grad_weight and grad_bias over the same set
2 (an (N, C, L) batch) and 1 (L = C, where channels taken as the last dim run silently); no
weight 0.5; ε close to the variance 0.5. Either path left out, or the unbiased variance, keeps
0; γ left out of grad_x 0.5 (the check without a weight).

The values that share one γ and one β, a channel over N and L, are the structure (`Structure`):
grad_weight and grad_bias summed over other dims (over N only) are a wrong structure, however
right grad_x is, and keep at most 0.5 (not the 3 of the checks they pass), as much as a slip.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from grader.checks.backward import LARGE, backward_edges, backward_exercise, eps_slips
from grader.checks.core import Arrays, Structure, hidden, known_mistake, visible
from grader.checks.variants import eps_rstds, standardized
from grader.grading.sandboxed.probes import probe_batch_norm_backward
from grader.reference import functional as ref
from normcheck.gradients import BATCH_NORM_BACKWARD as BACKWARD_PROPERTIES


def _backward_variant(
    grad_out,
    x,
    weight=None,
    eps=1e-5,
    *,
    mean_path=True,
    var_path=True,
    correction=0,
    use_weight=True,
    sums_over_n_only=False,
    weight_x_hat_per_sample=False,
    **eps_slips,
):
    """The closed-form backward with a switch per classic slip (and ε's, `variants.eps_rstds`);
    defaults are correct."""
    dims = (0, *range(2, x.dim()))
    n = x.numel() // x.shape[1]
    mean = x.mean(dims, keepdim=True)
    var = x.var(dims, keepdim=True, correction=correction)
    rstd, rstd_x_hat, rstd_weight = eps_rstds(var, eps, **eps_slips)
    x_hat = (x - mean) * rstd_x_hat
    per_channel = (1, -1, *[1] * (x.dim() - 2))
    g = grad_out * weight.view(per_channel) if weight is not None and use_weight else grad_out
    grad_x = g
    if mean_path:
        grad_x = grad_x - g.mean(dims, keepdim=True)
    if var_path:  # d var / d x_j = 2 (x_j − μ) / (n − correction)
        grad_x = grad_x - x_hat * (g * x_hat).sum(dims, keepdim=True) / (n - correction)
    grad_x = grad_x * rstd
    if weight is None:
        return grad_x, None, None
    summed = (0,) if sums_over_n_only else dims
    x_hat_weight = (x - mean) * rstd_weight
    if weight_x_hat_per_sample:  # LayerNorm's statistics, over every dim but 0
        x_hat_weight = standardized(x, tuple(range(1, x.dim())), eps)
    return grad_x, (grad_out * x_hat_weight).sum(summed), grad_out.sum(summed)


def _case(rng, *shape, weight=True, scale=LARGE, eps=1e-5) -> Arrays:
    """float64 input whose channels have their own offsets and spreads (of order `scale`), and
    an upstream gradient."""
    per_channel = (1, shape[1], *[1] * (len(shape) - 2))
    x = rng.normal(0.0, 2.0 * max(scale, 1.0), per_channel) + rng.uniform(
        0.5, 2.0, per_channel
    ) * scale * (rng.standard_normal(shape))
    case = {"grad_out": rng.standard_normal(shape), "x": x, "eps": np.array(eps)}
    if weight:
        case["weight"] = rng.normal(1.0, 0.5, shape[1])
    return case


_slip = partial(known_mistake, _backward_variant)

BATCH_NORM_BACKWARD = backward_exercise(
    name="batch_norm_backward",
    reference=ref.batch_norm_backward,
    probe=probe_batch_norm_backward,
    properties=BACKWARD_PROPERTIES,
    forms=(("x", "2-d"), ("x", "3-d")),
    structure=Structure(
        "one γ and one β per channel: grad_weight and grad_bias summed over N and every dim "
        "after C",
        cap=0.5,
    ),
    mistakes=(
        _slip(
            "statistics treated as constants",
            "Your grad_x treats the batch mean and variance as constants; both depend on every "
            "value of the channel, which adds the two subtracted terms of the derivation.",
            mean_path=False,
            var_path=False,
        ),
        _slip(
            "path through the mean left out",
            "Your grad_x misses the path through the batch mean μ: subtract the channel's mean "
            "of the upstream gradient (the term in ⟨g⟩).",
            mean_path=False,
        ),
        _slip(
            "path through the variance left out",
            "Your grad_x misses the path through the batch variance σ²: subtract x̂ times the "
            "channel's mean of g·x̂ (the term in ⟨g x̂⟩).",
            var_path=False,
        ),
        _slip(
            "unbiased variance",
            "Your gradient is that of a BatchNorm normalizing with the unbiased variance (n−1); "
            "training normalizes with the biased one (÷ n), so x̂, 1/σ and the variance path "
            "all use n.",
            correction=1,
        ),
        _slip(
            "weight left out of grad_x",
            "Your grad_x ignores γ: the gradient reaching x̂ is grad_out·γ, per channel.",
            use_weight=False,
        ),
        _slip(
            "sums over N only",
            "Your grad_weight and grad_bias are summed over the batch dim only; every value of "
            "a channel shares its γ and β, so sum over N and L (every dim except dim 1).",
            sums_over_n_only=True,
            structural=True,
        ),
        _slip(
            "grad_weight with LayerNorm's x̂",
            "Your grad_weight sums grad_out·x̂ with x̂ normalized per sample (LayerNorm's "
            "statistics); γ multiplies the forward's x̂, normalized per channel over the batch.",
            weight_x_hat_per_sample=True,
        ),
        *eps_slips(_backward_variant, "BatchNorm"),
    ),
    checks=(
        visible(
            2,
            "a float64 (8, 3) batch with a weight, against autograd",
            lambda rng: _case(rng, 8, 3),
        ),
        hidden(
            2,
            "an (N, C, L) batch: statistics, grad_weight and grad_bias over N and L",
            lambda rng: _case(rng, 4, 3, 5),
            twin=1,
        ),
        hidden(
            1, "a (16, 4, 4) batch, L = C: channels are dim 1", lambda rng: _case(rng, 16, 4, 4)
        ),
        *backward_edges(_case, unweighted=(6, 5), near_eps=(16, 3), scale=0.02, sets="channels"),
    ),
)

EXERCISES = (BATCH_NORM_BACKWARD,)
