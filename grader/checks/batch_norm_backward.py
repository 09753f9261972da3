"""Checks for notebook 02's `batch_norm_backward`: the gradients of BatchNorm in either mode.

What sets it apart from LayerNorm's backward is the point: in training the statistics are the
batch's, so every sample's gradient depends on the whole batch (LayerNorm's closed form, over a
channel's values across N and L); in evaluation they are the running statistics, constants, and
grad_x is grad_out·γ/√(running_var + ε), sample by sample. The answer is judged against the
reference (which autograd through `F.batch_norm` matches to float64 rounding) in float64, where
a correct answer is within ~1e-15 and every slip moves some gradient by order one: each path
through the batch statistics carries a term as large as the direct one, the running statistics
lie away from the batch's (the running variance 1.5 to 3 times the batch's), the unbiased
variance rescales x̂ by √(n/(n−1)), and statistics over N alone differ from N and L's.

Rubric (6 points): training 4 (grad_x through both statistics in a weighted (N, C) batch 1;
over N and L, with grad_weight and grad_bias summed over the same set, on an (N, C, L) batch
1.5 and at L = C 0.5; no weight 0.5; ε close to the variance 0.5), evaluation 2 (an (N, C)
batch 1, an (N, C, L) batch 1). Each mode's formula in the other mode costs that mode's points:
evaluation's in training keeps 2, training's in evaluation (or its coupling terms with the
running statistics) keeps 4; statistics over N only cost the training checks on (N, C, L)
batches (keeps 4); either path left out, or the unbiased variance, keeps the evaluation's 2; γ
left out of grad_x 0.5 (the check without a weight).

The values that share one γ and one β, a channel over N and L, are the structure (`Structure`):
grad_weight and grad_bias summed over other dims (over N only) are a wrong structure, however
right grad_x is, and keep at most 0.5 (not the checks they pass), as much as a slip.
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
    running_mean,
    running_var,
    weight=None,
    training=False,
    eps=1e-5,
    *,
    batch_stats_in_eval=False,
    running_stats_in_training=False,
    coupled_in_eval=False,
    stats_over_n_only=False,
    mean_path=True,
    var_path=True,
    correction=0,
    use_weight=True,
    sums_over_n_only=False,
    weight_x_hat_per_sample=False,
    **eps_slips,
):
    """The closed-form backward of either mode with a switch per classic slip (and ε's,
    `variants.eps_rstds`); defaults are correct."""
    dims = (0, *range(2, x.dim()))
    per_channel = (1, -1, *[1] * (x.dim() - 2))
    batch_stats = (training and not running_stats_in_training) or batch_stats_in_eval
    stats_dims = (0,) if stats_over_n_only else dims
    n = x.numel() // x[0].numel() if stats_over_n_only else x.numel() // x.shape[1]
    if batch_stats:
        mean = x.mean(stats_dims, keepdim=True)
        var = x.var(stats_dims, keepdim=True, correction=correction)
    else:
        mean, var = running_mean.view(per_channel), running_var.view(per_channel)
    rstd, rstd_x_hat, rstd_weight = eps_rstds(var, eps, **eps_slips)
    x_hat = (x - mean) * rstd_x_hat
    g = grad_out * weight.view(per_channel) if weight is not None and use_weight else grad_out
    grad_x = g
    if batch_stats or coupled_in_eval:  # the batch's statistics depend on every value of it
        if mean_path:
            grad_x = grad_x - g.mean(stats_dims, keepdim=True)
        if var_path:  # d var / d x_j = 2 (x_j − μ) / (n − correction)
            grad_x = grad_x - x_hat * (g * x_hat).sum(stats_dims, keepdim=True) / (n - correction)
    grad_x = grad_x * rstd
    if weight is None:
        return grad_x, None, None
    summed = (0,) if sums_over_n_only else dims
    x_hat_weight = (x - mean) * rstd_weight
    if weight_x_hat_per_sample:  # LayerNorm's statistics, over every dim but 0
        x_hat_weight = standardized(x, tuple(range(1, x.dim())), eps)
    return grad_x, (grad_out * x_hat_weight).sum(summed), grad_out.sum(summed)


def _case(rng, *shape, weight=True, scale=LARGE, eps=1e-5, training=True) -> Arrays:
    """float64 input whose channels have their own offsets and spreads (of order `scale`), an
    upstream gradient, and running statistics near (never at) the batch's: read in evaluation,
    to be ignored in training."""
    per_channel = (1, shape[1], *[1] * (len(shape) - 2))
    x = rng.normal(0.0, 2.0 * max(scale, 1.0), per_channel) + rng.uniform(
        0.5, 2.0, per_channel
    ) * scale * (rng.standard_normal(shape))
    dims = (0, *range(2, len(shape)))
    case = {
        "grad_out": rng.standard_normal(shape),
        "x": x,
        "running_mean": x.mean(dims) + scale * rng.uniform(0.5, 1.0, shape[1]),
        "running_var": x.var(dims) * rng.uniform(1.5, 3.0, shape[1]),
        "training": np.array(training),
        "eps": np.array(eps),
    }
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
            "evaluation's formula in training",
            "In training your grad_x treats the statistics as constants, the running ones: "
            "training normalizes with the batch's, which depend on every sample of it, so "
            "grad_x has the two subtracted terms of the derivation and uses the batch's σ.",
            running_stats_in_training=True,
        ),
        _slip(
            "training's formula in evaluation",
            "In evaluation your gradient is training's, through the batch statistics; "
            "evaluation normalizes with the running statistics, constants: grad_x is "
            "grad_out·γ/√(running_var + ε), sample by sample, and x̂ uses the running mean.",
            batch_stats_in_eval=True,
        ),
        _slip(
            "samples coupled in evaluation",
            "In evaluation your grad_x subtracts the terms through the statistics; the running "
            "statistics are constants, so no sample's gradient depends on the others: grad_x "
            "is grad_out·γ/√(running_var + ε).",
            coupled_in_eval=True,
        ),
        _slip(
            "statistics over N only",
            "Your training statistics run over the batch dim only, one per (channel, position); "
            "BatchNorm pools each channel over N and L, and so must the two terms of grad_x.",
            stats_over_n_only=True,
        ),
        _slip(
            "statistics treated as constants",
            "In training your grad_x treats the batch mean and variance as constants; both "
            "depend on every value of the channel, which adds the two subtracted terms of the "
            "derivation.",
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
            1,
            "training: a float64 (8, 3) batch with a weight, against autograd",
            lambda rng: _case(rng, 8, 3),
        ),
        visible(
            1,
            "evaluation: a float64 (8, 3) batch, normalized with the running statistics",
            lambda rng: _case(rng, 8, 3, training=False),
        ),
        hidden(
            1.5,
            "training on an (N, C, L) batch: statistics, grad_weight and grad_bias over N and L",
            lambda rng: _case(rng, 4, 3, 5),
            twin=0.5,
        ),
        hidden(
            0.5,
            "training on a (16, 4, 4) batch, L = C: channels are dim 1",
            lambda rng: _case(rng, 16, 4, 4),
        ),
        hidden(
            1,
            "evaluation on an (N, C, L) batch: one factor per channel",
            lambda rng: _case(rng, 4, 3, 5, training=False),
        ),
        *backward_edges(_case, unweighted=(6, 5), near_eps=(16, 3), scale=0.02, sets="channels"),
    ),
)

EXERCISES = (BATCH_NORM_BACKWARD,)
