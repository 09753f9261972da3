"""Checks for notebook 06's `rms_norm`: x / √(mean(x²) + ε) · γ over the trailing
`normalized_shape` dims, with PyTorch's `eps=None` (the input dtype's machine ε).

Rows with a clear nonzero mean make centering (LayerNorm) visible; rows of mean square ≈ 1e-6
(float32) and far below float64's machine ε make ε misplaced or misread change the output by
order one.

Rubric (6): the dims `normalized_shape` covers 2.5; what `eps=None` means and where ε goes 2
(float32 and float64 rows of tiny mean square, an explicit eps, an all-zero row); the weight 1.
Each ε slip keeps 4 to 5.5; a mean square over other dims is a wrong structure, capped at 1 (the
last dim only 1).
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from grader.checks.core import Arrays, Exercise, Structure, hidden, known_mistake, visible
from grader.checks.inputs import randn, with_spread
from grader.checks.library import NORMALIZATIONS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored, root
from grader.grading.sandboxed.probes import probe_rms_norm
from normcheck.properties import RMS_NORM_ROWS


def _rms_norm_variant(
    x,
    normalized_shape,
    weight=None,
    eps=None,
    *,
    center=False,
    eps_default=None,
    eps_outside=False,
    last_dim_only=False,
    root_of_sum=False,
    use_weight=True,
    fixed_eps=None,
):
    """RMSNorm with a switch per classic slip; the defaults are correct."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    dims = (-1,) if last_dim_only else tuple(range(-len(shape), 0))
    if eps is None:
        eps = torch.finfo(x.dtype).eps if eps_default is None else eps_default
    eps = eps if fixed_eps is None else fixed_eps
    if center:
        x = x - x.mean(dims, keepdim=True)
    square = (x * x).sum(dims, keepdim=True) if root_of_sum else (x * x).mean(dims, keepdim=True)
    y = x / root(square, eps, eps_outside=eps_outside)
    if use_weight and weight is not None:
        y = y * weight
    return y


def _rms_reference(x, normalized_shape, weight=None, eps=None):
    """F.rms_norm, which takes only the tuple form of the int-or-tuple the exercise promises."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
    return F.rms_norm(x, shape, weight, eps)


def _rms_case(
    x: np.ndarray, ndims: int, rng=None, eps: float | None = None, as_int=False
) -> Arrays:
    shape = x.shape[-ndims:]
    case = {"x": x, "normalized_shape": np.array(shape[0] if as_int else shape)}
    if eps is not None:
        case["eps"] = np.array(eps)
    if rng is not None:
        case["weight"] = rng.uniform(0.5, 1.5, shape).astype(x.dtype)  # never near 0
    return case


def _offset_rows(rng, *shape, dtype=np.float32) -> np.ndarray:
    """Rows with a clear nonzero mean, so that centering (LayerNorm) changes the answer."""
    return (rng.normal(0.0, 2.0, (*shape[:-1], 1)) + rng.standard_normal(shape)).astype(dtype)


_slip = partial(known_mistake, _rms_norm_variant)

RMS_NORM = Exercise(
    name="rms_norm",
    reference=_rms_reference,
    probe=probe_rms_norm,
    properties=(RMS_NORM_ROWS,),
    structure=Structure("a mean square per row of the normalized_shape dims", cap=1),
    forms=(
        ("normalized_shape", "int"),
        ("normalized_shape", "tuple"),
        ("x", "float32"),
        ("x", "float64"),
    ),
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=(
        _slip(
            "mean subtracted",
            "Your rows are centered first; RMSNorm divides by the root mean square of x itself "
            "and never subtracts the mean (that would be LayerNorm without β).",
            center=True,
        ),
        _slip(
            "eps None read as 0",
            "`eps=None` does not mean no ε: PyTorch then uses `torch.finfo(x.dtype).eps`.",
            eps_default=0.0,
        ),
        _slip(
            "eps None read as 1e-5",
            "`eps=None` means `torch.finfo(x.dtype).eps` (1.19e-7 in float32), not LayerNorm's "
            "default 1e-5.",
            eps_default=1e-5,
        ),
        _slip(
            "float32 eps for every dtype",
            "`eps=None` means the machine epsilon of the input's own dtype, "
            "`torch.finfo(x.dtype).eps`; float64 input needs float64's.",
            eps_default=float(torch.finfo(torch.float32).eps),
        ),
        _slip(
            "eps outside the square root",
            "ε is added outside the root, x/(rms+ε); RMSNorm adds it to the mean square, "
            "x/√(mean(x²)+ε).",
            eps_outside=True,
        ),
        _slip("eps argument ignored", eps_ignored("RMSNorm"), fixed_eps=IGNORED_EPS),
        _slip(
            "last dim only",
            "Your mean square covers only the last dim; with a multi-dim `normalized_shape` it "
            "runs over all of its trailing dims together.",
            last_dim_only=True,
            structural=True,
        ),
        _slip(
            "root of the sum",
            "You divide by the Euclidean norm √(Σx²); RMSNorm divides by the root of the *mean* "
            "square, √(Σx²/n).",
            root_of_sum=True,
        ),
        _slip(
            "weight ignored",
            "`weight` (γ, shape `normalized_shape`) is not applied to the normalized output.",
            use_weight=False,
        ),
    ),
    checks=(
        visible(
            1,
            "rows of 8 features with a weight, eps=None, an int normalized_shape",
            lambda rng: _rms_case(_offset_rows(rng, 3, 8), 1, rng, as_int=True),
        ),
        visible(
            1.5,
            "normalized_shape spanning the last two dims of a (2, 3, 4) input",
            lambda rng: _rms_case(_offset_rows(rng, 2, 3, 4), 2),
        ),
        hidden(
            1,
            "float32 rows with mean square near 1e-6, eps=None",
            lambda rng: _rms_case(randn(rng, 4, 16) * np.float32(1e-3), 1),
            twin=0.5,
        ),
        hidden(
            0.5,
            "float64 rows whose mean square is far below float64's machine ε, eps=None",
            lambda rng: _rms_case(randn(rng, 4, 16, dtype=np.float64) * 1e-9, 1),
            twin=0.25,
            rtol=1e-9,
            atol=1e-9,
        ),
        hidden(
            0.5,
            "an explicit eps=1e-6 on rows of mean square near 1e-6",
            lambda rng: _rms_case(randn(rng, 3, 10) * np.float32(1e-3), 1, eps=1e-6),
            twin=0.25,  # the student's own check() sees an `eps` ignored
        ),
        hidden(
            1,
            "normalized_shape of three dims, with a weight",
            lambda rng: _rms_case(
                with_spread(rng, _offset_rows(rng, 2, 2, 3, 4), 24, low=1.0), 3, rng
            ),
        ),
        hidden(
            0.5,
            "an all-zero row gives zeros, not NaN",
            lambda rng: _rms_case(np.zeros((2, 6), np.float32), 1),
        ),
    ),
)

EXERCISES = (RMS_NORM,)
