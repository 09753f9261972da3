"""The check library judged on known answers: the solutions, each classic mistake, cheats."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch
from conftest import SEEDS, answer_from

from grader.checks import EXERCISES, CheckFailed, check, grade, run
from grader.checks.core import StudentError, expected_outputs, judge, outputs_of, plan

CASES = [(e, m) for e in EXERCISES.values() for m in e.mistakes]


def test_every_exercise_has_a_solution_cell(solutions):
    assert set(solutions) == set(EXERCISES)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_solution_earns_full_marks_with_no_diagnosis_whatever_the_seed(solutions, name):
    answer, source = solutions[name]
    for seed in SEEDS:
        verdict = run(EXERCISES[name], answer, hidden=True, seed=seed, source=source)
        assert verdict.score == EXERCISES[name].points, verdict.render()
        assert verdict.passed and not verdict.diagnoses


@pytest.mark.parametrize(("exercise", "mistake"), CASES, ids=lambda c: getattr(c, "name", ""))
def test_each_classic_mistake_is_named_and_costs_points_whatever_the_seed(exercise, mistake):
    for seed in SEEDS:
        verdict = run(exercise, mistake.impl, hidden=True, seed=seed, source="")
        assert verdict.score < exercise.points
        assert mistake in verdict.diagnoses, verdict.render()
        assert mistake.message in verdict.render()


def test_partial_credit_right_statistics_wrong_affine_keeps_most_points():
    exercise = EXERCISES["layer_norm"]
    affine_ignored = next(m for m in exercise.mistakes if m.name == "affine ignored")
    verdict = run(exercise, affine_ignored.impl, hidden=True, seed=0, source="")
    assert exercise.points / 2 < verdict.score < exercise.points


def test_visible_checks_are_a_subset_and_never_hidden():
    for exercise in EXERCISES.values():
        visible = plan(exercise, hidden=False, seed=0)
        assert visible and all(not c.hidden for c, _ in visible)
        assert len(visible) < len(plan(exercise, hidden=True, seed=0))


def test_hidden_inputs_depend_on_the_grading_seed_visible_ones_do_not():
    first, second = (
        plan(EXERCISES["layer_norm"], True, seed=1),
        plan(EXERCISES["layer_norm"], True, seed=2),
    )
    for (check_, x), (_, y) in zip(first, second, strict=True):
        differs = any(not np.array_equal(x[k], y[k]) for k in x)
        assert differs == check_.hidden


CHEATS = {
    "layer_norm": [
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n    return F.layer_norm(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    return getattr(F, 'layer_' + 'norm')(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    return norm_utils.layer_norm(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    return torch.nn.LayerNorm(s, eps=eps, elementwise_affine=False)(x) * (1 if w is None "
        "else w) + (0 if b is None else b)",
    ],
    "stable_var": ["def stable_var(x, dim=-1):\n    return torch.var(x, dim, correction=0)"],
    "layer_norm_backward": [
        "def layer_norm_backward(g, x, s, w=None, eps=1e-5):\n"
        "    return norm_utils.layer_norm_backward(g, x, s, w, eps)"
    ],
}


@pytest.mark.parametrize(
    ("name", "source"), [(n, s) for n, ss in CHEATS.items() for s in ss], ids=lambda v: v[:30]
)
def test_library_normalization_where_an_implementation_is_asked_earns_zero(name, source):
    exercise = EXERCISES[name]
    verdict = run(exercise, answer_from(source, name), hidden=True, seed=0, source=source)
    assert verdict.score == 0
    assert "earns no points" in verdict.render()


def test_runtime_tripwire_catches_what_the_source_scan_cannot_see():
    source = "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n    return HIDDEN(x, s, w, b, eps)"
    answer = answer_from("HIDDEN = None\n" + source, "layer_norm")
    answer.__globals__["HIDDEN"] = torch.nn.functional.layer_norm
    verdict = run(EXERCISES["layer_norm"], answer, hidden=True, seed=0, source=source)
    assert verdict.score == 0 and "layer_norm" in verdict.integrity


def test_an_unimplemented_stub_is_described_in_plain_words():
    def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
        raise NotImplementedError()

    with pytest.raises(CheckFailed) as failure:
        check("layer_norm", layer_norm)
    assert "not implemented yet" in str(failure.value)
    assert failure.value._render_traceback_() == str(failure.value).splitlines()


def test_a_wrong_return_type_is_described_not_crashed_on():
    verdict = run(EXERCISES["stable_var"], lambda x, dim=-1: "0.5", hidden=True, seed=0, source="")
    assert verdict.score == 0 and "not a tensor of numbers" in verdict.render()


def test_grade_returns_the_partial_score_and_check_stays_quiet_when_autograding(
    monkeypatch, capsys
):
    exercise = EXERCISES["layer_norm"]
    unbiased = next(m for m in exercise.mistakes if m.name == "unbiased variance").impl
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    check("layer_norm", unbiased)  # would raise for a student; when grading the score decides
    score = grade("layer_norm", unbiased)
    assert 0 < score < exercise.points
    assert "n−1" in capsys.readouterr().out


def _telling_numbers(arrays) -> set[str]:
    """Each float value of `arrays` as feedback would print it, skipping ones that could appear
    by coincidence (integers, tiny values)."""
    shown = set()
    for array in arrays:
        if not np.issubdtype(array.dtype, np.floating):
            continue
        for value in array.flatten()[:20].tolist():
            if abs(value) > 0.05 and abs(value - round(value)) > 0.05:
                shown |= {f"{value:.4f}", f"{value:.3f}"}
    return shown


def _outputs_or_error(exercise, impl, inputs):
    try:
        return outputs_of(exercise, impl, inputs)
    except Exception as error:  # a mistake need not apply to every input
        return StudentError(type(error).__name__, str(error))


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_feedback_never_shows_hidden_inputs_or_reference_outputs(name):
    """Feedback on outputs that are close to right, far off, and those of each known mistake
    names no hidden input and no expected value."""
    exercise = EXERCISES[name]
    planned = [(c, i) for c, i in plan(exercise, hidden=True, seed=5) if c.hidden]
    expected = [expected_outputs(exercise, c, i) for c, i in planned]
    answers = [
        [{k: v + 1e-3 for k, v in e.items()} for e in expected],
        [{k: v * 3 - 0.7 for k, v in e.items()} for e in expected],
        *([_outputs_or_error(exercise, m.impl, i) for _, i in planned] for m in exercise.mistakes),
    ]
    secrets = set()
    for (_, inputs), want in zip(planned, expected, strict=True):
        secrets |= _telling_numbers(inputs.values()) | _telling_numbers(want.values())
    for outputs in answers:
        text = judge(exercise, planned, outputs).render()
        assert not {s for s in secrets if s in text}, text
        assert "def " not in text and "BEGIN" not in text


VARIANTS = sorted(
    {
        (e.name, m.impl.func)
        for e in EXERCISES.values()
        for m in e.mistakes
        if isinstance(m.impl, partial)
    },
    key=lambda v: (v[0], v[1].__name__),
)


@pytest.mark.parametrize(("name", "variant"), VARIANTS, ids=lambda v: getattr(v, "__name__", v))
def test_a_mistake_variant_with_every_switch_off_is_the_reference(name, variant):
    """Each known mistake is one switch of a shared variant: with none set, it must be right,
    or a diagnosis could match an answer for a difference the mistake does not make."""
    exercise = EXERCISES[name]
    verdict = judge(
        exercise,
        planned := plan(exercise, hidden=True, seed=0),
        [outputs_of(exercise, variant, inputs) for _, inputs in planned],
    )
    assert verdict.passed, verdict.render()
