"""Every known mistake, recorded through nbgrader: its partial score lands in the gradebook and
its diagnosis in the student's HTML feedback, with no hidden test code shown."""

from __future__ import annotations

import html
import os
import re
import threading
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import is_grade

from grader.autograde import Task, record, register_all
from grader.checks import EXERCISES, run
from grader.course import (
    Course,
    ExerciseResult,
    Results,
    grade_id,
    nbgrader_metadata,
    notebook_path,
)
from grader.course.config import assignments
from grader.course.intake import Submission, exercises_of, source_notebook
from grader.gradebook.config import gradebook_url, recording_api
from grader.gradebook.records import cell_scores
from grader.publish.feedback import leaks_hidden_tests, write_feedback

MISTAKES = [
    (a, e, k, m)
    for a in assignments()
    for e in exercises_of(source_notebook(a))
    for k, m in enumerate(EXERCISES[e].mistakes)
]


def student_id(k: int) -> str:
    """Student k makes the k-th known mistake of every exercise that has one and gets the other
    exercises right: few notebooks to record, every mistake covered."""
    return f"mistake-{k:02d}"


def results_of(names: list[str], k: int, verdicts: dict) -> Results:
    exercises = []
    for name in names:
        full = EXERCISES[name].points
        verdict = verdicts.get((name, k))
        score, feedback = (verdict.score, verdict.render()) if verdict else (full, "")
        exercises.append(ExerciseResult(name, score, full, feedback))
    return Results(exercises)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("feedback") / "course")
    register_all(course)
    api = recording_api(course)
    verdicts = {
        (e, k): run(EXERCISES[e], m.impl, hidden=True, seed=3, source="") for _, e, k, m in MISTAKES
    }
    for assignment in assignments():
        names = exercises_of(source_notebook(assignment))
        for k in range(max(len(EXERCISES[n].mistakes) for n in names)):
            task = Task(student_id(k), assignment, course.source_notebook(assignment))
            results_of(names, k, verdicts).save(course.results_file(task.student, assignment))
            outcome = record(task, course, api, Submission.read(task.submission, assignment))
            assert not outcome.problem, outcome.problem
    folder, problems = write_feedback(course, sorted({student_id(k) for *_, k, _ in MISTAKES}))
    assert problems == []
    return course, verdicts, folder


@pytest.mark.parametrize(
    ("assignment", "exercise", "k", "mistake"), MISTAKES, ids=lambda v: getattr(v, "name", str(v))
)
def test_the_partial_score_and_the_diagnosis_reach_the_student(
    recorded, assignment, exercise, k, mistake
):
    course, verdicts, folder = recorded
    student, verdict = student_id(k), verdicts[(exercise, k)]
    score = cell_scores(course, student, assignment)[exercise]
    assert score == verdict.score < EXERCISES[exercise].points
    page = html.unescape((folder / student / assignment / f"{assignment}.html").read_text())
    assert mistake.message in page
    assert not leaks_hidden_tests(page)


FIRST = assignments()[0]
WRITTEN = next(c for c in source_notebook(FIRST).cells if c.cell_type == "markdown" and is_grade(c))
POINTS = float(nbgrader_metadata(WRITTEN)["points"])


def text_of(page: Path) -> str:
    """The page's text, tags dropped, as a reader sees it (roughly: spaces as they are)."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))


def feedback_page(course: Course, student: str) -> str:
    assert write_feedback(course, [student])[1] == []
    return text_of(course.feedback_folder(student, FIRST) / f"{FIRST}.html")


def test_a_written_answer_no_one_graded_yet_says_so(recorded):
    """The answered written question (the solution's): nbgrader's own page would say 0."""
    *_, folder = recorded
    page = text_of(folder / student_id(0) / FIRST / f"{FIRST}.html")
    assert f"Written response (not graded yet, {POINTS} points)" in page
    assert "Written response (Score:" not in page


def grade_by_hand(course: Course, student: str, score: float) -> None:
    """As formgrader saves a TA's score (its GradeHandler): the score, and no more flag."""
    with Gradebook(gradebook_url(course)) as gradebook:
        grade = gradebook.find_grade(grade_id(WRITTEN), FIRST, FIRST, student)
        grade.manual_score, grade.needs_manual_grade = score, False
        gradebook.db.commit()


def test_a_tas_grade_stands_through_a_regrade_and_is_stale_after_a_resubmission(recorded, tmp_path):
    course, verdicts, _ = recorded
    student, api = "resubmits", recording_api(course)
    names = exercises_of(source_notebook(FIRST))
    results_of(names, -1, verdicts).save(course.results_file(student, FIRST))

    def hand_in(path):
        task = Task(student, FIRST, path)
        assert not record(task, course, api, Submission.read(path, FIRST)).problem

    hand_in(course.source_notebook(FIRST))
    grade_by_hand(course, student, POINTS - 0.5)
    graded = f"Written response (Score: {POINTS - 0.5} / {POINTS})"
    hand_in(course.source_notebook(FIRST))  # a regrade of the same notebook
    assert graded in feedback_page(course, student)

    resubmitted = nbformat.read(course.source_notebook(FIRST), as_version=4)
    answer = next(c for c in resubmitted.cells if grade_id(c) == grade_id(WRITTEN))
    answer.source += "\n\nAnd padding is left out of the statistics."
    path = notebook_path(tmp_path / student, FIRST)
    path.parent.mkdir(parents=True)
    nbformat.write(resubmitted, path)
    hand_in(path)
    page = feedback_page(course, student)
    assert f"Written response (Score: {POINTS - 0.5} / {POINTS}, graded before your " in page
    assert graded not in page


_FORK_HANGS = threading.Event()
os.register_at_fork(after_in_child=lambda: _FORK_HANGS.is_set() and time.sleep(3600))


def test_pages_are_rendered_by_fresh_processes_not_forks_of_the_grader(recorded):
    """A process forked from one with threads inherits their locks and runs libraries' after-fork
    hooks (kombu's waited forever on a Redis socket): here a hook that never returns in a forked
    child, which the page-rendering processes must not run."""
    course, *_ = recorded
    student = student_id(0)
    for page in course.feedback_folder(student, FIRST).parent.glob("*/.*.sha256"):
        page.unlink()  # every page made again
    done: list = []
    _FORK_HANGS.set()
    try:
        rendering = threading.Thread(
            target=lambda: done.append(write_feedback(course, [student])), daemon=True
        )
        rendering.start()
        rendering.join(timeout=300)
    finally:
        _FORK_HANGS.clear()
    assert done and done[0][1] == []
