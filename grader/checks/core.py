"""What an exercise check is, and how a student's answer is judged against it.

One declaration per exercise serves the visible tests, the hidden tests and ``grader check``.
Every check has the same three steps, kept apart so that the autograder can run the middle one
in a sandbox and the other two in its own process:

1. choose inputs              ``Check.inputs(rng) -> Arrays``               (grader)
2. call the student's code    ``Exercise.probe(answer, inputs) -> Arrays``  (student's process)
3. compare plain arrays       ``judge(exercise, planned, outputs, expected)``

Before step 3, ``expect`` runs the same probe on the reference and on every known mistake: the
outputs these inputs should give, and those of each classic wrong answer. They depend on the
inputs only, so a grading run computes them once for every student (`prepare`), and the release
stores them for the visible checks, whose inputs are fixed (`normcheck.expected`). Step 3 is
`normcheck.judge`, which compares plain arrays and holds no reference: a wrong answer is named
when its output is a known mistake's ("ε outside the square root"), else explained by the first
property of a correct output it violates (`normcheck.properties`), or by where and how much it
differs. The student's own `check()` runs the very same judge on the stored outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np
import torch

from grader.checks.inputs import Case
from grader.checks.library import Forbidden
from grader.grading.sandboxed.calling import Arrays, Outputs, Probe, StudentError, outputs_of
from normcheck.judge import CheckOutcome, Expected, Structure, Verdict, difference, margin, named
from normcheck.judge import judge_check as judged
from normcheck.properties import Property

__all__ = [
    "FLOAT64",
    "WIDE",
    "Arrays",
    "Check",
    "CheckOutcome",
    "Exercise",
    "Expected",
    "Mistake",
    "Outputs",
    "Structure",
    "StudentError",
    "Verdict",
    "expect",
    "expected_outputs",
    "hidden",
    "judge",
    "judge_check",
    "known_mistake",
    "margin",
    "named",
    "outputs_of",
    "plan",
    "prepare",
    "visible",
]


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer, written out so its output can be recognized."""

    name: str
    message: str  # one sentence to the student: what they did, not the fix's code
    impl: Any  # same interface as the reference, deliberately wrong
    structural: bool = False  # a wrong structure: the exercise is capped (`Structure`)


def known_mistake(
    variant: Callable[..., Any],
    name: str,
    message: str,
    *,
    structural: bool = False,
    **switches: Any,
) -> Mistake:
    """The classic mistake `name`: `variant`, the answer written out with a switch per slip (all
    off is the reference), with `switches` on."""
    return Mistake(name, message, partial(variant, **switches), structural)


@dataclass(frozen=True)
class Check:
    """One property of the answer, tested on inputs chosen to separate right from wrong."""

    description: str  # shown in feedback; says what is tested, never the inputs' values
    inputs: Case
    points: float
    hidden: bool = False
    # None: the exercise's tolerance (`Exercise.rtol`, `Exercise.atol`)
    rtol: float | None = None
    atol: float | None = None
    # Compare against the reference run in float64 (the ground truth) rather than in the
    # input's dtype: needed where a correct float32 answer is itself off by ~1e-3 (mean 1e4).
    float64_oracle: bool = False
    # The exception the answer must raise on these inputs (a refused length, an empty batch):
    # the check passes when it does, whatever the reference would have returned.
    expects: type[Exception] | None = None
    # The share of this hidden check's points that a visible twin on fixed inputs takes (see
    # `hidden`); the exercise splits the check in two (`Exercise.checks` holds no twin share).
    twin: float = 0.0

    @property
    def refusal(self) -> str:
        """The name of the exception the answer must raise; '' when it must return outputs."""
        return self.expects.__name__ if self.expects is not None else ""


# An exercise's checks read as its rubric, a row each: `visible(points, description, inputs)` or
# `hidden(points, description, inputs)`, then the check's options (tolerance, `expects`, `twin`).


def visible(points: float, description: str, inputs: Case, **options: Any) -> Check:
    """A check the student's own `check()` runs too, on fixed inputs (what the student sees is
    what is graded)."""
    return Check(description, inputs, points, **options)


def hidden(points: float, description: str, inputs: Case, **options: Any) -> Check:
    """A check run only when graded, on inputs drawn afresh for every grading run.

    With `twin=share`, a visible twin on fixed inputs takes `share` of its points, so that a
    pitfall the notebook teaches fails the student's own `check()` before grading, not only at
    it; the exercise's total is unchanged.
    """
    return Check(description, inputs, points, hidden=True, **options)


def _split(check: Check) -> tuple[Check, ...]:
    """`check`, preceded by its visible twin where it has one."""
    if not check.twin:
        return (check,)
    if not (check.hidden and 0 < check.twin < check.points):
        raise ValueError(f"{check.description!r}: a visible twin needs a hidden check and a share")
    twin = replace(check, hidden=False, points=check.twin, twin=0.0)
    return twin, replace(check, points=check.points - check.twin, twin=0.0)


@dataclass(frozen=True)
class Exercise:
    name: str  # the function or class the student defines
    reference: Any
    probe: Probe
    checks: tuple[Check, ...]
    mistakes: tuple[Mistake, ...] = ()
    # The library's implementations that would do the exercise for the student (library.py).
    forbidden: Forbidden = field(default_factory=Forbidden)
    # (argument, form) pairs the exercise's text promises, each of which some check must pass:
    # a type name ("int", "tuple", "list", "Tensor"), a dtype ("float64") or a rank ("3-d").
    forms: tuple[tuple[str, str], ...] = ()
    # What a correct output always satisfies, to explain a wrong one no known mistake matches.
    properties: tuple[Property, ...] = ()
    # None: no check presupposes more than it tests itself.
    structure: Structure | None = None
    # The tolerance of every check that does not set its own.
    rtol: float = 1e-5
    atol: float = 1e-5

    def __post_init__(self) -> None:
        resolved = (
            replace(
                c,
                rtol=self.rtol if c.rtol is None else c.rtol,
                atol=self.atol if c.atol is None else c.atol,
            )
            for c in self.checks
        )
        object.__setattr__(self, "checks", tuple(t for c in resolved for t in _split(c)))

    @property
    def points(self) -> float:
        return sum(c.points for c in self.checks)


def upcast(inputs: Arrays) -> Arrays:
    return {
        k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in inputs.items()
    }


def expected_outputs(exercise: Exercise, check: Check, inputs: Arrays) -> Arrays:
    """The reference's outputs; none for a check that expects an exception."""
    if check.expects is not None:
        return {}
    ref_inputs = upcast(inputs) if check.float64_oracle else inputs
    return outputs_of(exercise, exercise.reference, ref_inputs)


def _told_apart(exercise: Exercise, check: Check, inputs: Arrays, want: Arrays):
    """Each known mistake's outputs on `inputs` where they differ from `want` (a mistake may not
    apply to every input, e.g. shapes: it is left out). torch's random state is left as it was
    (a mistake may build a model)."""
    mistakes = []
    with torch.random.fork_rng():
        for mistake in exercise.mistakes:
            try:
                wrong = outputs_of(exercise, mistake.impl, inputs)
            except Exception:
                continue
            if check.expects is not None or difference(wrong, want, check):
                mistakes.append((mistake, wrong))
    return tuple(mistakes)


def expect(exercise: Exercise, check: Check, inputs: Arrays) -> Expected:
    """What `inputs` should give: the reference's outputs, and each known mistake's where they
    differ from them, computed the first time a wrong answer needs them."""
    want = expected_outputs(exercise, check, inputs)
    return Expected(want, partial(_told_apart, exercise, check, inputs, want))


def judge_check(
    exercise: Exercise,
    check: Check,
    inputs: Arrays,
    got: Outputs,
    expected: Expected | None = None,
) -> CheckOutcome:
    """One check of `exercise` (its expected outputs computed here unless given)."""
    if expected is None:
        expected = expect(exercise, check, inputs)
    return judged(exercise.name, exercise.properties, check, inputs, got, expected)


# Tolerance for checks on rows (channels, groups) of >= 4096 values: the unbiased variance moves
# a normalized output by |x̂|/2n < 1.3e-4·|x̂|, a tenth of it, so those checks do not also charge
# the n−1 slip, which has its own check on few values (see each module's rubric); every mistake
# they target moves outputs by more than 1e-2.
WIDE = {"rtol": 1e-3, "atol": 1e-3}

# Tolerance for float64 answers judged against a float64 reference: a correct answer is within a
# few float64 roundings of it, every mistake the checks target off by order one.
FLOAT64 = {"rtol": 1e-7, "atol": 1e-9}

Plan = list[tuple[Check, Arrays]]


def plan(exercise: Exercise, hidden: bool, seed: int) -> Plan:
    """The checks to run and their inputs. Visible checks always draw the same inputs (what the
    student sees is what is graded); hidden ones draw from the grading run's seed."""
    return [
        (c, c.inputs(np.random.default_rng([seed if c.hidden else 0, i])))
        for i, c in enumerate(exercise.checks)
        if hidden or not c.hidden
    ]


@dataclass(frozen=True)
class Prepared:
    """Everything about one exercise that does not depend on the student: the checks' inputs
    and what they should give, in the same order."""

    planned: Plan
    expected: list[Expected]


def prepare(exercise: Exercise, hidden: bool, seed: int) -> Prepared:
    """The checks' inputs and expected outputs. torch's global random state is left as it was
    (the references and the mistakes may build models): in a notebook, a check cell never
    changes the random numbers the later cells draw."""
    planned = plan(exercise, hidden, seed)
    with torch.random.fork_rng():
        return Prepared(planned, [expect(exercise, c, i) for c, i in planned])


def judge(
    exercise: Exercise,
    planned: Plan,
    outputs: list[Outputs],
    integrity: str = "",
    expected: list[Expected] | None = None,
) -> Verdict:
    """Judge the outputs the student's code produced for each planned check, in order, against
    `expected` (computed here unless given: see `prepare`)."""
    if expected is None:
        expected = [expect(exercise, c, i) for c, i in planned]
    outcomes = [
        judge_check(exercise, c, i, o, e)
        for (c, i), o, e in zip(planned, outputs, expected, strict=True)
    ]
    graded = any(c.hidden for c, _ in planned) or not any(c.hidden for c in exercise.checks)
    return Verdict(exercise, outcomes, integrity, graded)
