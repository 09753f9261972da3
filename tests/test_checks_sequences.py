"""Notebook 03's checks: lengths_to_mask, masked_batch_norm, masked_mean_pool.

The solutions come from the notebook's own answer cells; every classic mistake must be named
for any grading seed; the hidden inputs must hold what their descriptions promise; library
shortcuts earn zero; error cases are graded as errors, never as NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import (
    SEEDS,
    cheats_earn_nothing,
    known_mistake,
    solution_answers,
)

from grader.checks import run
from grader.checks.core import StudentError, expect, judge_check, outputs_of, plan
from grader.checks.sequences import EXERCISES
from grader.reference.masking import lengths_to_mask
from norm_utils.masking import pad_sequences
from normcheck import CheckFailed, check

ASSIGNMENT = "03_sequences"
BY_NAME = {e.name: e for e in EXERCISES}


SOLUTIONS = {name: solution_answers()[name] for name in BY_NAME}


# ---------------------------------------------------------------------------------------------
# Mistakes are named on many more seeds than the suite-wide check uses


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_every_mistake_is_named_on_many_seeds(exercise):
    """Separation does not hinge on lucky inputs: 25 more grading seeds, no tripwires."""
    for seed in range(100, 125):
        planned = plan(exercise, hidden=True, seed=seed)
        named = {m.name: False for m in exercise.mistakes}
        for check_, inputs in planned:
            expected = expect(exercise, check_, inputs)  # shared, as a grading run shares it
            for mistake in exercise.mistakes:
                try:
                    got = outputs_of(exercise, mistake.impl, inputs)
                except Exception as error:  # a mistake that crashes is judged as the student's
                    got = StudentError(type(error).__name__, str(error))
                outcome = judge_check(exercise, check_, inputs, got, expected)
                named[mistake.name] |= outcome.mistake is mistake
        assert all(named.values()), (seed, named)


def test_a_single_mistake_keeps_partial_credit():
    exercise = BY_NAME["masked_batch_norm"]
    biased = known_mistake(exercise, "biased running variance")
    verdict = run(exercise, biased, hidden=True, seed=0, source="")
    assert 0 < verdict.score < exercise.points


# ---------------------------------------------------------------------------------------------
# The hidden inputs hold what the descriptions promise


def inputs_of(name: str, description_start: str, seed: int) -> dict[str, np.ndarray]:
    exercise = BY_NAME[name]
    matches = [
        inputs
        for c, inputs in plan(exercise, hidden=True, seed=seed)
        if c.hidden and c.description.startswith(description_start)
    ]
    assert len(matches) == 1, description_start
    return matches[0]


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_mask_inputs_cover_the_edge_cases(seed):
    very_different = inputs_of("lengths_to_mask", "very different lengths", seed)["lengths"]
    assert very_different.max() >= 100 * very_different.min() >= 100
    assert (inputs_of("lengths_to_mask", "single-token", seed)["lengths"] == 1).all()
    empty = inputs_of("lengths_to_mask", "a sequence of length 0", seed)
    assert (empty["lengths"] == 0).any() and empty["max_len"] > empty["lengths"].max()
    assert (inputs_of("lengths_to_mask", "a negative length", seed)["lengths"] < 0).any()
    too_long = inputs_of("lengths_to_mask", "a length above max_len", seed)
    assert (too_long["lengths"] > too_long["max_len"]).any()


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_batch_norm_inputs_cover_the_edge_cases(seed):
    appended = inputs_of("masked_batch_norm", "invariant to appended padding", seed)
    lengths = appended["mask"].sum(-1)
    assert appended["mask"].shape[-1] >= 4 * lengths.max()
    extreme = inputs_of("masked_batch_norm", "very different lengths", seed)["mask"][0].sum(-1)
    assert (extreme == 0).any() and (extreme == 1).sum() >= 2 and extreme.max() >= 20
    running = inputs_of("masked_batch_norm", "running statistics", seed)
    assert len({m.tobytes() for m in running["mask"]}) == len(running["mask"]) == 4
    nan = inputs_of("masked_batch_norm", "NaN padding", seed)
    assert np.isnan(nan["x"][~nan["mask"]]).any() and not np.isnan(nan["x"][nan["mask"]]).any()
    assert not inputs_of("masked_batch_norm", "a batch with no real", seed)["mask"].any()


@pytest.mark.parametrize("seed", SEEDS)
def test_hidden_pooling_inputs_cover_the_edge_cases(seed):
    lengths = inputs_of("masked_mean_pool", "very different lengths", seed)["mask"].sum(1)
    assert lengths.max() >= 100 * lengths.min()
    appended = inputs_of("masked_mean_pool", "invariant to appended padding", seed)["mask"]
    assert appended.shape[1] >= 5 * appended.sum(1).max()
    assert (inputs_of("masked_mean_pool", "single-token", seed)["mask"].sum(1) == 1).all()
    empty = inputs_of("masked_mean_pool", "a sequence with no real tokens", seed)["mask"]
    assert (empty.sum(1) == 0).any()


# ---------------------------------------------------------------------------------------------
# The graded properties hold for the solutions, independently of the reference


def test_solution_masked_batch_norm_equals_batch_norm_on_the_packed_tokens():
    masked_batch_norm = SOLUTIONS["masked_batch_norm"][0]
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    for lengths in ([4, 1, 6], [2, 2, 5], [7, 3, 1]):
        seqs = [torch.randn(n, 3) * 2 + 3 for n in lengths]
        x, mask = pad_sequences(seqs, padding_value=float("nan"))
        y = masked_batch_norm(x, mask, running_mean, running_var, training=True)
        torch.testing.assert_close(y[mask], bn(torch.cat(seqs)))
        assert (y[~mask] == 0).all()
    torch.testing.assert_close(running_mean, bn.running_mean)
    torch.testing.assert_close(running_var, bn.running_var)


def test_solution_masked_batch_norm_ignores_appended_padding_and_its_values():
    masked_batch_norm = SOLUTIONS["masked_batch_norm"][0]
    seqs = [torch.randn(n, 4) + 3 for n in (5, 1, 3)]
    x, mask = pad_sequences(seqs)
    longer = F.pad(x, (0, 0, 0, 20)).masked_fill(~F.pad(mask, (0, 20))[..., None], 1e6)
    short = masked_batch_norm(x, mask, training=True)
    long = masked_batch_norm(longer, F.pad(mask, (0, 20)), training=True)
    torch.testing.assert_close(long[:, :5][mask], short[mask])


def test_solution_pooling_ignores_appended_padding_and_refuses_empty_rows():
    masked_mean_pool = SOLUTIONS["masked_mean_pool"][0]
    h = torch.randn(3, 6, 4)
    mask = lengths_to_mask([6, 1, 3])
    pooled = masked_mean_pool(h, mask)
    torch.testing.assert_close(pooled[1], h[1, 0])
    longer = F.pad(h, (0, 0, 0, 30), value=float("nan"))
    torch.testing.assert_close(masked_mean_pool(longer, F.pad(mask, (0, 30))), pooled)
    with pytest.raises(ValueError, match=r"\[1\]"):
        masked_mean_pool(h, lengths_to_mask([6, 0, 3]))


# ---------------------------------------------------------------------------------------------
# Errors are graded as errors


def test_an_empty_row_that_gives_nan_is_named_not_passed():
    def masked_mean_pool(h, mask):
        return torch.where(mask[..., None], h, 0.0).sum(1) / mask.sum(1, keepdim=True)

    verdict = run(BY_NAME["masked_mean_pool"], masked_mean_pool, hidden=True, seed=0, source="")
    failed = [o for o in verdict.outcomes if not o.passed]
    assert {o.check.description for o in failed} == {
        "a sequence with no real tokens raises ValueError (not NaN)"  # visible twin and hidden
    }
    assert "0/0 = NaN" in verdict.render()


def test_raising_another_exception_type_does_not_earn_the_error_check():
    def lengths_to_mask(lengths, max_len=None):
        lengths = torch.as_tensor(lengths)
        max_len = int(lengths.max()) if max_len is None else max_len
        assert ((lengths >= 0) & (lengths <= max_len)).all(), "bad length"
        return torch.arange(max_len) < lengths[:, None]

    verdict = run(BY_NAME["lengths_to_mask"], lengths_to_mask, hidden=True, seed=0, source="")
    failed = {o.check.description: o.problem for o in verdict.outcomes if not o.passed}
    assert set(failed) == {
        "a negative length raises ValueError",
        "a length above max_len raises ValueError",
    }
    assert all("AssertionError" in problem for problem in failed.values())


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_the_reference_raises_value_error_on_every_error_case(exercise):
    error_cases = [(c, i) for c, i in plan(exercise, True, 0) if c.expects is not None]
    assert error_cases
    for check_, inputs in error_cases:
        assert "raises ValueError" in check_.description and check_.expects is ValueError
        with pytest.raises(ValueError):
            outputs_of(exercise, exercise.reference, inputs)


# ---------------------------------------------------------------------------------------------
# The student's view: visible checks pass quietly, a mistake is explained in words


def test_visible_checks_pass_quietly_for_the_solutions(capsys):
    for name, (answer, _) in SOLUTIONS.items():
        check(name, answer)
    assert "✗" not in capsys.readouterr().out


def test_an_inverted_mask_is_explained_on_the_visible_checks(monkeypatch):
    def lengths_to_mask(lengths, max_len=None):
        lengths = torch.as_tensor(lengths)
        return torch.arange(max_len or int(lengths.max())) >= lengths[:, None]

    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(CheckFailed, match="key_padding_mask"):
        check("lengths_to_mask", lengths_to_mask)


def test_feedback_never_shows_hidden_inputs():
    exercise = BY_NAME["masked_mean_pool"]
    naive = known_mistake(exercise, "padding included in the mean")
    text = run(exercise, naive, hidden=True, seed=3, source="").render()
    for _, inputs in plan(exercise, hidden=True, seed=3):
        for value in inputs["x"][inputs["mask"]].flatten()[:5]:
            assert f"{value:.3f}" not in text


# ---------------------------------------------------------------------------------------------
# Library shortcuts earn nothing

CHEATS = {
    "lengths_to_mask": [
        "def lengths_to_mask(lengths, max_len=None):\n"
        "    from grader.reference import masking as nu\n"
        "    return nu.lengths_to_mask(lengths, max_len)",
    ],
    "masked_batch_norm": [
        "def masked_batch_norm(x, mask, running_mean=None, running_var=None, weight=None,\n"
        "                      bias=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    from grader.reference import masking as nu\n"
        "    return nu.masked_batch_norm(x, mask, running_mean, running_var, weight, bias,\n"
        "                                training, momentum, eps)",
        "def masked_batch_norm(x, mask, running_mean=None, running_var=None, weight=None,\n"
        "                      bias=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    if not mask.any():\n"
        "        raise ValueError('empty')\n"
        "    out = torch.zeros_like(x)\n"
        "    out[mask] = F.batch_norm(x[mask], running_mean, running_var, weight, bias,\n"
        "                             training or running_mean is None, momentum, eps)\n"
        "    return out",
        "def masked_batch_norm(x, mask, running_mean=None, running_var=None, weight=None,\n"
        "                      bias=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    out = torch.zeros_like(x)\n"
        "    out[mask] = F.layer_norm(x[mask].T, (int(mask.sum()),)).T\n"
        "    return out",
    ],
    "masked_mean_pool": [
        "def masked_mean_pool(h, mask):\n"
        "    from grader.reference import masking as nu\n"
        "    return nu.masked_mean(h, mask, dim=1)",
        "def masked_mean_pool(h, mask):\n"
        "    from grader.reference import masking as nu\n"
        "    return getattr(nu, 'masked_' + 'mean')(h, mask, dim=1)",
        "def masked_mean_pool(h, mask):\n"
        "    return torch.masked.mean(h, 1, mask=mask[..., None].expand_as(h))",
    ],
}


test_library_shortcuts_earn_zero = cheats_earn_nothing(CHEATS)
