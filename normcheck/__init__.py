"""A student's own checks of the course's exercises, with no answer in them.

In a notebook's test cell::

    check("layer_norm", layer_norm)   # the visible checks: passes quietly, or says what is wrong

`check` calls the answer on each visible check's fixed inputs and judges its outputs against
those stored for them at release time (`normcheck.expected`: the reference's outputs, and the
known mistakes' to name one) with the grader's own judge. This package holds no reference, no
known mistake's code and no hidden check: grading (`grade`, the hidden tests) needs the course's
grader, which students do not install.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import sys
from importlib.metadata import entry_points
from typing import Any

import torch

from normcheck.integrity import forbidden_uses, integrity_message
from normcheck.judge import Verdict, judge_check
from normcheck.shared import Arrays, Outputs, call

__all__ = ["CheckFailed", "check", "grade"]


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


def run_answer(exercise: Any, answer: Any, inputs: list[Arrays], source: str):
    """The answer's outputs for each inputs, and why it earns nothing ('' if it is its own
    work). torch's global random state is left as it was: a check cell (which may build models)
    never changes the random numbers the rest of the notebook draws."""
    outputs: list[Outputs] = []
    runtime: set[str] = set()
    with torch.random.fork_rng():  # the probes may build models
        for case in inputs:
            got, seen = call(exercise, answer, case)
            outputs.append(got)
            runtime |= seen
    return outputs, integrity_message(exercise, forbidden_uses(source, exercise), runtime)


@functools.cache
def _stored() -> dict:
    from normcheck.expected import stored  # reads the data files: only when a check runs

    return stored()


def _nbgrader_running(step: str) -> bool:
    """Whether nbgrader runs this notebook to `step` it ("autograde", "validate")."""
    return os.environ.get("NBGRADER_EXECUTION") == step


def visible(name: str, answer: Any, source: str) -> Verdict:
    """The visible checks of exercise `name`, judged against their stored outputs."""
    if name not in _stored():
        raise KeyError(f"no exercise is named {name!r} (this course's: {', '.join(_stored())})")
    exercise = _stored()[name]
    outputs, integrity = run_answer(exercise, answer, [c.inputs for c in exercise.cases], source)
    outcomes = [
        judge_check(name, exercise.properties, c.rule, c.inputs, got, c.expected)
        for c, got in zip(exercise.cases, outputs, strict=True)
    ]
    return Verdict(exercise, outcomes, integrity, graded=False)


def check(name: str, answer: Any) -> None:
    """The visible checks of exercise `name`. Prints the verdict when the answer passes or is
    not answered yet; when it is wrong, shows the verdict in plain words on stderr and returns,
    so that Run All in JupyterLab goes on to the demos (which fall back on the library's version,
    `norm_utils.answers.yours_or`). Under `nbgrader validate` a wrong answer raises CheckFailed,
    and so does an exercise not answered yet: Validate reports the failing cell. When nbgrader
    autogrades, the hidden part decides the score, so the verdict is only printed."""
    verdict = visible(name, answer, source_of(answer))
    if _nbgrader_running("validate") and not verdict.passed:
        raise CheckFailed(verdict.render())
    if verdict.passed or verdict.not_implemented or _nbgrader_running("autograde"):
        print(verdict.render())
    else:  # shown as a failure (stderr), without stopping the notebook
        print(verdict.render(), file=sys.stderr)


def grade(name: str, answer: Any) -> float:
    """Every check of exercise `name`, hidden ones included: the notebook's hidden tests, which
    only the course's grader can run (students never see them). The grader is found by the entry
    point it declares (`normcheck.grade`): this package imports nothing of it."""
    graders = entry_points(group="normcheck.grade")
    if not graders:
        raise RuntimeError(
            "grading needs the course's grader, which is the instructor's: "
            "`check(name, answer)` runs the visible checks"
        )
    return next(iter(graders)).load()(name, answer)
