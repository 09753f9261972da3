"""The instructor's pipeline end to end on the bundled sample class, recorded in nbgrader."""

from __future__ import annotations

import csv
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser

import nbformat
import pytest

from grader.autograde import autograde
from grader.checks import EXERCISES
from grader.course import Course, Results, grade_id, notebook_path
from grader.course.config import SOLUTIONS, assignments, fresh_seed
from grader.course.intake import (
    Submission,
    answer_source,
    exercises_of,
    make_inert,
    source_notebook,
)
from grader.gradebook.lms import points_header
from grader.gradebook.records import cell_scores
from grader.grading.grade import Limits, grade_in_one_runner
from grader.grading.sandbox import Sandbox, available
from grader.publish.feedback import (
    leaks_hidden_tests,
    max_scores,
    scores,
    write_csv,
    write_feedback,
)
from grader.release.demo import PROFILES, expected_scores, write_class

LIMITS = Limits(wall_seconds=10)  # the looping student costs this much per notebook


SEED = fresh_seed()  # the expected scores must hold whatever the hidden inputs


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The sample class, graded as an instructor would: in the sandbox where there is one."""
    root = tmp_path_factory.mktemp("class")
    submissions = write_class(root / "submissions")
    course = Course(root / "course")
    sandbox = Sandbox() if available() else None
    outcomes = autograde(submissions, course, 2, SEED, LIMITS, sandbox, progress=False)
    return submissions, course, outcomes


def feedback_text(course: Course, student: str, assignment: str) -> str:
    results = Results.load(course.results_file(student, assignment))
    return "\n".join(e.feedback for e in results.exercises)


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
            course.stamp(student, assignment).unlink()
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
        read = [Submission.read(notebook_path(submissions / student, a), a) for a in assignments()]
        return student, grade_in_one_runner(read, SEED, LIMITS)

    with ThreadPoolExecutor(max_workers=2) as pool:
        for student, unsandboxed in pool.map(regrade, sorted(PROFILES)):
            for assignment, results in zip(assignments(), unsandboxed, strict=True):
                recorded = Results.load(course.results_file(student, assignment))
                assert [r.score for r in results] == [e.score for e in recorded.exercises], (
                    f"{student}/{assignment}"
                )


def test_with_its_tags_stripped_the_cell_graded_is_the_cell_recorded(tmp_path):
    """An editor stripped every nbgrader tag, and a wrong copy of an answer sits above the right
    one: the right one (the last, as in Jupyter) is graded, and is the cell nbgrader records
    as the answer (formgrader shows it next to the grade)."""
    assignment = assignments()[0]
    name = exercises_of(source_notebook(assignment))[0]
    right = answer_source(source_notebook(assignment), name)
    notebook = PROFILES["hal"].build(assignment)  # the solution, every tag stripped
    below = next(i for i, c in enumerate(notebook.cells) if c.source == right)
    wrong = f"def {name}(*args, **kwargs):\n    return None\n"
    notebook.cells.insert(below, nbformat.v4.new_code_cell(wrong))
    path = notebook_path(tmp_path / "student", assignment)
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)

    submission = Submission.read(path, assignment)
    tagged = [c.source for c in submission.recorded.cells if grade_id(c) == name]
    assert tagged == [right]
    graded = {r.name: r.score for r in grade_in_one_runner([submission], 0, LIMITS)[0]}
    assert graded[name] == EXERCISES[name].points


def test_a_notebook_whose_text_cannot_be_staged_is_the_students_problem(tmp_path):
    """A lone surrogate ("\\ud800" in the JSON) parses, but is no UTF-8: nbgrader could not stage
    it. It is refused when read, as the student's, naming the notebook."""
    assignment = assignments()[0]
    text = notebook_path(SOLUTIONS, assignment).read_text(encoding="utf-8")
    path = notebook_path(tmp_path / "student", assignment)
    path.parent.mkdir(parents=True)
    path.write_text(text.replace('"source": [', '"source": ["# \\ud800\\n", ', 1), "utf-8")
    problem = Submission.read(path, assignment).problem
    assert problem == f"{path.name} is not a readable notebook (UnicodeEncodeError)"


LIVE = (
    "<script>alert(1)</script> <img src=x onerror=alert(2)> <a href='javascript:alert(3)'>a</a>"
    " <iframe src=//x></iframe> <svg onload=alert(4)></svg> <b onclick=alert(5)>bold</b>"
)
LIVE_TAGS = {"script", "iframe", "svg", "object", "embed", "style"}


class _Live(HTMLParser):
    """Tags a browser would run or load, and attributes it would execute, in a page."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.found += [tag] if tag in LIVE_TAGS else []
        self.found += [f"{tag} {k}" for k, v in attrs if k.startswith("on")]
        self.found += [f"{tag} {k}" for k, v in attrs if "javascript:" in (v or "")]


def _hostile_notebook() -> nbformat.NotebookNode:
    notebook = nbformat.read(notebook_path(SOLUTIONS, assignments()[0]), 4)
    code = nbformat.v4.new_code_cell("1")
    code.outputs = [
        nbformat.v4.new_output(
            "display_data",
            {"text/html": LIVE, "image/svg+xml": "<svg onload=alert(6)/>", "text/plain": "1"},
        )
    ]
    markdown = nbformat.v4.new_markdown_cell(f"**mine** {LIVE} `a < b` $x<y$")
    markdown.attachments = {"a.svg": {"image/svg+xml": "<svg onload=alert(7)/>"}}
    notebook.cells += [markdown, nbformat.v4.new_raw_cell(LIVE), code]
    return notebook


def test_nothing_a_student_wrote_is_live_in_a_page_that_renders_the_staged_notebook():
    from nbconvert import HTMLExporter

    page, _ = HTMLExporter().from_notebook_node(make_inert(_hostile_notebook()))
    hostile_cells = page[page.index("mine") :]
    live = _Live()
    live.feed(hostile_cells)
    assert live.found == []
    assert "<b>bold</b>" in hostile_cells and "a &lt; b" in hostile_cells  # formatting, code


def test_the_courses_own_notebooks_are_unchanged_by_making_them_inert():
    for assignment in assignments():
        notebook = nbformat.read(notebook_path(SOLUTIONS, assignment), 4)
        assert make_inert(notebook) == notebook
