"""The course's exercise checks: one place for the visible tests, hidden tests, `grader check`.

In a notebook's test cell::

    check("layer_norm", layer_norm)        # visible checks: passes quietly, or says what is wrong
    ### BEGIN HIDDEN TESTS
    grade("layer_norm", layer_norm)        # every check; the cell's value is the partial score
    ### END HIDDEN TESTS

`check` is the student's (`normcheck`: the visible checks judged against the outputs stored at
release time); `grade_in_kernel` (what `normcheck.grade` calls) runs every check here, against
the references and the known mistakes.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import threading
from typing import Any

from grader.checks.core import Exercise, Prepared, Verdict, judge, prepare
from grader.course.config import kernel_seed
from normcheck import run_answer, source_of

__all__ = ["EXERCISES", "grade_in_kernel", "prepared", "rubric", "run"]


# The check modules, found rather than listed: every module of this package that exports
# EXERCISES (one or more per notebook); an exercise's name is unique course-wide. A new notebook's
# checks need only a new module.
def _discover() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if module.startswith("_"):
            continue
        for exercise in getattr(importlib.import_module(f"{__name__}.{module}"), "EXERCISES", ()):
            if exercise.name in found:
                raise ValueError(f"two exercises are named {exercise.name!r}")
            found[exercise.name] = exercise
    return found


EXERCISES: dict[str, Exercise] = _discover()


def rubric() -> str:
    """docs/rubric.md: every exercise's checks and their points, from the checks themselves
    (tests/test_checks.py fails when the file is not this text)."""
    lines = [
        "# Rubric",
        "",
        "Generated from `grader.checks.EXERCISES` by `grader.checks.rubric()`; a test fails when",
        "this file drifts from the checks. Each check module's docstring says why the points fall",
        "as they do (what is central to the notebook weighs most). A visible check runs in the",
        "student's own `check()` on fixed inputs; a hidden one only when graded, on inputs drawn",
        "afresh for each grading run.",
        "",
        "What an ε slip costs (ε left out, outside the root, fixed at another value, dropped",
        "in one place of a backward): only the checks where ε matters. The backward exercises",
        "judge every other check on inputs of spread ≥ 5e6, where ε moves the gradient by less",
        "than their tolerance; an ε slip costs the 0.5 of the check whose variance is close to ε",
        "(its visible twin 0.25 of it). `layer_norm`: 2 (variance close to ε 1.5, constant rows",
        "0.5, whose output ε keeps finite); `group_norm`: 1; `rms_norm`: 0.5 to 2 (its module's",
        "rubric). The `eps` given ignored (1e-5 whatever the caller passes) costs the checks that",
        "give another: `layer_norm` 1.5, `group_norm` 1, `rms_norm` 2, `batch_norm` and",
        "`masked_batch_norm` 0.5, `fold_batch_norm` 1.5, a backward 0.5.",
    ]
    for e in EXERCISES.values():
        lines += ["", f"## `{e.name}` ({e.points:g} points)", "", "| points | check | run |"]
        lines.append("|---|---|---|")
        lines += [
            f"| {c.points:g} | {c.description} | {'hidden' if c.hidden else 'visible'} |"
            for c in e.checks
        ]
        if e.structure is not None:
            what, cap = e.structure.what, e.structure.cap
            lines += ["", f"Structure: {what}. An answer built otherwise keeps at most {cap:g}."]
    return "\n".join(lines) + "\n"


_PREPARED_LOCK = threading.Lock()


@functools.lru_cache(maxsize=4 * len(EXERCISES))  # two runs' worth, visible and hidden
def _prepare(name: str, hidden: bool, seed: int) -> Prepared:
    return prepare(EXERCISES[name], hidden, seed)


def prepared(name: str, hidden: bool, seed: int) -> Prepared:
    """Exercise `name`'s checks, inputs and expected outputs for the run with `seed`: computed
    once, then shared by every student that run grades (its threads included)."""
    with _PREPARED_LOCK:
        return _prepare(name, hidden, seed)


def run(exercise: Exercise, answer: Any, *, hidden: bool, seed: int, source: str) -> Verdict:
    """Every selected check, run in this process (the student's own kernel or a test)."""
    ready = prepare(exercise, hidden, seed)
    inputs = [case for _, case in ready.planned]
    outputs, integrity = run_answer(exercise, answer, inputs, source)
    return judge(exercise, ready.planned, outputs, integrity, ready.expected)


def grade_in_kernel(name: str, answer: Any) -> float:
    """Every check of exercise `name`; prints the feedback and returns the points earned."""
    verdict = run(
        EXERCISES[name], answer, hidden=True, seed=kernel_seed(), source=source_of(answer)
    )
    print(verdict.render())
    return verdict.score
