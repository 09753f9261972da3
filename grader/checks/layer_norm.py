"""Checks for notebook 01: `layer_norm`, `stable_var`, `layer_norm_backward`.

Each hidden input is chosen to separate the answer from one classic mistake by far more than
the tolerance: rows of 4 features (unbiased variance), variance near ε (ε outside the root),
mean 1e4 in float32 (E[x²]−E[x]² is off by ~1e3 there, a correct float32 answer by ~1e-3).
`bench/margins.py` measures each mistake's distance from each check's tolerance
(docs/margins.md). Each taught pitfall also fails a visible check (a hidden check's `twin`), so the
student's own `check()` names it before grading.

Rubric of `layer_norm` (10 points): what is normalized matters most, so the dims
`normalized_shape` covers carry 4.5 points (two trailing dims 2, three 1, an affine over two
dims 1.5); the variance estimator (the seed's example and rows of 4 features) 2; ε under the
root and the caller's ε 1.5; stable float32 statistics 1; the rest (per-token rows, constant
rows) 1. The checks other than the estimator's use rows of 4096 values, where the n−1 slip is
inside their tolerance, so a slip costs its own points only: the unbiased variance keeps 8.
Statistics over other dims than `normalized_shape`'s are a wrong structure (`Structure`): the
checks such an answer passes (every 1-d `normalized_shape`) presuppose the right rows, so it
keeps at most 2 — ignoring `normalized_shape` (the last dim only) 2, the batch 0.5.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from grader.checks.backward import LARGE, backward_edges, backward_exercise, eps_slips
from grader.checks.core import WIDE, Arrays, Exercise, Structure, hidden, known_mistake, visible
from grader.checks.inputs import randn, with_spread
from grader.checks.library import NORMALIZATIONS, VARIANCE, forbid
from grader.checks.variants import (
    IGNORED_EPS,
    eps_ignored,
    eps_rstds,
    standardized,
    variance_of,
    with_affine,
)
from grader.grading.sandboxed.calling import trailing_dims
from grader.grading.sandboxed.probes import probe_backward, probe_layer_norm, probe_var
from grader.reference import functional as ref
from normcheck.gradients import LAYER_NORM_BACKWARD as BACKWARD_PROPERTIES
from normcheck.properties import LAYER_NORM_ROWS, variance

# ---------------------------------------------------------------------------------------------
# layer_norm


def _layer_norm_variant(
    x,
    normalized_shape,
    weight=None,
    bias=None,
    eps=1e-5,
    *,
    axis="normalized",
    affine="elementwise",
    fixed_eps=None,
    **slips,
):
    """One layer norm with a switch per classic mistake (and the standardization's `slips`,
    `variants.standardized`); the defaults are correct. `axis`: the statistics' dims, the
    trailing `normalized_shape` ones ("normalized"), the batch ("batch") or the last dim only
    ("last"); `affine`: γ and β elementwise after normalizing ("elementwise"), not applied
    ("ignored"), applied before ("before") or read per leading dim ("per channel")."""
    eps = eps if fixed_eps is None else fixed_eps
    if affine == "per channel" and weight is not None:
        # γ, β read BatchNorm-style: one value per leading normalized dim, broadcast over the rest
        lead = (weight.shape[0],) + (1,) * (weight.dim() - 1)

        def first(p):  # the value at each leading index, broadcast over the rest
            return p.reshape(p.shape[0], -1)[:, :1].reshape(lead)

        weight, bias = first(weight), first(bias)
    dims = {"normalized": trailing_dims(normalized_shape), "batch": (0,), "last": (-1,)}[axis]
    if affine == "before":
        x = with_affine(x, weight, bias)
    x_hat = standardized(x, dims, eps, **slips)
    return x_hat if affine in ("ignored", "before") else with_affine(x_hat, weight, bias)


_slip = partial(known_mistake, _layer_norm_variant)

LAYER_NORM_MISTAKES = (
    _slip(
        "unbiased variance",
        "Your variance divides by n−1 (the unbiased estimator); LayerNorm uses the biased one, "
        "dividing by n (`correction=0`, `unbiased=False`).",
        correction=1,
    ),
    _slip(
        "eps outside the square root",
        "ε is added outside the square root, (x−μ)/(σ+ε); LayerNorm adds it to the variance, "
        "under the root, which matters when the variance is close to ε.",
        eps_outside=True,
    ),
    _slip(
        "eps argument ignored",
        eps_ignored("LayerNorm"),
        fixed_eps=IGNORED_EPS,
    ),
    _slip(
        "eps left out",
        "ε is left out: LayerNorm divides by √(σ² + ε), which keeps rows whose variance is "
        "close to ε (or 0: constant rows) finite and damped.",
        fixed_eps=0.0,
    ),
    _slip(
        "statistics over the batch",
        "Your statistics run over the batch axis (like BatchNorm); LayerNorm computes them per "
        "sample, over the trailing `normalized_shape` dims.",
        axis="batch",
        structural=True,
    ),
    _slip(
        "last dim only",
        "Your statistics cover only the last dim; with a multi-dim `normalized_shape` they must "
        "run over all of its trailing dims together.",
        axis="last",
        structural=True,
    ),
    _slip(
        "affine ignored",
        "`weight` and `bias` are not applied: the output must be scaled by γ and shifted by β.",
        affine="ignored",
    ),
    _slip(
        "affine per channel",
        "Your γ and β act per channel (one value per leading normalized dim, as in BatchNorm or "
        "GroupNorm); LayerNorm's are elementwise, one per position of `normalized_shape`.",
        affine="per channel",
    ),
    _slip(
        "affine before normalizing",
        "γ and β are applied before normalizing; they belong after it, on x̂.",
        affine="before",
    ),
    _slip(
        "E[x²]−E[x]² cancellation",
        "Your variance is computed as E[x²]−E[x]², which cancels catastrophically in float32 when "
        "the mean is large; subtract the mean first (two-pass) or use Welford.",
        naive=True,
    ),
)


def _ln_case(x: np.ndarray, ndims: int, rng=None, eps: float = 1e-5, as_int=False) -> Arrays:
    """Inputs for one call; with `rng`, a random weight and bias of shape normalized_shape;
    `as_int`: normalized_shape given as the int D rather than the tuple (D,)."""
    shape = x.shape[-ndims:]
    given = np.array(shape[0] if as_int else shape)
    case = {"x": x, "normalized_shape": given, "eps": np.array(eps)}
    if rng is not None:
        case["weight"] = rng.uniform(0.5, 1.5, shape).astype(x.dtype)  # never near 0
        case["bias"] = rng.normal(0.0, 0.5, shape).astype(x.dtype)
    return case


# float32 parity: a correct answer is within ~1e-6; every mistake but ε placement is off by
# >1e-2 on these inputs. ε outside the root moves outputs by ~1e-5 when the variance is ~1 —
# deliberately inside this tolerance: the checks with ε close to the variance are there for it.
_F32 = {"rtol": 1e-4, "atol": 1e-4}


def _apart(rng, *shape) -> np.ndarray:
    """float32 values whose every last-dim row has its own offset and scale, so that statistics
    over too few or too many dims are off by order one."""
    offsets = rng.normal(0.0, 2.0, (*shape[:-1], 1))
    scales = rng.uniform(0.5, 2.0, (*shape[:-1], 1))
    return (offsets + scales * rng.standard_normal(shape)).astype(np.float32)


LAYER_NORM = Exercise(
    name="layer_norm",
    reference=ref.layer_norm,
    probe=probe_layer_norm,
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=LAYER_NORM_MISTAKES,
    properties=(LAYER_NORM_ROWS,),
    structure=Structure("statistics per row of the normalized_shape dims", cap=2),
    forms=(("normalized_shape", "int"), ("normalized_shape", "tuple")),
    checks=(
        visible(
            0.5,
            "the worked example of section 2: tokens (1, 3) and (10, 14) each become (−1, 1)",
            lambda rng: _ln_case(
                np.array([[[1.0, 3.0], [10.0, 14.0]]], np.float32), 1, as_int=True
            ),
            **_F32,
        ),
        visible(
            0.5,
            "normalizes each token of a (2, 3, 4096) batch over its features (an int "
            "normalized_shape)",
            lambda rng: _ln_case(_apart(rng, 2, 3, 4096), 1, as_int=True),
            **WIDE,
        ),
        visible(
            2,
            "normalized_shape spanning the last two dims of a (2, 3, 64, 64) input",
            lambda rng: _ln_case(_apart(rng, 2, 3, 64, 64), 2),
            **WIDE,
        ),
        hidden(
            1,
            "normalized_shape spanning the last three dims, per sample",
            lambda rng: _ln_case(_apart(rng, 3, 2, 16, 16, 16), 3),
            **WIDE,
        ),
        hidden(
            1.5,
            "weight and bias of shape normalized_shape",
            lambda rng: _ln_case(_apart(rng, 3, 2, 64, 64), 2, rng),
            twin=0.5,
            **WIDE,
        ),
        hidden(
            1.5,
            "rows of only 4 features (which variance estimator?)",
            lambda rng: _ln_case(with_spread(rng, randn(rng, 6, 4), 4), 1),
            twin=0.5,
            **_F32,
        ),
        hidden(
            1.5,
            "rows whose variance is close to ε, with eps=1e-3 given",
            lambda rng: _ln_case(randn(rng, 4, 4096) * np.float32(0.03), 1, eps=1e-3),
            twin=0.5,
            **WIDE,
        ),
        hidden(
            1,
            "float32 rows with mean 1e4 (numerically stable statistics)",
            lambda rng: _ln_case(randn(rng, 8, 256) + np.float32(1e4), 1),
            twin=0.5,
            atol=0.05,  # a correct float32 answer is within ~3e-3 of the float64 truth
            float64_oracle=True,
        ),
        hidden(
            0.5,
            "constant rows give exactly the bias",
            lambda rng: _ln_case(np.full((3, 8), 7.0, np.float32), 1, rng),
            **_F32,
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# stable_var


def _var_reference(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return x.var(dim, correction=0)


def _var_variant(x: torch.Tensor, dim: int = -1, **slips) -> torch.Tensor:
    """The variance along `dim` with the `variants.variance_of` slips; none set is correct."""
    return variance_of(x, (dim,), **slips).squeeze(dim)


def _var_case(x: np.ndarray, dim: int = -1) -> Arrays:
    return {"x": x, "dim": np.array(dim)}


STABLE_VAR = Exercise(
    name="stable_var",
    reference=_var_reference,
    probe=probe_var,
    forbidden=forbid(VARIANCE, *NORMALIZATIONS),
    properties=(variance,),
    mistakes=(
        known_mistake(
            _var_variant,
            "E[x²]−E[x]² cancellation",
            "Your variance is E[x²]−E[x]², which loses every significant digit in float32 when "
            "the mean is large (it can even go negative); subtract the mean first.",
            naive=True,
        ),
        known_mistake(
            _var_variant,
            "unbiased variance",
            "Your variance divides by n−1; the one normalization layers use divides by n.",
            correction=1,
        ),
    ),
    checks=(
        visible(
            1,
            "per-row biased variance of a (4, 10) input",
            lambda rng: _var_case(randn(rng, 4, 10)),
        ),
        hidden(
            1,
            "float32 rows with mean 1e4 and variance about 1",
            lambda rng: _var_case(randn(rng, 6, 512) + np.float32(1e4)),
            twin=0.5,
            atol=0.02,  # a two-pass float32 answer is within ~1e-3 here; naive is off by ~10
            float64_oracle=True,
        ),
        hidden(
            0.5,
            "constant rows have zero variance, never negative",
            lambda rng: _var_case(np.full((3, 64), 1234.5678, np.float32)),
        ),
        hidden(
            0.5,
            "variance along dim 0 of a (2, 5) input",
            lambda rng: _var_case(randn(rng, 2, 5), dim=0),
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# layer_norm_backward


def _backward_variant(
    grad_out,
    x,
    normalized_shape,
    weight=None,
    eps=1e-5,
    *,
    through_stats=True,
    use_weight=True,
    weight_x_hat_over_batch=False,
    **eps_slips,
):
    """The closed-form backward with a switch per classic slip (and ε's, `variants.eps_of`);
    defaults are correct."""
    dims = trailing_dims(normalized_shape)
    mean = x.mean(dims, keepdim=True)
    rstd, rstd_x_hat, rstd_weight = eps_rstds(
        x.var(dims, keepdim=True, correction=0), eps, **eps_slips
    )
    x_hat = (x - mean) * rstd_x_hat
    g = grad_out * weight if weight is not None and use_weight else grad_out
    if through_stats:
        g = g - g.mean(dims, keepdim=True) - x_hat * (g * x_hat).mean(dims, keepdim=True)
    grad_x = g * rstd
    if weight is None:
        return grad_x, None, None
    lead = tuple(range(x.dim() - len(dims)))
    x_hat_weight = (x - mean) * rstd_weight
    if weight_x_hat_over_batch:  # BatchNorm's statistics, over the leading dims
        x_hat_weight = standardized(x, lead, eps)
    return grad_x, (grad_out * x_hat_weight).sum(lead), grad_out.sum(lead)


def _backward_case(
    rng, *shape, ndims=1, weight=True, scale=LARGE, eps=1e-5, as_int=False
) -> Arrays:
    x = rng.standard_normal(shape) * scale
    case = {
        "grad_out": rng.standard_normal(shape),
        "x": x,
        "normalized_shape": np.array(shape[-1] if as_int else shape[-ndims:]),
        "eps": np.array(eps),
    }
    if weight:
        case["weight"] = rng.normal(1.0, 0.5, shape[-ndims:])
    return case


LAYER_NORM_BACKWARD = backward_exercise(
    name="layer_norm_backward",
    reference=ref.layer_norm_backward,
    probe=probe_backward,
    properties=BACKWARD_PROPERTIES,
    forms=(("normalized_shape", "int"), ("normalized_shape", "tuple")),
    mistakes=(
        known_mistake(
            _backward_variant,
            "statistics treated as constants",
            "Your grad_x treats μ and σ as constants; they depend on x, which adds the two "
            "mean-subtracted terms of the closed form.",
            through_stats=False,
        ),
        known_mistake(
            _backward_variant,
            "weight left out of grad_x",
            "Your grad_x ignores γ: the gradient reaching x̂ is grad_out·γ.",
            use_weight=False,
        ),
        known_mistake(
            _backward_variant,
            "grad_weight with BatchNorm's x̂",
            "Your grad_weight sums grad_out·x̂ with x̂ normalized over the batch for each "
            "feature (BatchNorm's statistics); γ multiplies the forward's x̂, normalized over "
            "each row's normalized_shape dims.",
            weight_x_hat_over_batch=True,
        ),
        *eps_slips(_backward_variant, "LayerNorm"),
    ),
    checks=(
        visible(
            2,
            "float64 (4, 6) rows with a weight (an int normalized_shape), against autograd",
            lambda rng: _backward_case(rng, 4, 6, as_int=True),
        ),
        hidden(
            1,
            "leading dims (2, 3, 8): grad_weight and grad_bias sum over all of them",
            lambda rng: _backward_case(rng, 2, 3, 8),
        ),
        hidden(
            2,
            "normalized_shape spanning two trailing dims",
            lambda rng: _backward_case(rng, 3, 4, 5, ndims=2),
        ),
        *backward_edges(
            _backward_case, unweighted=(5, 7), near_eps=(3, 16), scale=0.03, sets="rows"
        ),
    ),
)

EXERCISES = (LAYER_NORM, STABLE_VAR, LAYER_NORM_BACKWARD)
