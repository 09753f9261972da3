"""What the checks' inputs should give is computed once per grading run and shared by every
student of it; the hidden inputs are still drawn afresh for each run."""

from __future__ import annotations

import numpy as np
import pytest

import grader.checks
from grader.checks import EXERCISES, core, prepared
from grader.course import notebook_path
from grader.course.config import SOLUTIONS, assignments
from grader.course.intake import Submission, exercises_of, source_notebook
from grader.grading.grade import grade_in_one_runner

ASSIGNMENT = assignments()[0]
RUN, NEXT_RUN = 1234, 1235


@pytest.fixture
def counted(monkeypatch) -> list[str]:
    """The exercises whose expected outputs are computed, once per check each time."""
    grader.checks._prepare.cache_clear()
    computed: list[str] = []
    expect = core.expect

    def counting(exercise, check, inputs):
        computed.append(exercise.name)
        return expect(exercise, check, inputs)

    monkeypatch.setattr(core, "expect", counting)
    yield computed
    grader.checks._prepare.cache_clear()


@pytest.mark.slow  # grades the first assignment's solutions three times in the runner
def test_a_run_computes_the_expected_outputs_once_for_every_student(counted):
    submission = Submission.read(notebook_path(SOLUTIONS, ASSIGNMENT), ASSIGNMENT, SOLUTIONS)
    students = [grade_in_one_runner([submission], RUN)[0] for _ in range(3)]  # as autograde does
    names = exercises_of(source_notebook(ASSIGNMENT))
    assert sorted(counted) == sorted(n for n in names for _ in EXERCISES[n].checks)
    scores = [[r.score for r in student] for student in students]
    assert scores == [[EXERCISES[n].points for n in names]] * 3


def test_each_run_draws_its_own_hidden_inputs(counted):
    name = exercises_of(source_notebook(ASSIGNMENT))[0]
    this, same, other = (prepared(name, True, seed) for seed in (RUN, RUN, NEXT_RUN))
    assert same is this
    hidden = [i for i, (c, _) in enumerate(this.planned) if c.hidden]
    assert hidden
    for i in hidden:
        drawn, redrawn = this.planned[i][1], other.planned[i][1]
        assert any(not np.array_equal(drawn[k], redrawn[k]) for k in drawn)
