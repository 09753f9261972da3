"""Mistakes of the kinds students make (the ε slips of a backward pass, a forward without ε),
written here as students write them, not by the checks' variants: each loses the points of the
check that targets its slip and no more, and the feedback names its real cause."""

from __future__ import annotations

import pytest
from conftest import answer_from

from grader.checks import EXERCISES, run

_LN = """
import torch

def layer_norm_backward(grad_out, x, normalized_shape, weight=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    dims = tuple(range(-len(normalized_shape), 0))
    n = 1
    for d in normalized_shape:
        n *= d
    mu = x.mean(dims, keepdim=True)
    var = ((x - mu) ** 2).mean(dims, keepdim=True)
    {stats}
    g = grad_out if weight is None else grad_out * weight
    dx = (n * g - g.sum(dims, keepdim=True)
          - xhat * (g * xhat).sum(dims, keepdim=True)) * inv / n
    if weight is None:
        return dx, None, None
    lead = tuple(range(x.dim() - len(normalized_shape)))
    return dx, (grad_out * {xhat_w}).sum(lead), grad_out.sum(lead)
"""

_BN = """
import torch

def batch_norm_backward(grad_out, x, weight=None, eps=1e-5):
    dims = (0, *range(2, x.dim()))
    n = x.numel() // x.shape[1]
    mu = x.mean(dims, keepdim=True)
    var = ((x - mu) ** 2).mean(dims, keepdim=True)
    {stats}
    view = (1, -1, *[1] * (x.dim() - 2))
    g = grad_out if weight is None else grad_out * weight.view(view)
    dx = (n * g - g.sum(dims, keepdim=True)
          - xhat * (g * xhat).sum(dims, keepdim=True)) * inv / n
    if weight is None:
        return dx, None, None
    return dx, (grad_out * {xhat_w}).sum(dims), grad_out.sum(dims)
"""

# slip -> (the lines computing 1/σ and x̂, what grad_weight multiplies grad_out by)
EPS_SLIPS = {
    "ε left out": ("inv = 1 / var.sqrt(); xhat = (x - mu) * inv", "xhat"),
    "ε outside the root": ("inv = 1 / (var.sqrt() + eps); xhat = (x - mu) * inv", "xhat"),
    "ε hard-coded": ("inv = 1 / (var + 1e-8).sqrt(); xhat = (x - mu) * inv", "xhat"),
    "ε dropped in the backward only": (
        "xhat = (x - mu) / (var + eps).sqrt(); inv = 1 / var.sqrt()",
        "xhat",
    ),
    "x̂ without ε for dγ": (
        "inv = 1 / (var + eps).sqrt(); xhat = (x - mu) * inv",
        "(x - mu) / var.sqrt()",
    ),
}
_SOURCES = {"layer_norm_backward": _LN, "batch_norm_backward": _BN}


def _eps_share(name: str) -> float:
    return sum(c.points for c in EXERCISES[name].checks if "close to ε" in c.description)


@pytest.mark.parametrize("name", sorted(_SOURCES))
@pytest.mark.parametrize("slip", sorted(EPS_SLIPS))
def test_an_eps_slip_in_a_backward_costs_the_eps_check_alone_and_is_named(name, slip):
    stats, xhat_w = EPS_SLIPS[slip]
    source = _SOURCES[name].format(stats=stats, xhat_w=xhat_w)
    exercise = EXERCISES[name]
    for seed in (0, 1, 2):
        verdict = run(exercise, answer_from(source, name), hidden=True, seed=seed, source=source)
        said = verdict.render()
        assert exercise.points - _eps_share(name) <= verdict.score < exercise.points, said
        assert "finite differences" not in said, said
        # a fixed ε of another value than the known mistake's (1e-5) is not named, yet
        named = [line for line in said.splitlines() if line.startswith("  →")]
        assert slip == "ε hard-coded" or any("ε" in line for line in named), said


def test_the_students_correct_backwards_earn_full_marks():
    for name, template in _SOURCES.items():
        source = template.format(stats=EPS_SLIPS["x̂ without ε for dγ"][0], xhat_w="xhat")
        verdict = run(
            EXERCISES[name], answer_from(source, name), hidden=True, seed=3, source=source
        )
        assert verdict.score == EXERCISES[name].points, verdict.render()


_LN_FORWARD_NO_EPS = """
import torch

def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    dims = tuple(range(-len(normalized_shape), 0))
    mu = x.mean(dims, keepdim=True)
    y = (x - mu) / ((x - mu) ** 2).mean(dims, keepdim=True).sqrt()
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y
"""


def test_a_forward_with_no_eps_costs_the_eps_checks_and_names_eps():
    exercise = EXERCISES["layer_norm"]
    source = _LN_FORWARD_NO_EPS
    verdict = run(exercise, answer_from(source, "layer_norm"), hidden=True, seed=0, source=source)
    eps_checks = sum(
        c.points
        for c in exercise.checks
        if "close to ε" in c.description or "constant" in c.description
    )
    assert verdict.score == exercise.points - eps_checks, verdict.render()
    assert "ε is left out" in verdict.render()
