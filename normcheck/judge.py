"""Judge a student's outputs against the outputs expected for the same inputs: plain arrays only.

What a check's inputs should give (`Expected`: the reference's outputs and every known
mistake's) is computed apart from this module: by the grader, once per grading run
(`grader.checks.core.expect`), or at release time for the visible checks, stored as data that
the student's own `check()` reads (`normcheck.expected`). Judging is the same code in both
places, and it needs nothing but arrays, words and tolerances: it holds no reference, no known
mistake's code and no hidden check.

A wrong answer is not only failed but named when its output is a known mistake's ("ε outside the
square root"); else explained by the first property of a correct output it violates
(`normcheck.properties`), or by where and how much it differs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from normcheck.properties import Property, Structural, explain, extent
from normcheck.shared import Arrays, Outputs, StudentError


class Rule(Protocol):
    """What the judge reads of a check (`grader.checks.core.Check`, `normcheck.expected.Rule`)."""

    description: str
    points: float
    hidden: bool
    rtol: float
    atol: float

    @property
    def refusal(self) -> str: ...  # the exception the answer must raise; '' to return outputs


class Named(Protocol):
    """A known mistake as the judge names it (`grader.checks.core.Mistake` carries its code)."""

    name: str
    message: str  # one sentence to the student: what they did, not the fix's code
    structural: bool  # a wrong structure: the exercise is capped (`Structure`)


@dataclass(frozen=True)
class Expected:
    """What one check's inputs should give."""

    want: Arrays  # the reference's outputs; none for a check that expects the answer to raise
    # Each known mistake that runs on these inputs and can be told from the reference there
    # (for a refusal: each one that returns), with its outputs; or how to compute them, the
    # first time a wrong answer needs them (a right one never does).
    known: tuple[tuple[Any, Arrays], ...] | Callable[[], tuple[tuple[Any, Arrays], ...]] = ()

    @functools.cached_property
    def mistakes(self) -> tuple[tuple[Any, Arrays], ...]:
        return self.known() if callable(self.known) else self.known


@dataclass(frozen=True)
class Structure:
    """What an exercise's answer must be built as (which values share a statistic, where each
    norm sits, samples kept apart): the checks an answer with another structure still passes
    presuppose it, so such an answer keeps at most `cap` points, whatever those checks give."""

    what: str  # in the course's words, for the rubric
    cap: float


@dataclass
class CheckOutcome:
    check: Any  # a Rule
    passed: bool
    problem: str = ""  # plain words; empty when passed
    mistake: Any = None  # the Named mistake the output matches
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
    exercise: Any  # anything with the exercise's `name` and `structure`
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
    def not_implemented(self) -> bool:
        """Every check stopped at the answer's NotImplementedError: not answered yet."""
        return bool(self.outcomes) and all(
            o.raised and o.problem == NOT_IMPLEMENTED.format(name=self.exercise.name)
            for o in self.outcomes
        )

    def visible(self) -> Verdict:
        """What the visible checks alone say, as the student's own `check` says it: the
        feedback a course may release before the due date (c.GradeOnSubmit.before_due)."""
        return replace(
            self, outcomes=[o for o in self.outcomes if not o.check.hidden], graded=False
        )

    @property
    def diagnoses(self) -> list[Any]:
        seen: dict[str, Any] = {}
        for o in self.outcomes:
            if o.mistake is not None:
                seen.setdefault(o.mistake.name, o.mistake)
        return list(seen.values())

    def _shared_findings(self) -> dict[str, tuple[str, int, bool]]:
        """The findings (a property broken) of two checks or more, by their gist: the first's
        words, how many checks it breaks and whether all said it in the same numbers, so that
        feedback says each once."""
        found: dict[str, tuple[str, int, bool]] = {}
        for o in self.outcomes:
            if o.finding:
                first, count, same = found.get(_gist(o.finding), (o.finding, 0, True))
                found[_gist(o.finding)] = (first, count + 1, same and o.finding == first)
        return {gist: said for gist, said in found.items() if said[1] > 1}

    def render(self) -> str:
        """Feedback in plain words: never inputs, reference outputs or reference code."""
        name, total = self.exercise.name, len(self.outcomes)
        if self.integrity and not self.graded:  # the verdict first: its checks do not count
            head = f"{name}: earns no points, whatever its checks give"
        elif self.graded:
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
            shared = self._shared_findings()
            for o in self.outcomes:
                tag = " (hidden)" if o.check.hidden else ""
                mark = "✓" if o.passed else "✗"
                problem = o.problem
                if _gist(o.finding) in shared:  # said once, below
                    problem = problem.removesuffix(f"; {o.finding}")
                lines.append(
                    f"  {mark} {o.check.description}{tag}" + ("" if o.passed else f": {problem}")
                )
            for finding, count, same in shared.values():
                numbers = "" if same else "; the numbers of the first"
                lines.append(f"  → {finding} (in {count} of {total} checks{numbers})")
        for m in self.diagnoses:
            lines.append(f"  → {m.message}")
        if self.graded and self.capped:
            what, cap = self.exercise.structure.what, self.exercise.structure.cap
            lines.append(
                f"  → Your answer is not built as the exercise asks ({what}); the checks it "
                f"passes presuppose that structure, so it keeps at most {cap:g} of their points."
            )
        return "\n".join(lines)


def _gist(finding: str) -> str:
    """A finding without its numbers: the same property broken by different amounts."""
    return re.sub(r"[-+−]?\d[\d.e+−-]*", "#", finding) if finding else ""


# StudentError.describe's words for an answer that raises NotImplementedError (an unanswered stub)
NOT_IMPLEMENTED = StudentError("NotImplementedError", "").describe("{name}")


def named(key: str) -> str:
    """An output as feedback names it: a name from the exercise's text in code style, or words
    ("running_var after training step 2") as they are."""
    return key if " " in key else f"`{key}`"


def difference(got: Arrays, want: Arrays, check: Rule) -> str:
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
            said = f"{named(key)} differs from the correct values beyond the tolerance"
            return f"{said} ({_numbers(actual, expected, check)})"
    return ""


def _numbers(actual: np.ndarray, expected: np.ndarray, check: Rule) -> str:
    """The error in numbers: on a visible check, the first differing element, yours and the
    expected value; on a hidden one, only the error's size (never an expected value)."""
    a, e = actual.astype(np.float64), expected.astype(np.float64)
    with np.errstate(all="ignore"):
        relative = np.abs(a - e) / np.maximum(np.abs(e), check.atol)
        bad = ~np.isclose(a, e, rtol=check.rtol, atol=check.atol, equal_nan=True)
    if check.hidden:
        sizes = relative[bad][~np.isnan(relative[bad])]  # NaN: a value where NaN is expected
        return f"relative error up to {float(sizes.max()) if sizes.size else np.inf:.0e}"
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (
        f"first at index {list(first)}: yours {a[first]:.6g}, expected {e[first]:.6g}, "
        f"relative error {float(relative[first]):.2g}"
    )


def margin(got: Arrays, want: Arrays, check: Rule) -> float:
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


def _diagnose(check: Rule, got: Arrays, expected: Expected) -> Any:
    """The known mistake whose output the student's output matches, if any."""
    for mistake, wrong in expected.mistakes:
        if not difference(got, wrong, check):
            return mistake
    return None


def _extent(check: Rule, got: Arrays, want: Arrays) -> str:
    """Where and by how much the first wrong output differs; '' when none can be compared."""
    for key, expected in want.items():
        actual = got.get(key)
        if (
            actual is not None
            and actual.shape == expected.shape
            and difference({key: actual}, {key: expected}, check)
        ):
            return extent(key, actual, expected, check.rtol, check.atol)
    return ""


def _judge_refusal(name: str, check: Rule, got: Outputs, expected: Expected) -> CheckOutcome:
    """A check that the answer refuses these inputs by raising `check.refusal`."""
    if isinstance(got, StudentError):
        if got.kind == check.refusal:
            return CheckOutcome(check, True)
        # the check's description names the exception expected; say what happened, in the same
        # words as every other check (a stub's NotImplementedError is then said once)
        return CheckOutcome(check, False, got.describe(name), raised=True)
    for mistake, wrong in expected.mistakes:  # a known way of not refusing, told by its output
        if not difference(got, wrong, check):
            return CheckOutcome(
                check, False, f"returned values instead of raising {check.refusal}", mistake
            )
    finding = f"`{name}` returned values on inputs it must refuse: raise {check.refusal}"
    return CheckOutcome(check, False, finding, finding=finding)


def judge_check(
    name: str,
    properties: tuple[Property, ...],
    check: Rule,
    inputs: Arrays,
    got: Outputs,
    expected: Expected,
) -> CheckOutcome:
    """One check of exercise `name`: the student's outputs `got` for `inputs` against those
    `expected`; `properties` explain a wrong output no known mistake matches."""
    if check.refusal:
        return _judge_refusal(name, check, got, expected)
    if isinstance(got, StudentError):
        return CheckOutcome(check, False, got.describe(name), raised=True)
    want = expected.want
    problem = difference(got, want, check)
    if not problem:
        return CheckOutcome(check, True)
    mistake = _diagnose(check, got, expected)
    if mistake is not None:
        return CheckOutcome(check, False, problem, mistake)
    wrong = {
        k: w for k, w in want.items() if difference({k: got[k]} if k in got else {}, {k: w}, check)
    }
    finding = explain(properties, inputs, got, wrong)
    detail = finding or _extent(check, got, want)
    return CheckOutcome(check, False, problem + (f"; {detail}" if detail else ""), finding=finding)
