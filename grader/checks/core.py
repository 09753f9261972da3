"""What an exercise check is, and how a student's answer is judged against it.

One declaration per exercise serves the visible tests, the hidden tests and ``grader check``.
Every check has the same three steps, kept apart so that the autograder can run the middle one
in a sandbox and the other two in its own process:

1. choose inputs              ``Check.inputs(rng) -> Arrays``               (grader)
2. call the student's code    ``Exercise.probe(answer, inputs) -> Arrays``  (student's process)
3. compare plain arrays       ``judge(exercise, inputs, outputs)``          (grader)

Step 3 runs the same probe on the reference and on every known mistake, so a wrong answer is
not only failed but named: "your output is what ε outside the square root would give". An
answer no known mistake matches is explained by the first property of a correct output it
violates ("`y` is normalized over the last dim only"; `properties.py`), or else by where and how
much it differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from grader.checks.library import Forbidden
from grader.checks.properties import Property, Structural, explain, extent
from grader.sandboxed.probe import Arrays, Outputs, Probe, StudentError, outputs_of


@dataclass(frozen=True)
class Mistake:
    """A classic wrong answer, written out so its output can be recognized."""

    name: str
    message: str  # one sentence to the student: what they did, not the fix's code
    impl: Any  # same interface as the reference, deliberately wrong
    structural: bool = False  # a wrong structure: the exercise is capped (`Structure`)


@dataclass(frozen=True)
class Check:
    """One property of the answer, tested on inputs chosen to separate right from wrong."""

    description: str  # shown in feedback; says what is tested, never the inputs' values
    inputs: Callable[[np.random.Generator], Arrays]
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


def also_visible(check: Check, points: float) -> tuple[Check, Check]:
    """A hidden check and its twin on fixed inputs, which the student's own `check()` runs too:
    a pitfall the notebook teaches must fail before grading, not only at it. The hidden check
    still draws its inputs afresh for every grading run; the twin takes `points` from it, so the
    exercise's total is unchanged."""
    if not (check.hidden and 0 < points < check.points):
        raise ValueError(f"{check.description!r}: a visible twin needs a hidden check and a share")
    return replace(check, hidden=False, points=points), replace(check, points=check.points - points)


@dataclass(frozen=True)
class Structure:
    """What an exercise's answer must be built as (which values share a statistic, where each
    norm sits, samples kept apart): the checks an answer with another structure still passes
    presuppose it, so such an answer keeps at most `cap` points, whatever those checks give."""

    what: str  # in the course's words, for the rubric
    cap: float


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
        resolved = tuple(
            replace(
                c,
                rtol=self.rtol if c.rtol is None else c.rtol,
                atol=self.atol if c.atol is None else c.atol,
            )
            for c in self.checks
        )
        object.__setattr__(self, "checks", resolved)

    @property
    def points(self) -> float:
        return sum(c.points for c in self.checks)


@dataclass
class CheckOutcome:
    check: Check
    passed: bool
    problem: str = ""  # plain words; empty when passed
    mistake: Mistake | None = None
    raised: bool = False  # the answer raised, crashed or was missing: no output to compare
    finding: str = ""  # for no known mistake: the property of a correct output it violates

    @property
    def structural(self) -> bool:
        """Failed for a wrong structure: a structural mistake or property (`Structural`)."""
        return (self.mistake is not None and self.mistake.structural) or isinstance(
            self.finding, Structural
        )


@dataclass
class Verdict:
    exercise: Exercise
    outcomes: list[CheckOutcome] = field(default_factory=list)
    integrity: str = ""  # why the exercise earns nothing despite its outputs
    graded: bool = True  # False: only the visible checks ran (a student's own test run)

    @property
    def capped(self) -> bool:
        """A wrong structure was found, so the checks passed count for at most its cap."""
        structure = self.exercise.structure
        earned = sum(o.check.points for o in self.outcomes if o.passed)
        return (
            structure is not None
            and earned > structure.cap
            and any(o.structural for o in self.outcomes)
        )

    @property
    def score(self) -> float:
        if self.integrity:
            return 0.0
        if self.capped:
            return float(self.exercise.structure.cap)
        return float(sum(o.check.points for o in self.outcomes if o.passed))

    @property
    def max_score(self) -> float:
        return float(sum(o.check.points for o in self.outcomes))

    @property
    def passed(self) -> bool:
        return not self.integrity and all(o.passed for o in self.outcomes)

    @property
    def diagnoses(self) -> list[Mistake]:
        seen: dict[str, Mistake] = {}
        for o in self.outcomes:
            if o.mistake is not None:
                seen.setdefault(o.mistake.name, o.mistake)
        return list(seen.values())

    def render(self) -> str:
        """Feedback in plain words: never inputs, reference outputs or reference code."""
        name, total = self.exercise.name, len(self.outcomes)
        if self.graded:
            head = f"{name}: {self.score:g} / {self.max_score:g} points"
        else:
            passing = sum(o.passed for o in self.outcomes)
            head = f"{name}: {passing} of {total} visible checks pass"
            head += "" if passing < total else " (more checks run when graded)"
        lines = [head]
        if self.integrity:
            lines.append(f"  ✗ {self.integrity}")
        problems = {o.problem for o in self.outcomes}
        if total > 1 and len(problems) == 1 and all(o.raised for o in self.outcomes):
            # one cause for every check (missing, crashed, not implemented): say it once
            lines.append(f"  ✗ {problems.pop()}")
        else:
            for o in self.outcomes:
                tag = " (hidden)" if o.check.hidden else ""
                mark = "✓" if o.passed else "✗"
                lines.append(
                    f"  {mark} {o.check.description}{tag}" + ("" if o.passed else f": {o.problem}")
                )
        for m in self.diagnoses:
            lines.append(f"  → {m.message}")
        if self.graded and self.capped:
            what, cap = self.exercise.structure.what, self.exercise.structure.cap
            lines.append(
                f"  → Your answer is not built as the exercise asks ({what}); the checks it "
                f"passes presuppose that structure, so it keeps at most {cap:g} of their points."
            )
        return "\n".join(lines)


def upcast(inputs: Arrays) -> Arrays:
    return {
        k: v.astype(np.float64) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in inputs.items()
    }


def named(key: str) -> str:
    """An output as feedback names it: a name from the exercise's text in code style, or words
    ("running_var after training step 2") as they are."""
    return key if " " in key else f"`{key}`"


def _difference(got: Arrays, want: Arrays, check: Check) -> str:
    """Why `got` is not `want`, in plain words; empty when they agree within tolerance."""
    for key, expected in want.items():
        if key not in got:
            return f"no {named(key)} was returned"
        actual = got[key]
        if actual.shape != expected.shape:
            return f"{named(key)} has shape {actual.shape}, expected {expected.shape}"
        if not np.all(np.isfinite(actual) | ~np.isfinite(expected)):
            return f"{named(key)} contains NaN or infinity"
        if not np.allclose(actual, expected, rtol=check.rtol, atol=check.atol, equal_nan=True):
            return f"{named(key)} differs from the correct values beyond the tolerance"
    return ""


def margin(got: Arrays, want: Arrays, check: Check) -> float:
    """Largest |got − want| / (atol + rtol·|want|) over every output; inf for a shape mismatch,
    a missing output or a NaN where the expected value is finite."""
    worst = 0.0
    for key, expected in want.items():
        actual = got.get(key)
        if actual is None or actual.shape != expected.shape:
            return float("inf")
        actual, expected = actual.astype(np.float64), expected.astype(np.float64)
        both_nan = np.isnan(actual) & np.isnan(expected)
        if np.any(~np.isfinite(actual) & np.isfinite(expected)):
            return float("inf")
        allowance = check.atol + check.rtol * np.abs(expected)
        ratio = np.where(both_nan, 0.0, np.abs(actual - expected) / allowance)
        worst = max(worst, float(np.nanmax(ratio)) if ratio.size else 0.0)
    return worst


def expected_outputs(exercise: Exercise, check: Check, inputs: Arrays) -> Arrays:
    """The reference's outputs; none for a check that expects an exception."""
    if check.expects is not None:
        return {}
    ref_inputs = upcast(inputs) if check.float64_oracle else inputs
    return outputs_of(exercise, exercise.reference, ref_inputs)


def _diagnose(exercise: Exercise, check: Check, inputs: Arrays, got: Arrays, want: Arrays):
    """The known mistake whose output the student's output matches, if any."""
    for mistake in exercise.mistakes:
        try:
            wrong = outputs_of(exercise, mistake.impl, inputs)
        except Exception:  # a mistake may not apply to every input (e.g. shapes)
            continue
        if _difference(wrong, want, check) and not _difference(got, wrong, check):
            return mistake
    return None


def _extent(check: Check, got: Arrays, want: Arrays) -> str:
    """Where and by how much the first wrong output differs; '' when none can be compared."""
    for key, expected in want.items():
        actual = got.get(key)
        if (
            actual is not None
            and actual.shape == expected.shape
            and _difference({key: actual}, {key: expected}, check)
        ):
            return extent(key, actual, expected, check.rtol, check.atol)
    return ""


def _judge_refusal(exercise: Exercise, check: Check, inputs: Arrays, got: Outputs) -> CheckOutcome:
    """A check that the answer refuses these inputs by raising `check.expects`."""
    expected = check.expects.__name__
    if isinstance(got, StudentError):
        if got.kind == expected:
            return CheckOutcome(check, True)
        # the check's description names the exception expected; say what happened, in the same
        # words as every other check (a stub's NotImplementedError is then said once)
        return CheckOutcome(check, False, got.describe(exercise.name), raised=True)
    for mistake in exercise.mistakes:  # a known way of not refusing, recognized by its output
        try:
            wrong = outputs_of(exercise, mistake.impl, inputs)
        except Exception:
            continue
        if not _difference(got, wrong, check):
            return CheckOutcome(
                check, False, f"returned values instead of raising {expected}", mistake
            )
    finding = f"`{exercise.name}` returned values on inputs it must refuse: raise {expected}"
    return CheckOutcome(check, False, finding, finding=finding)


def judge_check(exercise: Exercise, check: Check, inputs: Arrays, got: Outputs) -> CheckOutcome:
    if check.expects is not None:
        return _judge_refusal(exercise, check, inputs, got)
    if isinstance(got, StudentError):
        return CheckOutcome(check, False, got.describe(exercise.name), raised=True)
    want = expected_outputs(exercise, check, inputs)
    problem = _difference(got, want, check)
    if not problem:
        return CheckOutcome(check, True)
    mistake = _diagnose(exercise, check, inputs, got, want)
    if mistake is not None:
        return CheckOutcome(check, False, problem, mistake)
    wrong = {
        k: w for k, w in want.items() if _difference({k: got[k]} if k in got else {}, {k: w}, check)
    }
    finding = explain(exercise.properties, inputs, got, wrong)
    detail = finding or _extent(check, got, want)
    return CheckOutcome(check, False, problem + (f"; {detail}" if detail else ""), finding=finding)


# Tolerance for checks on rows (channels, groups) of >= 4096 values: the unbiased variance moves
# a normalized output by |x̂|/2n < 1.3e-4·|x̂|, a tenth of it, so those checks do not also charge
# the n−1 slip, which has its own check on few values (see each module's rubric); every mistake
# they target moves outputs by more than 1e-2.
WIDE = {"rtol": 1e-3, "atol": 1e-3}

Plan = list[tuple[Check, Arrays]]


def plan(exercise: Exercise, hidden: bool, seed: int) -> Plan:
    """The checks to run and their inputs. Visible checks always draw the same inputs (what the
    student sees is what is graded); hidden ones draw from the grading run's seed."""
    return [
        (c, c.inputs(np.random.default_rng([seed if c.hidden else 0, i])))
        for i, c in enumerate(exercise.checks)
        if hidden or not c.hidden
    ]


def judge(
    exercise: Exercise, planned: Plan, outputs: list[Outputs], integrity: str = ""
) -> Verdict:
    """Judge the outputs the student's code produced for each planned check, in order."""
    outcomes = [judge_check(exercise, c, i, o) for (c, i), o in zip(planned, outputs, strict=True)]
    graded = any(c.hidden for c, _ in planned) or not any(c.hidden for c in exercise.checks)
    return Verdict(exercise, outcomes, integrity, graded)
