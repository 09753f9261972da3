"""The instructor's pipeline end to end on the bundled sample class, recorded in nbgrader."""

from __future__ import annotations

import csv
import json
import secrets
from concurrent.futures import ThreadPoolExecutor

import pytest
from nbgrader.api import Gradebook

from grader.autograde import Course, autograde
from grader.config import assignments
from grader.demo import PROFILES, expected_scores, write_class
from grader.lms import points_header
from grader.nbgrader_steps import TEST_SUFFIX, results_path
from grader.report import leaks_hidden_tests, max_scores, scores, write_csv, write_feedback
from grader.sandbox import Sandbox, available
from grader.submission import Limits, grade_notebooks

LIMITS = Limits(wall_seconds=10)  # the looping student costs this much per notebook


SEED = secrets.randbits(31)  # the expected scores must hold whatever the hidden inputs


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The sample class, graded as an instructor would: in the sandbox where there is one."""
    root = tmp_path_factory.mktemp("class")
    submissions = write_class(root / "submissions")
    course = Course(root / "course")
    sandbox = Sandbox() if available() else None
    outcomes = autograde(submissions, course, 2, SEED, LIMITS, sandbox, progress=False)
    return submissions, course, outcomes


def cell_scores(course: Course, student: str, assignment: str) -> dict[str, float]:
    with Gradebook(course.api().coursedir.db_url) as gradebook:
        notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        return {
            g.name.removesuffix(TEST_SUFFIX): g.score
            for g in notebook.grades
            if g.name.endswith(TEST_SUFFIX)
        }


def feedback_text(course: Course, student: str, assignment: str) -> str:
    path = results_path(course.results, student, assignment)
    return "\n".join(e["feedback"] for e in json.loads(path.read_text())["exercises"])


@pytest.mark.parametrize(("student", "assignment"), sorted(expected_scores()))
def test_each_sample_student_gets_exactly_its_expected_per_cell_score(graded, student, assignment):
    _, course, _ = graded
    expected = expected_scores()[(student, assignment)]
    assert cell_scores(course, student, assignment) == expected, PROFILES[student].description


def test_no_submission_failed_to_record(graded):
    _, _, outcomes = graded
    assert [o for o in outcomes if o.problem] == []
    assert len(outcomes) == len(PROFILES) * len(assignments())


@pytest.mark.parametrize(
    ("student", "reason"),
    [
        ("cyd", "is missing"),
        ("dee", "not a readable notebook"),
        ("eli", "does not define `layer_norm`"),
        ("fay", "crashed"),
        ("gus", "timeout"),
        ("max", "earns no points"),
    ],
)
def test_a_broken_submission_says_why_in_its_feedback(graded, student, reason):
    _, course, _ = graded
    assert reason in feedback_text(course, student, assignments()[0])


def test_rerunning_changes_nothing(graded):
    submissions, course, _ = graded
    before = scores(course, sorted(PROFILES))
    again = autograde(submissions, course, jobs=2, limits=LIMITS, progress=False)
    assert all(o.skipped for o in again)
    assert scores(course, sorted(PROFILES)) == before


def test_an_interrupted_batch_resumes_where_it_stopped(graded):
    """As if the run had died before recording two students: only they are graded again."""
    submissions, course, _ = graded
    before = scores(course, sorted(PROFILES))
    for student in ("ada", "ivy"):
        for assignment in assignments():
            (course.results / student / f"{assignment}.graded").unlink()
    resumed = autograde(submissions, course, jobs=2, limits=LIMITS, progress=False)
    regraded = sorted({o.task.student for o in resumed if not o.skipped})
    assert regraded == ["ada", "ivy"]
    assert scores(course, sorted(PROFILES)) == before


def test_the_csv_has_one_row_per_student_with_per_notebook_and_total(graded, tmp_path):
    _, course, _ = graded
    rows = list(csv.DictReader(write_csv(course, tmp_path / "g.csv").open()))
    assert [r["student_id"] for r in rows] == sorted(PROFILES)
    maxima = max_scores(course)
    for row in rows:
        parts = sum(float(row[points_header(a, maxima[a])]) for a in assignments())
        assert float(row[points_header("total", sum(maxima.values()))]) == pytest.approx(parts)
    ada = next(r for r in rows if r["student_id"] == "ada")
    assert float(ada[points_header("total", sum(maxima.values()))]) == sum(
        sum(expected_scores()[("ada", a)].values()) for a in assignments()
    )


# Feedback takes nbgrader ~1 s per page: a correct, an untouched, an unreadable, a stripped and
# a mistaken submission stand for the class (tests/test_feedback.py covers every mistake).
FEEDBACK_STUDENTS = ["ada", "ben", "dee", "hal", "ivy"]


def test_feedback_names_the_mistake_and_never_shows_hidden_tests(graded):
    _, course, _ = graded
    folder, problems = write_feedback(course, FEEDBACK_STUDENTS)
    assert problems == []
    pages = {p: p.read_text() for p in folder.rglob("*.html")}
    assert len(pages) == len(FEEDBACK_STUDENTS) * len(assignments())
    assert not [p for p, html in pages.items() if leaks_hidden_tests(html)]
    ivy = next(html for p, html in pages.items() if "ivy" in p.parts and "01_layer_norm" in p.name)
    assert "unbiased estimator" in ivy


@pytest.mark.skipif(not available(), reason="bubblewrap is not installed")
def test_the_sandbox_changes_no_score(graded):
    """The whole sample class graded again without the sandbox, with the same hidden inputs."""
    submissions, course, _ = graded

    def regrade(student: str) -> tuple[str, list]:
        paths = [(submissions / student / a / f"{a}.ipynb", a) for a in assignments()]
        return student, grade_notebooks(paths, SEED, LIMITS)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for student, unsandboxed in pool.map(regrade, sorted(PROFILES)):
            for assignment, results in zip(assignments(), unsandboxed, strict=True):
                path = results_path(course.results, student, assignment)
                recorded = [e["score"] for e in json.loads(path.read_text())["exercises"]]
                assert [r.score for r in results] == recorded, f"{student}/{assignment}"
