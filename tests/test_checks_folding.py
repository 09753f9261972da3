"""Checks of `fold_batch_norm`: a folded bias no known mistake matches is said as the
combination of terms it is, without a value."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import SEEDS

from grader.checks import EXERCISES, run
from grader.reference.fusion import fold_batch_norm

FOLD = EXERCISES["fold_batch_norm"]


def _with_bias(bias_of):
    """A fold whose weight is right and whose bias is `bias_of(b, running_mean, s, s₀, β)`, with
    s = γ/√(running_var + ε) and s₀ = γ/√running_var."""

    def fold(weight, bias, running_mean, running_var, gamma=None, beta=None, eps=1e-5):
        folded_weight, _ = fold_batch_norm(
            weight, bias, running_mean, running_var, gamma, beta, eps
        )
        gamma = torch.ones_like(running_var) if gamma is None else gamma
        b = torch.zeros_like(running_mean) if bias is None else bias
        beta = torch.zeros_like(running_mean) if beta is None else beta
        s, s0 = gamma / torch.sqrt(running_var + eps), gamma / torch.sqrt(running_var)
        return folded_weight, bias_of(b, running_mean, s, s0, beta)

    return fold


# None of them is a known mistake of the exercise: each is said by a property.
WRONG_BIASES = [
    ("s₀·b − s₀·running_mean + β", lambda b, m, s, s0, beta: (b - m) * s0 + beta),
    ("b/s − running_mean/s + β", lambda b, m, s, s0, beta: (b - m) / s + beta),
    ("b − running_mean + β", lambda b, m, s, s0, beta: b - m + beta),
    ("s·b + s·running_mean + β", lambda b, m, s, s0, beta: (b + m) * s + beta),
    ("s·b − s·running_mean − β", lambda b, m, s, s0, beta: (b - m) * s - beta),
    ("s + β", lambda b, m, s, s0, beta: s + beta),
]


@pytest.mark.parametrize(("said", "bias_of"), WRONG_BIASES, ids=[w[0] for w in WRONG_BIASES])
def test_a_wrong_folded_bias_is_said_as_the_combination_it_is(said, bias_of):
    for seed in SEEDS:
        verdict = run(FOLD, _with_bias(bias_of), hidden=True, seed=seed, source="")
        failed = [o for o in verdict.outcomes if not o.passed]
        assert failed and not verdict.diagnoses
        # the first failed check has a layer's bias; float32 rounding is never said ("1·β")
        assert failed[0].finding.startswith(f"folded bias is {said}, where"), failed[0].finding
        assert all(o.finding and not re.search(r"\d", o.finding) for o in failed)  # no value
