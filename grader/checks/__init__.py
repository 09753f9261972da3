"""The course's exercise checks: one place for the visible tests, hidden tests, `grader check`.

In a notebook's test cell::

    check("layer_norm", layer_norm)        # visible checks: passes quietly, or says what is wrong
    ### BEGIN HIDDEN TESTS
    grade("layer_norm", layer_norm)        # every check; the cell's value is the partial score
    ### END HIDDEN TESTS
"""

from __future__ import annotations

import importlib
import inspect
import linecache
import os
import pkgutil
from typing import Any

import torch

from grader.checks.core import Exercise, Verdict, judge, plan
from grader.checks.integrity import forbidden_uses, integrity_message
from grader.config import kernel_seed
from grader.sandboxed.probe import call


# The check modules, found rather than listed: every module of this package that exports
# EXERCISES (one or more per notebook); an exercise's name is unique course-wide. A new notebook's
# checks need only a new module. `mutation` is left out: it grades through this package's `run`.
def _discover() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
        if module == "mutation" or module.startswith("_"):
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


class CheckFailed(AssertionError):
    """A failed exercise, shown to the student as plain words instead of a traceback."""

    def _render_traceback_(self) -> list[str]:  # IPython's hook for custom error display
        return str(self).splitlines()


def source_of(answer: Any) -> str:
    """The answer's source, for the static scan; '' when it cannot be found."""
    try:
        return inspect.getsource(answer)
    except (OSError, TypeError):
        pass
    if not inspect.isclass(answer):
        return ""
    # Python 3.11 cannot find a class defined in a notebook, but its methods know the cell they
    # came from, and IPython keeps every cell's text in linecache: scan those cells whole.
    methods = (f for f in vars(answer).values() if inspect.isfunction(f))
    cells = sorted({f.__code__.co_filename for f in methods})
    return "".join(line for cell in cells for line in linecache.getlines(cell))


def run(exercise: Exercise, answer: Any, *, hidden: bool, seed: int, source: str) -> Verdict:
    """Every selected check, run in this process (the student's own kernel or `grader check`).
    torch's global random state is left as it was: a check cell (which may build models) never
    changes the random numbers the rest of the notebook draws."""
    planned = plan(exercise, hidden, seed)
    outputs, runtime = [], set()
    with torch.random.fork_rng():  # the probes and the judge may build models
        for _, inputs in planned:
            got, seen = call(exercise, answer, inputs)
            outputs.append(got)
            runtime |= seen
        integrity = integrity_message(exercise, forbidden_uses(source, exercise), runtime)
        return judge(exercise, planned, outputs, integrity)


def _autograding() -> bool:
    return os.environ.get("NBGRADER_EXECUTION") == "autograde"


def check(name: str, answer: Any) -> None:
    """The visible checks of exercise `name`; raises CheckFailed with plain words when wrong."""
    verdict = run(EXERCISES[name], answer, hidden=False, seed=0, source=source_of(answer))
    if verdict.passed or _autograding():  # when grading, the hidden part decides the score
        print(verdict.render())
    else:
        raise CheckFailed(verdict.render())


def grade(name: str, answer: Any) -> float:
    """Every check of exercise `name`; prints the feedback and returns the points earned."""
    verdict = run(
        EXERCISES[name], answer, hidden=True, seed=kernel_seed(), source=source_of(answer)
    )
    print(verdict.render())
    return verdict.score
