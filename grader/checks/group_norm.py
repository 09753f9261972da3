"""Checks for notebook 06's `group_norm`: per sample, over each group of C/G consecutive
channels and every position.

Each channel of the inputs has its own offset, so which channels share a group matters; groups
scaled by 0.03 with eps=1e-3 make ε misplaced change the output by order one, and groups of 4
values separate the estimators.

Rubric (6): which values form a group (consecutive channels, every position) 4; the estimator 1;
ε 1. The n−1 slip keeps 5; other groups are a wrong structure, capped at 1 (interleaved groups
1, spatial dims left out 0). The checks of the structure use ≥ 4096 values per group, where the
n−1 slip is inside their tolerance (`WIDE`), so a slip costs only its own check.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch.nn.functional as F

from grader.checks.core import WIDE, Arrays, Exercise, Structure, hidden, known_mistake, visible
from grader.checks.inputs import randn, with_spread
from grader.checks.library import NORMALIZATIONS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored, standardized, with_affine
from grader.grading.sandboxed.probes import probe_group_norm
from normcheck.properties import GROUP_NORM_SETS


def _group_norm_variant(
    x,
    num_groups,
    weight=None,
    bias=None,
    eps=1e-5,
    *,
    interleaved=False,
    per_position=False,
    affine=True,
    fixed_eps=None,
    **slips,
):
    """Group norm with a switch per classic slip (and the standardization's `slips`,
    `variants.standardized`); the defaults are correct."""
    n, c = x.shape[:2]
    if interleaved:  # channel k in group k % G
        grouped = x.reshape(n, c // num_groups, num_groups, -1).transpose(1, 2)
    else:  # C/G consecutive channels per group
        grouped = x.reshape(n, num_groups, c // num_groups, -1)
    dims = (2,) if per_position else (2, 3)
    y = standardized(grouped, dims, eps if fixed_eps is None else fixed_eps, **slips)
    if interleaved:
        y = y.transpose(1, 2)
    y = y.reshape(x.shape)
    return with_affine(y, weight, bias, (1, -1, *[1] * (x.dim() - 2))) if affine else y


def _gn_case(x: np.ndarray, groups: int, rng=None, eps: float = 1e-5) -> Arrays:
    case = {"x": x, "num_groups": np.array(groups), "eps": np.array(eps)}
    if rng is not None:
        c = x.shape[1]
        case["weight"] = rng.uniform(0.5, 1.5, c).astype(x.dtype)  # never near 0
        case["bias"] = rng.normal(0.0, 0.5, c).astype(x.dtype)
    return case


def _channels_apart(rng, *shape) -> np.ndarray:
    """Each channel with its own offset, so that which channels share a group matters."""
    offsets = rng.normal(0.0, 3.0, shape[1]).reshape(1, -1, *[1] * (len(shape) - 2))
    return (offsets + rng.standard_normal(shape)).astype(np.float32)


_slip = partial(known_mistake, _group_norm_variant)

GROUP_NORM = Exercise(
    name="group_norm",
    reference=F.group_norm,
    probe=probe_group_norm,
    properties=(GROUP_NORM_SETS,),
    structure=Structure("a group is C/G consecutive channels at every position", cap=1),
    forms=(("x", "3-d"), ("x", "4-d")),
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=(
        _slip(
            "unbiased variance",
            "Your variance divides by n−1; GroupNorm uses the biased variance (÷ n) of each group.",
            correction=1,
        ),
        _slip(
            "eps outside the square root",
            "ε is added outside the square root, (x−μ)/(σ+ε); it belongs under the root, "
            "(x−μ)/√(σ²+ε), which matters when a group's variance is close to ε.",
            eps_outside=True,
        ),
        _slip("eps argument ignored", eps_ignored("GroupNorm"), fixed_eps=IGNORED_EPS),
        _slip(
            "eps left out",
            "ε is left out: GroupNorm divides by √(σ² + ε), which matters when a group's "
            "variance is close to ε.",
            fixed_eps=0.0,
        ),
        _slip(
            "interleaved groups",
            "Your groups take every G-th channel; a group is C/G *consecutive* channels "
            "(reshape to (N, G, C/G, ...), not (N, C/G, G, ...)).",
            interleaved=True,
            structural=True,
        ),
        _slip(
            "spatial dims left out",
            "Your statistics pool a group's channels at each position separately; GroupNorm "
            "pools the group's channels and all spatial (or length) positions together.",
            per_position=True,
            structural=True,
        ),
        _slip(
            "affine ignored",
            "`weight` and `bias` (per channel, shape (C,)) are not applied after normalizing.",
            affine=False,
        ),
    ),
    checks=(
        visible(
            1,
            "(2, 6, 2048) input in 3 groups",
            lambda rng: _gn_case(_channels_apart(rng, 2, 6, 2048), 3),
            **WIDE,
        ),
        visible(
            1,
            "(2, 4, 64, 64) images in 2 groups, per-channel weight and bias",
            lambda rng: _gn_case(_channels_apart(rng, 2, 4, 64, 64), 2, rng),
            **WIDE,
        ),
        hidden(
            1,
            "groups of only 4 values (which variance estimator?)",
            lambda rng: _gn_case(with_spread(rng, _channels_apart(rng, 3, 4, 2), 4), 2),
            twin=0.5,
        ),
        hidden(
            1,
            "groups whose variance is close to ε, with eps=1e-3 given",
            lambda rng: _gn_case(randn(rng, 2, 4, 2048) * np.float32(0.03), 2, eps=1e-3),
            twin=0.5,
            **WIDE,
        ),
        hidden(
            1,
            "one group (LayerNorm over C, H, W) and C groups (InstanceNorm)",
            lambda rng: _gn_case(_channels_apart(rng, 2, 3, 64, 64), int(rng.choice([1, 3]))),
            **WIDE,
        ),
        hidden(
            1,
            "(2, 6, 16, 16, 16) volumes in 3 groups with weight and bias",
            lambda rng: _gn_case(_channels_apart(rng, 2, 6, 16, 16, 16), 3, rng),
            **WIDE,
        ),
    ),
)

EXERCISES = (GROUP_NORM,)
