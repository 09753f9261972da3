"""Mistakes of the kinds students make (the ε slips of a backward pass, a forward without ε),
written here as students write them, not by the checks' variants: each loses the points of the
check that targets its slip and no more, and the feedback names its real cause."""

from __future__ import annotations

import pytest
from conftest import answer_from

from grader.checks import EXERCISES, run
from grader.grading.sandboxed.calling import load_answer

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

def batch_norm_backward(
    grad_out, x, running_mean, running_var, weight=None, training=False, eps=1e-5
):
    dims = (0, *range(2, x.dim()))
    n = x.numel() // x.shape[1]
    view = (1, -1, *[1] * (x.dim() - 2))
    if training:
        mu = x.mean(dims, keepdim=True)
        var = ((x - mu) ** 2).mean(dims, keepdim=True)
    else:
        mu, var = running_mean.view(view), running_var.view(view)
    {stats}
    g = grad_out if weight is None else grad_out * weight.view(view)
    dx = g * inv
    if training:
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


def _render(name: str, source: str, seed: int = 0):
    verdict = run(EXERCISES[name], answer_from(source, name), hidden=True, seed=seed, source=source)
    return verdict, verdict.render()


_GN = """
import torch

def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[:2]
    shape = (1, -1, *[1] * (x.dim() - 2))
    {body}
    if weight is not None:
        y = y * {weight} + bias.view(shape)
    return y
"""


def _gn(body: str, weight: str = "weight.view(shape)") -> str:
    return _GN.format(body=body, weight=weight)


def _standardized(grouping: str, dims: str) -> str:
    """`y` from `g`, x grouped as `grouping`, standardized over `dims`, reshaped back."""
    return (
        f"g = x.reshape({grouping}); "
        f"y = ((g - g.mean({dims}, keepdim=True)) / "
        f"(g.var({dims}, unbiased=False, keepdim=True) + eps).sqrt()).reshape(x.shape)"
    )


# the sets a GroupNorm answer used instead of C/G consecutive channels at every position -> the
# words that name them
GROUP_NORM_SETS = {
    "per channel": (_standardized("n, c, -1", "-1"), "per channel (InstanceNorm's sets)"),
    "G and C/G swapped": (
        _standardized("n, c // num_groups, -1", "-1"),
        "in C/G groups of G channels (G and C/G swapped)",
    ),
    "interleaved": (
        _standardized("n, c // num_groups, num_groups, -1", "(1, 3)"),
        "Your groups take every G-th channel",
    ),
    "per position": (
        _standardized("n, num_groups, c // num_groups, -1", "2"),
        "pool a group's channels at each position separately",
    ),
}


@pytest.mark.parametrize("sets", sorted(GROUP_NORM_SETS))
def test_group_norm_over_the_wrong_sets_names_the_sets_it_used(sets):
    body, words = GROUP_NORM_SETS[sets]
    cap = EXERCISES["group_norm"].structure.cap
    for seed in (0, 1):
        verdict, said = _render("group_norm", _gn(body), seed)
        assert verdict.score <= cap and words in said, said
        assert "than its variance" not in said and "interleaved" not in said.replace(words, ""), (
            said
        )


def test_group_norm_with_the_mean_of_other_sets_says_so_and_nothing_of_its_variance():
    body = (
        "g = x.reshape(n, num_groups, -1); c_ = x.reshape(n, c, -1); "
        "y = ((c_ - c_.mean(-1, keepdim=True)).reshape(g.shape) / "
        "(g.var(-1, unbiased=False, keepdim=True) + eps).sqrt()).reshape(x.shape)"
    )
    verdict, said = _render("group_norm", _gn(body))
    assert verdict.score == 0, said
    assert "has mean 0 per channel (InstanceNorm's sets), where a correct output's is not 0" in said
    assert "than its variance" not in said, said


def test_a_property_broken_everywhere_is_said_once_with_the_count_of_checks_it_breaks():
    verdict, said = _render("group_norm", _gn(GROUP_NORM_SETS["per channel"][0]))
    total = len(verdict.outcomes)
    assert said.count("InstanceNorm's sets") == 1, said
    assert (
        f"per channel (InstanceNorm's sets), not over each group of consecutive channels and "
        f"every position (in {total} of {total} checks)" in said
    ), said


@pytest.mark.parametrize(
    "view", ["weight.view(1, -1, *[1] * x.dim())", "weight[:, None, None, None, None, None]"]
)
def test_a_parameter_broadcast_into_a_wrong_rank_output_is_said_to_be(view):
    body = _standardized("n, num_groups, -1", "-1")
    verdict, said = _render("group_norm", _gn(body, view))
    weighted = sum(c.points for c in EXERCISES["group_norm"].checks if "weight" in c.description)
    assert verdict.score == EXERCISES["group_norm"].points - weighted, said
    assert "`weight` (shape (4,)) was broadcast against the wrong dims of `y`" in said, said
    assert "a view was given too many dims" not in said, said


_RMS_HARD_CODED = """
import torch

def rms_norm(x, normalized_shape, weight=None, eps=None):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    dims = tuple(range(-len(normalized_shape), 0))
    y = x / ((x * x).mean(dims, keepdim=True) + 1e-5).sqrt()
    return y if weight is None else y * weight
"""

# exercise -> a student's answer with ε fixed at 1e-5, whatever `eps` it is given
HARD_CODED_EPS = {
    "group_norm": _gn(_standardized("n, num_groups, -1", "-1").replace("+ eps", "+ 1e-5")),
    "layer_norm": _LN_FORWARD_NO_EPS.replace(".sqrt()", ".add(1e-5).sqrt()"),
    "rms_norm": _RMS_HARD_CODED,
}


@pytest.mark.parametrize("name", sorted(HARD_CODED_EPS))
def test_a_hard_coded_eps_costs_the_eps_checks_alone_and_is_named(name):
    exercise = EXERCISES[name]
    eps_given = sum(c.points for c in exercise.checks if "eps" in c.description)
    for seed in (0, 1):
        verdict, said = _render(name, HARD_CODED_EPS[name], seed)
        assert exercise.points - eps_given <= verdict.score < exercise.points, said
        assert "ignores the `eps` it is given (it always uses 1e-5)" in said, said


def test_every_exercise_taking_an_eps_knows_it_ignored():
    """Each exercise whose checks give an `eps` names an answer that ignores it."""
    for exercise in EXERCISES.values():
        given = any("eps" in c.description for c in exercise.checks)
        if given and "backward" not in exercise.name:
            assert "eps argument ignored" in {m.name for m in exercise.mistakes}, exercise.name


def test_a_forward_with_no_eps_names_eps_on_every_check_it_fails():
    verdict, said = _render("layer_norm", _LN_FORWARD_NO_EPS)
    failed = [o for o in verdict.outcomes if not o.passed]
    assert failed and all(o.mistake is not None and "eps" in o.mistake.name for o in failed), said
    assert "division by 0" not in said and "times the correct one" not in said, said


_RAISES = """
import torch

def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    mu = x.mean(-1, keepdim=True)
    w = torch.ones(3, 3)
    return (x - mu) @ w
"""


def test_an_exception_from_the_students_code_is_quoted_with_the_line_of_the_cell():
    answer = load_answer("import torch", _RAISES, "layer_norm")  # as the grading sandbox does
    exercise = EXERCISES["layer_norm"]
    verdict = run(exercise, answer, hidden=True, seed=0, source=_RAISES)
    said = verdict.render()
    assert verdict.score == 0
    assert "raised RuntimeError: mat1 and mat2 shapes cannot be multiplied" in said, said
    assert "(line 7 of your cell: `return (x - mu) @ w`)" in said, said


# exercise -> (what a student's grad_weight multiplies grad_out by: x̂ of another norm's
# statistics, the words naming it)
OTHER_X_HAT = {
    "batch_norm_backward": (
        "(x - x.mean(tuple(range(1, x.dim())), keepdim=True))"
        " / (x.var(tuple(range(1, x.dim())), unbiased=False, keepdim=True) + eps).sqrt()",
        "x̂ normalized per sample (LayerNorm's statistics)",
    ),
    "layer_norm_backward": (
        "(x - x.mean(0, keepdim=True)) / (x.var(0, unbiased=False, keepdim=True) + eps).sqrt()",
        "x̂ normalized over the batch for each feature (BatchNorm's statistics)",
    ),
}


@pytest.mark.parametrize("name", sorted(OTHER_X_HAT))
def test_grad_weight_with_another_norms_statistics_is_named(name):
    xhat_w, words = OTHER_X_HAT[name]
    source = _SOURCES[name].format(stats=EPS_SLIPS["x̂ without ε for dγ"][0], xhat_w=xhat_w)
    verdict, said = _render(name, source)
    unweighted = sum(c.points for c in EXERCISES[name].checks if "no weight" in c.description)
    assert verdict.score == unweighted, said  # grad_x is right: only the check without γ passes
    assert words in said, said
