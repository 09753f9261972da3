"""Checks for notebook 02's `fold_batch_norm`: an evaluation-mode BatchNorm folded into the
Linear or convolution before it, judged against `torch.nn.utils.fusion`'s arithmetic.

Inputs are float32, as a deployed layer's are: a correct answer is within a few float32 steps
(~1e-7 relative) and is judged to 1e-4; every slip is off by more than 1e-2 on some check. The
running variances are drawn in [2, 4] (so a variance taken for the standard deviation is off by
√2 at least) or, for ε, in [1e-3, 4e-3] with eps=1e-3 (ε left out or outside the root moves the
scale by more than 10 %).
A square Linear lets the scale applied to the columns run silently, so it is named.

Rubric (6 points): the weight's rows and the bias's shift, on a Linear, 2; ε under the root 1.5;
one scale per output channel of a convolution's 4-d weight 1.5; a layer without bias and a
BatchNorm without affine parameters (the `None`s of `nn.Linear(bias=False)` and
`affine=False`) 0.5 each. An ε slip keeps 4.5; a wrong scale or shift (the variance for the
standard deviation, the columns scaled, the mean not subtracted) 0; a bias term left out 0.5.
No `Structure` caps the exercise: the one structure, the weight scaled row by row, is compared
by every check, so an answer built otherwise (columns scaled, weight unscaled) passes none.

A folded bias no known mistake matches is said as the combination it is of the terms a fold is
made of (the layer's bias b and running_mean times the scale s = γ/√(running_var + ε), unscaled,
divided by s, or times s without ε; β): "folded bias is s·b + s·running_mean + β, where
s·b − s·running_mean + β belongs". Only the coefficients are said, never a value.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from grader.checks.core import Arrays, Exercise, hidden, known_mistake, visible
from grader.checks.library import BN_FOLDING, NORMALIZATIONS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored
from grader.grading.sandboxed.probes import probe_fold
from grader.reference.fusion import fold_batch_norm
from normcheck.folding import FOLD_PROPERTIES


def _fold_variant(
    weight,
    bias,
    running_mean,
    running_var,
    gamma=None,
    beta=None,
    eps=1e-5,
    *,
    std=lambda var, eps: torch.sqrt(var + eps),
    columns=False,
    shift=True,
    use_beta=True,
    use_bias=True,
    bias_scaled=True,
    weight_scaled=True,
):
    """The fold with a switch per classic slip; defaults are correct."""
    scale = 1 / std(running_var, eps)
    if gamma is not None:
        scale = scale * gamma
    rows = scale.view(-1, *[1] * (weight.dim() - 1))
    folded_weight = weight if not weight_scaled else weight * (scale if columns else rows)
    b = bias if bias is not None and use_bias else torch.zeros_like(running_mean)
    mean = running_mean if shift else torch.zeros_like(running_mean)
    folded_bias = (b - mean) * scale if bias_scaled else b - mean * scale
    if beta is not None and use_beta:
        folded_bias = folded_bias + beta
    return folded_weight, folded_bias


def _case(rng, *shape, bias=True, affine=True, var=(2.0, 4.0), eps=1e-5) -> Arrays:
    """A layer's weight of `shape` (output units first) and the BatchNorm after it, float32."""
    out = shape[0]
    f32 = np.float32
    case = {
        "weight": rng.normal(0.0, 0.5, shape).astype(f32),
        # running statistics far from 0 and 1, as after training
        "running_mean": rng.normal(0.0, 2.0, out).astype(f32),
        "running_var": rng.uniform(*var, out).astype(f32),
        "eps": np.array(eps),
    }
    if bias:
        case["bias"] = rng.normal(0.0, 1.0, out).astype(f32)
    if affine:
        case["gamma"] = rng.uniform(0.5, 1.5, out).astype(f32)  # never near 0
        case["beta"] = rng.normal(0.0, 1.0, out).astype(f32)
    return case


_slip = partial(known_mistake, _fold_variant)

FOLD_BATCH_NORM = Exercise(
    name="fold_batch_norm",
    reference=fold_batch_norm,
    probe=probe_fold,
    forbidden=forbid(BN_FOLDING, *NORMALIZATIONS),
    forms=(("weight", "2-d"), ("weight", "4-d")),
    properties=FOLD_PROPERTIES,
    # ε's placement moves the scale by < 1e-5 relative where the variance is >= 2: inside this
    # tolerance on every check but the one with variances close to ε, which is there for it.
    rtol=1e-4,
    atol=1e-4,
    mistakes=(
        _slip(
            "eps left out",
            "Your scale is γ/√running_var: evaluation divides by √(running_var + ε), and ε "
            "matters wherever a channel's variance is small.",
            std=lambda var, eps: torch.sqrt(var),
        ),
        _slip(
            "eps outside the square root",
            "Your scale is γ/(√running_var + ε); ε is added to the variance, under the root: "
            "γ/√(running_var + ε).",
            std=lambda var, eps: torch.sqrt(var) + eps,
        ),
        _slip(
            "eps argument ignored",
            eps_ignored("the fold (as BatchNorm's evaluation)"),
            std=lambda var, eps: torch.sqrt(var + IGNORED_EPS),
        ),
        _slip(
            "variance taken for the standard deviation",
            "You divide by running_var + ε itself; BatchNorm divides by its square root.",
            std=lambda var, eps: var + eps,
        ),
        _slip(
            "columns scaled",
            "You scale the weight's columns (its inputs); BatchNorm rescales each *output* unit, "
            "so row k of the weight (output k) is multiplied by s_k: diag(s)·W.",
            columns=True,
        ),
        _slip(
            "weight left unscaled",
            "Your folded weight is the layer's weight unchanged: BatchNorm's scale s multiplies "
            "it too, row by row.",
            weight_scaled=False,
        ),
        _slip(
            "running mean not subtracted",
            "Your folded bias forgets the shift: BatchNorm subtracts running_mean before "
            "scaling, so b' = s·(b − running_mean) + β.",
            shift=False,
        ),
        _slip(
            "beta left out",
            "Your folded bias leaves out BatchNorm's own bias β, added after the scaling.",
            use_beta=False,
        ),
        _slip(
            "layer's bias dropped",
            "Your folded bias drops the layer's own bias b: it goes through BatchNorm too, "
            "b' = s·(b − running_mean) + β.",
            use_bias=False,
        ),
        _slip(
            "layer's bias not scaled",
            "The layer's bias b is added unscaled; BatchNorm scales everything it receives, so "
            "b' = s·(b − running_mean) + β, not b − s·running_mean + β.",
            bias_scaled=False,
        ),
    ),
    checks=(
        visible(
            2,
            "a Linear(6, 6) followed by a BatchNorm1d(6) with γ, β and running statistics",
            lambda rng: _case(rng, 6, 6),
        ),
        hidden(
            1.5,
            "running variances close to ε, with eps=1e-3 given",
            lambda rng: _case(rng, 5, 7, var=(1e-3, 4e-3), eps=1e-3),
            twin=0.5,
        ),
        hidden(
            1.5,
            "a Conv2d(3, 5, 3×3) weight: one scale per output channel",
            lambda rng: _case(rng, 5, 3, 3, 3),
        ),
        hidden(
            0.5,
            "a Linear without bias (bias=None), as before a BatchNorm",
            lambda rng: _case(rng, 4, 7, bias=False),
        ),
        hidden(
            0.5,
            "a BatchNorm without affine parameters (gamma and beta None)",
            lambda rng: _case(rng, 4, 7, affine=False),
        ),
    ),
)

EXERCISES = (FOLD_BATCH_NORM,)
