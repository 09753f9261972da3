"""Every known mistake, recorded through nbgrader: its partial score lands in the gradebook and
its diagnosis in the student's HTML feedback, with no hidden test code shown."""

from __future__ import annotations

import html

import pytest

from grader.autograde import Task, record, register_all
from grader.checks import EXERCISES, run
from grader.course import Course, ExerciseResult, Results
from grader.course.config import assignments
from grader.course.intake import Submission, exercises_of, source_notebook
from grader.gradebook.config import recording_api
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
