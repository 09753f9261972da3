"""The check library judged on known answers: the solutions, each classic mistake, cheats."""

from __future__ import annotations

import inspect
import re
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import (
    SEEDS,
    answer_from,
    assert_a_cheat_earns_nothing,
    cheats_earn_nothing,
    graded,
    known_mistake,
    outputs_or_error,
)

from grader.checks import EXERCISES, grade_in_kernel, rubric, run
from grader.checks import batch_norm as batch_norm_checks
from grader.checks import group_norm as group_norm_checks
from grader.checks import layer_norm as layer_norm_checks
from grader.checks import rms_norm as rms_norm_checks
from grader.checks.core import (
    expect,
    judge,
    judge_check,
    named,
    plan,
)
from grader.checks.library import AUTOGRAD, forbid
from grader.course.config import assignments
from grader.course.intake import answer_source, exercises_of, source_notebook
from grader.grading.sandboxed.calling import call, trailing_dims
from norm_utils.gradients import numerical_grad
from normcheck import CheckFailed, check

CASES = [(e, m) for e in EXERCISES.values() for m in e.mistakes]


def test_every_exercise_has_a_solution_cell(solutions):
    assert set(solutions) == set(EXERCISES)


@pytest.mark.parametrize(("exercise", "mistake"), CASES, ids=lambda c: getattr(c, "name", ""))
def test_each_classic_mistake_fails_the_students_own_check_and_is_named(
    exercise, mistake, monkeypatch
):
    """The visible checks alone (a notebook's check cell, `grader check`) refuse every pitfall
    the notebook teaches and name it: no all-clear before grading for a known mistake."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(CheckFailed) as failure:
        check(exercise.name, mistake.impl)
    assert mistake.message in str(failure.value)


def _recording(answer: Any, calls: list[dict[str, Any]]) -> Any:
    """`answer`, noting the arguments of every call (by parameter name) into `calls`."""
    signature = inspect.signature(answer)

    def spy(*args, **kwargs):
        calls.append(signature.bind(*args, **kwargs).arguments)
        return answer(*args, **kwargs)

    return spy


def _forms(value: Any) -> set[str]:
    if isinstance(value, torch.Tensor):
        return {"Tensor", str(value.dtype).removeprefix("torch."), f"{value.dim()}-d"}
    return {type(value).__name__}


def _differs(value: Any, default: Any) -> bool:
    return value is not None if default is None else bool(value != default)


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_checks_pass_every_argument_and_every_promised_form(solutions, name):
    """Derived from the answer's signature: each argument with a default gets another value in
    some check, and every form the exercise's text promises (int or tuple shapes, list or tensor
    lengths, dtypes, ranks) reaches the answer; a student who ignores one cannot pass."""
    exercise, (answer, _) = EXERCISES[name], solutions[name]
    calls: list[dict[str, Any]] = []
    for _, inputs in plan(exercise, hidden=True, seed=0):
        call(exercise, _recording(answer, calls), inputs)  # refused inputs reach it too
    defaults = {
        p.name: p.default
        for p in inspect.signature(answer).parameters.values()
        if p.default is not p.empty
    }
    never_varied = {
        arg
        for arg, default in defaults.items()
        if not any(_differs(call[arg], default) for call in calls if arg in call)
    }
    assert not never_varied, f"no check passes {sorted(never_varied)} other than the default"
    seen = {(arg, form) for call in calls for arg, value in call.items() for form in _forms(value)}
    assert not set(exercise.forms) - seen, "promised but never passed"


# (exercise, a wrong structure, a slip in an otherwise right answer): the rubric documented in
# each check module charges the structure more than the slip, and a wrong structure keeps no
# more than its exercise's cap (docs/rubric.md), whatever checks it happens to pass.
STRUCTURE_AND_SLIP = [
    ("layer_norm", "last dim only", "unbiased variance"),
    ("layer_norm", "statistics over the batch", "unbiased variance"),
    ("batch_norm", "channels taken as the last dim", "unbiased variance to normalize"),
    ("batch_norm", "per-sample statistics", "biased variance stored"),
    ("group_norm", "interleaved groups", "unbiased variance"),
    ("group_norm", "spatial dims left out", "eps outside the square root"),
    ("rms_norm", "last dim only", "eps None read as 0"),
    ("rms_norm", "mean subtracted", "eps outside the square root"),
    ("lengths_to_mask", "True marks padding", "off by one"),
    ("masked_batch_norm", "padding included in the statistics", "biased running variance"),
    ("batch_norm", "per-sample statistics", "swapped momentum"),
    ("batch_norm", "channels taken as the last dim", "batch statistics in eval"),
    ("masked_batch_norm", "padding included in the statistics", "batch statistics in evaluation"),
    ("masked_mean_pool", "padding included in the mean", "masking by multiplication"),
    ("PostLNBlock", "Pre-LN instead of Post-LN", "GELU instead of ReLU"),
    ("PreLNBlock", "a norm missing", "GELU instead of ReLU"),
    ("fold_batch_norm", "columns scaled", "eps outside the square root"),
]


@pytest.mark.parametrize(("name", "structure", "slip"), STRUCTURE_AND_SLIP)
def test_a_wrong_structure_earns_less_than_a_slip_and_little(name, structure, slip):
    exercise = EXERCISES[name]
    little = exercise.structure.cap if exercise.structure else 0.3 * exercise.points
    for seed in SEEDS:
        wrong, slipped = (
            graded(exercise, known_mistake(exercise, m), seed).score for m in (structure, slip)
        )
        assert wrong < slipped and wrong <= little, (wrong, slipped)


# exercise → a slip → the one part of the scenarios it gets wrong: the BatchNorm exercises judge
# a scenario's outputs, its running statistics and its evaluation as parts with their own points
# (`inputs["judged"]`), so a slip costs the points of its part and of no other.
PART_OF_SLIP = {
    "batch_norm": {
        "unbiased variance to normalize": "training outputs",
        "biased variance stored": "running statistics",
        "swapped momentum": "running statistics",
        "running stats not updated": "running statistics",
        "running stats updated in eval": "evaluation",
        "batch statistics in eval": "evaluation",
    },
    "masked_batch_norm": {
        "padding included in the running statistics": "running statistics",
        "padded count in the unbiased correction": "running statistics",
        "biased running variance": "running statistics",
        "running statistics not updated in place": "running statistics",
        "batch statistics in evaluation": "evaluation",
    },
}
SLIP_AND_PART = [
    (n, slip, part) for n, parts in PART_OF_SLIP.items() for slip, part in parts.items()
]


@pytest.mark.parametrize(("name", "slip", "part"), SLIP_AND_PART)
def test_a_slip_in_one_part_of_a_scenario_costs_only_that_parts_points(name, slip, part):
    exercise, impl = EXERCISES[name], known_mistake(EXERCISES[name], slip)
    for seed in SEEDS:
        planned = plan(exercise, hidden=True, seed=seed)
        verdict = graded(exercise, impl, seed)
        failed = {
            str(inputs.get("judged", ""))
            for (_, inputs), o in zip(planned, verdict.outcomes, strict=True)
            if not o.passed
        }
        assert failed == {part}, verdict.render()


def test_partial_credit_right_statistics_wrong_affine_keeps_most_points():
    exercise = EXERCISES["layer_norm"]
    verdict = run(
        exercise, known_mistake(exercise, "affine ignored"), hidden=True, seed=0, source=""
    )
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


# A backward exercise answered by differentiating a forward pass written by hand, by each route
# to autograd: each answer is right (it earns every point when autograd is allowed, which the
# test below checks first), so what takes its points is the block, not its values. The probes
# call `layer_norm_backward(g, x, normalized_shape, weight, eps=)` and
# `batch_norm_backward(g, x, running_mean, running_var, weight, training=, eps=)`: the answer
# puts the mode first in `args` (training for LayerNorm), and the normalized dims follow.
_FORWARD = """
def _forward(x, args, eps, w=None, b=None):
    training, *given = args
    if len(given) == 2:  # LayerNorm: the trailing normalized_shape dims
        n = 1 if isinstance(given[0], int) else len(given[0])
        dims = tuple(range(x.dim() - n, x.dim()))
    else:  # BatchNorm: every dim but the channels'
        dims = (0, *range(2, x.dim()))
        per_channel = (-1, *[1] * (x.dim() - 2))
        w, b = (None, None) if w is None else (w.reshape(per_channel), b.reshape(per_channel))
    if training:
        mean = x.mean(dims, keepdim=True)
        var = x.var(dims, keepdim=True, correction=0)
    else:  # BatchNorm in evaluation: the running statistics
        mean, var = given[0].reshape(per_channel), given[1].reshape(per_channel)
    y = (x - mean) / (var + eps).sqrt()
    return y if w is None else y * w + b

def _leaves(x, args):
    weight = args[-1]
    if weight is None:
        return (torch.nn.Parameter(x.detach().clone()),)
    bias = torch.zeros_like(weight)
    return tuple(torch.nn.Parameter(t.detach().clone()) for t in (x, weight, bias))

def _padded(grads):
    return tuple(grads) if len(grads) == 3 else (grads[0], None, None)
"""
AUTOGRAD_ROUTES = {
    "Tensor.backward": "    leaves = _leaves(x, args)\n"
    "    _forward(*leaves[:1], args, eps, *leaves[1:]).backward(g)\n"
    "    return _padded([leaf.grad for leaf in leaves])",
    "torch.autograd.grad": "    leaves = _leaves(x, args)\n"
    "    y = _forward(*leaves[:1], args, eps, *leaves[1:])\n"
    "    return _padded(torch.autograd.grad(y, leaves, g))",
    "torch.autograd.grad by a name the source scan cannot read": "    leaves = _leaves(x, args)\n"
    "    y = _forward(*leaves[:1], args, eps, *leaves[1:])\n"
    "    return _padded(grad(y, leaves, g))",
    "torch.func.vjp": "    leaves = _leaves(x, args)\n"
    "    _, pullback = torch.func.vjp(lambda *v: _forward(*v[:1], args, eps, *v[1:]), *leaves)\n"
    "    return _padded(pullback(g))",
    "torch.func.jacfwd": "    leaves = _leaves(x, args)\n"
    "    loss = lambda *v: (_forward(*v[:1], args, eps, *v[1:]) * g).sum()\n"
    "    return _padded(torch.func.jacfwd(loss, argnums=tuple(range(len(leaves))))(*leaves))",
}


_MODE_FIRST = "    args = (training, *args)\n"

# What a route imports at the top of the answer cell.
_IMPORTS = {
    "torch.autograd.grad by a name the source scan cannot read": "from torch.autograd import *\n"
}


def _autograd_answer(name: str, route: str) -> str:
    header = _IMPORTS.get(route, "")
    signature = f"def {name}(g, x, *args, eps=1e-5, training=True):\n"
    return f"{header}{_FORWARD}\n{signature}{_MODE_FIRST}{AUTOGRAD_ROUTES[route]}\n"


@pytest.mark.parametrize("name", ["layer_norm_backward", "batch_norm_backward"])
@pytest.mark.parametrize("route", sorted(AUTOGRAD_ROUTES))
def test_a_backward_exercise_answered_by_autograd_earns_nothing(name, route):
    exercise, source = EXERCISES[name], _autograd_answer(name, route)
    allowed = [f for f in exercise.forbidden.families if f is not AUTOGRAD]
    unguarded = replace(exercise, forbidden=forbid(*allowed))
    answer = answer_from(source, name)
    assert run(unguarded, answer, hidden=True, seed=0, source=source).score == exercise.points
    assert_a_cheat_earns_nothing(exercise, source)


# The same answers' gradients by central differences: the course's `numerical_grad`, or its ten
# lines copied into the answer (the notebook invites reading them). Off by about 1e-9, where a
# derived float64 gradient is off by roundings.
_OWN_DIFFERENCES = "from __future__ import annotations\n" + inspect.getsource(
    numerical_grad
).replace("def numerical_grad(", "def _differences(")
# how the differences reach the answer -> (their source, what the feedback says)
DIFFERENCES = {
    "copied into the answer": (_OWN_DIFFERENCES, "as finite differences"),
    "the course's numerical_grad": (
        "from norm_utils.gradients import numerical_grad as _differences\n",
        "earns no points",
    ),
}


def _differences_answer(name: str, differences: str) -> str:
    return (
        f"{differences}{_FORWARD}\ndef {name}(g, x, *args, eps=1e-5, training=True):\n"
        f"{_MODE_FIRST}"
        "    w = args[-1]\n"
        "    leaves = [x] if w is None else [x, w, torch.zeros_like(w)]\n"
        "    loss = lambda *v: (_forward(v[0], args, eps, *v[1:]) * g).sum()\n"
        "    return _padded([\n"
        "        _differences(lambda v, i=i: loss(*leaves[:i], v, *leaves[i + 1:]), leaf)\n"
        "        for i, leaf in enumerate(leaves)\n"
        "    ])\n"
    )


@pytest.mark.parametrize("name", ["layer_norm_backward", "batch_norm_backward"])
@pytest.mark.parametrize("differences", sorted(DIFFERENCES))
def test_a_gradient_by_finite_differences_earns_nothing_and_is_told_why(name, differences):
    differentiating, told = DIFFERENCES[differences]
    source = _differences_answer(name, differentiating)
    verdict = run(EXERCISES[name], answer_from(source, name), hidden=True, seed=0, source=source)
    assert verdict.score == 0
    assert told in verdict.render(), verdict.render()


CHEATS = {
    "layer_norm": [
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n    return F.layer_norm(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    return getattr(F, 'layer_' + 'norm')(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    from grader.reference import functional\n"
        "    return functional.layer_norm(x, s, w, b, eps)",
        "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n"
        "    return torch.nn.LayerNorm(s, eps=eps, elementwise_affine=False)(x) * (1 if w is None "
        "else w) + (0 if b is None else b)",
    ],
    "stable_var": ["def stable_var(x, dim=-1):\n    return torch.var(x, dim, correction=0)"],
    "layer_norm_backward": [
        "def layer_norm_backward(g, x, s, w=None, eps=1e-5):\n"
        "    from grader.reference import functional\n"
        "    return functional.layer_norm_backward(g, x, s, w, eps)",
    ],
}


test_library_normalization_where_an_implementation_is_asked_earns_zero = cheats_earn_nothing(CHEATS)


def test_runtime_tripwire_catches_what_the_source_scan_cannot_see():
    source = "def layer_norm(x, s, w=None, b=None, eps=1e-5):\n    return HIDDEN(x, s, w, b, eps)"
    answer = answer_from("HIDDEN = None\n" + source, "layer_norm")
    answer.__globals__["HIDDEN"] = torch.nn.functional.layer_norm
    verdict = run(EXERCISES["layer_norm"], answer, hidden=True, seed=0, source=source)
    assert verdict.score == 0 and "layer_norm" in verdict.integrity


def _stub(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    raise NotImplementedError()


def test_an_unimplemented_stub_is_said_in_plain_words_and_lets_the_notebook_run_on(capsys):
    check("layer_norm", _stub)  # Run All goes on past an exercise not answered yet
    assert "`layer_norm` is not implemented yet" in capsys.readouterr().out


def test_nbgrader_validate_still_fails_an_unimplemented_stub(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(CheckFailed, match="`layer_norm` is not implemented yet"):
        check("layer_norm", _stub)


def _doubled(x, shape, weight=None, bias=None, eps=1e-5):
    return x * 2


def test_a_wrong_answer_is_shown_as_failing_and_run_all_goes_on(monkeypatch, capsys):
    """In JupyterLab the check cell shows the failure (on stderr) and returns: the demos after
    it run, on the library's version."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    check("layer_norm", _doubled)
    shown = capsys.readouterr()
    assert "differs from the correct values" in shown.err and "✗" not in shown.out


def test_nbgrader_validate_fails_a_wrong_answer_in_plain_words(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    with pytest.raises(CheckFailed) as failure:
        check("layer_norm", _doubled)
    assert "differs from the correct values" in str(failure.value)
    assert failure.value._render_traceback_() == str(failure.value).splitlines()


def test_a_wrong_return_type_is_described_not_crashed_on():
    verdict = run(EXERCISES["stable_var"], lambda x, dim=-1: "0.5", hidden=True, seed=0, source="")
    assert verdict.score == 0 and "not a tensor of numbers" in verdict.render()


def test_grade_returns_the_partial_score_and_check_stays_quiet_when_autograding(
    monkeypatch, capsys
):
    exercise = EXERCISES["layer_norm"]
    unbiased = known_mistake(exercise, "unbiased variance")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    check("layer_norm", unbiased)  # would raise for a student; when grading the score decides
    score = grade_in_kernel("layer_norm", unbiased)
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


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_feedback_never_shows_hidden_inputs_or_reference_outputs(name):
    """Feedback on outputs that are close to right, far off, and those of each known mistake
    names no hidden input and no expected value."""
    exercise = EXERCISES[name]
    planned = [(c, i) for c, i in plan(exercise, hidden=True, seed=5) if c.hidden]
    # Computed once and shared by every answer's judgement, as a grading run shares them.
    shared = [expect(exercise, c, i) for c, i in planned]
    expected = [e.want for e in shared]
    answers = [
        [{k: v + 1e-3 for k, v in e.items()} for e in expected],
        [{k: v * 3 - 0.7 for k, v in e.items()} for e in expected],
        *([outputs_or_error(exercise, m.impl, i) for _, i in planned] for m in exercise.mistakes),
    ]
    secrets = set()
    for (_, inputs), want in zip(planned, expected, strict=True):
        secrets |= _telling_numbers(inputs.values()) | _telling_numbers(want.values())
    for outputs in answers:
        text = judge(exercise, planned, outputs, expected=shared).render()
        assert not {s for s in secrets if s in text}, text
        assert "def " not in text and "BEGIN" not in text


def _layer_norm_over_n_plus_1(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = trailing_dims(normalized_shape)
    centered = x - x.mean(dims, keepdim=True)
    n = int(np.prod([x.shape[d] for d in dims]))
    y = centered / ((centered**2).sum(dims, keepdim=True) / (n + 1) + eps).sqrt()
    return y if weight is None else y * weight + bias


def _layer_norm_uncentered(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = trailing_dims(normalized_shape)
    y = x / (x.var(dims, keepdim=True, correction=0) + eps).sqrt()
    return y if weight is None else y * weight + bias


LN, BN = layer_norm_checks._layer_norm_variant, batch_norm_checks._batch_norm_variant
GN, RMS = group_norm_checks._group_norm_variant, rms_norm_checks._rms_norm_variant

# Wrong answers no known mistake matches (two combined, or one the library does not know), and
# the words their feedback must contain: where the output's statistics went wrong.
UNSEEN = [
    ("layer_norm", partial(LN, axis="batch", correction=1), "normalized over the batch"),
    ("layer_norm", partial(LN, axis="last", affine="ignored"), "over the last dim only"),
    ("layer_norm", _layer_norm_uncentered, "has a mean of up to"),
    ("layer_norm", _layer_norm_over_n_plus_1, "times the correct one in every row"),
    ("batch_norm", partial(BN, axis="sample", norm_correction=1), "over each sample's features"),
    ("group_norm", partial(GN, interleaved=True, correction=1), "normalized over every G-th"),
    ("rms_norm", partial(RMS, center=True, eps_default=0.0), "`y` has mean 0 over"),
    ("rms_norm", partial(RMS, last_dim_only=True, use_weight=False), "`weight` is not applied"),
]


@pytest.mark.parametrize(
    ("name", "answer", "words"), UNSEEN, ids=[f"{n}-{w}" for n, _, w in UNSEEN]
)
def test_an_unseen_wrong_answer_is_explained_by_what_its_output_gets_wrong(name, answer, words):
    for seed in SEEDS:
        text = run(EXERCISES[name], answer, hidden=True, seed=seed, source="").render()
        assert words in text, text


def _course_text(name: str) -> str:
    """What the student reads about exercise `name`: its notebook's text and its answer cell."""
    for assignment in assignments():
        notebook = source_notebook(assignment)
        if name in exercises_of(notebook):
            markdown = (c.source for c in notebook.cells if c.cell_type == "markdown")
            return "\n".join(markdown) + answer_source(notebook, name)
    raise LookupError(name)


def _one_output_wrong(outputs: dict[str, np.ndarray], key: str) -> dict[str, np.ndarray]:
    wrong = ~outputs[key] if outputs[key].dtype == np.bool_ else outputs[key] + 1
    return outputs | {key: wrong}


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_feedback_names_every_output_in_the_courses_words(name):
    """Each output, when it alone is wrong, is named in feedback by words or by a name the
    notebook itself uses (`running_mean`, `grad_x`), never by an internal key (`y_step0`)."""
    exercise, text = EXERCISES[name], _course_text(name)
    for check_, inputs in plan(exercise, hidden=True, seed=0):
        expected = expect(exercise, check_, inputs)  # shared by the outputs judged wrong in turn
        want = expected.want
        for key in want:
            wrong = _one_output_wrong(want, key)
            problem = judge_check(exercise, check_, inputs, wrong, expected).problem
            assert named(key) in problem
            assert not re.search(r"[A-Za-z]_\d|_(?:step|after|eval)\b", problem), problem
            code_names = re.findall(r"\w*_\w*", key) if " " in key else [key]
            unknown = [n for n in code_names if not re.search(rf"\b{re.escape(n)}\b", text)]
            assert not unknown, f"{unknown} is not a name the notebook uses"


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
        [call(exercise, variant, inputs)[0] for _, inputs in planned],
    )
    assert verdict.passed, verdict.render()


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_check_leaves_torchs_random_stream_as_it_was(solutions, name):
    """The notebook's later cells draw the same numbers whether or not a check ran before them."""
    answer, source = solutions[name]
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    run(EXERCISES[name], answer, hidden=False, seed=0, source=source)
    assert torch.equal(torch.rand(3), expected)


def test_the_documented_rubric_is_the_checks():
    """docs/rubric.md cannot drift from the checks' points and descriptions."""
    documented = (Path(__file__).resolve().parents[1] / "docs" / "rubric.md").read_text()
    assert documented == rubric(), (
        "docs/rubric.md is stale: regenerate it with .venv/bin/python -c "
        "\"from grader.checks import rubric; print(rubric(), end='')\" > docs/rubric.md"
    )
