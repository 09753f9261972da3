"""The course in a real JupyterLab, driven by headless Chromium (Playwright for Python).

Student: in a copy of `notebooks/`, Run All runs every notebook, unanswered, to its end with no
cell raising: each check says its exercise is "not implemented yet", each experiment after an
exercise says once that it uses the library's version instead; the first notebook also shows its
formulas typeset by MathJax and its figures, and one exercise is answered in the editor, its
visible checks pass, and nbgrader's Validate button still fails the exercises left unanswered.

Instructor: a course folder made by `grader init`, where a small sample class was autograded,
seen in formgrader inside JupyterLab started there: the assignments, their notebooks, the
students, one student's scored notebook with its diagnosis, her feedback page read with the
network off (the diagnosis wrapped in its box, the math typeset), and the Autograde button
grading a notebook replaced since it was graded. (The whole cycle, with manual grading and feedback:
tests/test_assignment_cycle.py.)

A screenshot of every step goes to build/browser-screenshots/test_browser/ (the path is printed).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from browser_harness import (
    BROWSER_TESTS,
    NOTEBOOK,
    Lab,
    assert_math_typeset,
    cell_index,
    cell_states,
    cells,
    edit_cell,
    end_sessions,
    formgrader_row,
    open_formgrader,
    open_notebook,
    open_submission,
    press_in_row,
    prompt,
    run_all,
    running_lab,
    score,
    screenshot,
    set_exchange,
    submission_row,
    table_column,
    typed,
    unrun_code_cells,
    wait_until_ran,
)

from grader.autograde import autograde
from grader.checks import EXERCISES
from grader.cli import main
from grader.course import Course, grade_id_of_tests, notebook_path
from grader.course.config import RELEASE, REPO, SOLUTIONS, assignments
from grader.course.intake import answer_source, exercises_of, source_notebook
from grader.gradebook.records import cell_scores
from grader.grading.sandbox import available
from grader.publish.feedback import write_feedback
from grader.release.demo import PROFILES, write_class

pytestmark = BROWSER_TESTS
ASSIGNMENTS = assignments()
FULL_RUN = ASSIGNMENTS[0]  # the notebook run to its end; the others run to their first exercise
ANSWERED = exercises_of(source_notebook(FULL_RUN))[0]  # the one a student answers first
# Two students keep autograding near 25 s: one correct, one with a named mistake in FULL_RUN.
STUDENTS = {"ada": PROFILES["ada"], "ivy": PROFILES["ivy"]}
DIAGNOSED = ("ivy", "unbiased")  # the student opened in formgrader, and a word of its diagnosis
NOT_IMPLEMENTED = "`{}` is not implemented yet (it raises NotImplementedError)."


# --- JupyterLab, as a student uses it ----------------------------------------------------------


def first_formula_cell(notebook: nbformat.NotebookNode) -> int:
    return next(
        i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown" and "$" in c.source
    )


def solution_images(assignment: str) -> int:
    """The figures the notebook draws: nbval keeps the solutions' stored outputs current."""
    notebook = source_notebook(assignment)
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


def assert_ran_to_its_end_unanswered(
    page, release: nbformat.NotebookNode, states: list[dict], assignment: str
) -> None:
    """Run All of `assignment` unanswered went to its end: no cell raised, each check says its
    exercise is not implemented yet, each experiment after an exercise says once that it uses
    the library's version instead, and one that prints whose result it compared names the
    library, never "your" answer (what it falls back on earns nothing as an answer:
    tests/test_run_all_unanswered.py)."""
    assert {i: c["red"] for i, c in enumerate(states) if c["red"]} == {}, "no cell may raise"
    assert unrun_code_cells(page) == []
    for exercise in exercises_of(source_notebook(assignment)):
        stub = cell_index(release, grade_id_of_tests(exercise))
        assert NOT_IMPLEMENTED.format(exercise) in states[stub]["output"], exercise
    fallbacks = [
        (c.source, states[i]["output"])
        for i, c in enumerate(release.cells)
        if c.cell_type == "code"
    ]
    fallbacks = [(source, out) for source, out in fallbacks if "yours_or(" in source]
    assert fallbacks
    for source, output in fallbacks:
        assert output.count("is not implemented yet: this cell uses") == 1, output
        if ".used" in source:
            assert "(in place of yours)" in output and "your `" not in output, output


@pytest.fixture(scope="module")
def student_lab(tmp_path_factory) -> Iterator[Lab]:
    base = tmp_path_factory.mktemp("student")
    root = base / "home"
    root.mkdir()
    with running_lab(root, base / "server") as lab:
        yield lab


@pytest.fixture
def release_copy(student_lab: Lab, request) -> Iterator[str]:
    """A fresh copy of notebooks/ for this test alone, as the folder's path in the server."""
    folder = re.sub(r"\W+", "_", request.node.name)
    shutil.copytree(REPO / "notebooks", student_lab.root / folder)
    yield folder
    end_sessions(student_lab)


def lab_path(folder: str, assignment: str) -> str:
    """The notebook of `assignment` in a release copied to `folder`, as the server names it."""
    return str(notebook_path(Path(folder), assignment))


def test_run_all_runs_an_unanswered_notebook_to_its_end_and_renders_it(
    page, student_lab, release_copy, screenshots
):
    path = lab_path(release_copy, FULL_RUN)
    release = nbformat.read(student_lab.root / path, as_version=4)
    first_stub = cell_index(release, grade_id_of_tests(ANSWERED))
    open_notebook(page, student_lab, path)
    run_all(page)

    states = cell_states(page)
    screenshot(page, screenshots, "student-1-run-all-stub-message", cells(page).nth(first_stub))
    assert len(states) == len(release.cells)
    assert_ran_to_its_end_unanswered(page, release, states, FULL_RUN)

    formula = first_formula_cell(release)
    screenshot(page, screenshots, "student-2-formula", cells(page).nth(formula))
    assert_math_typeset(page, formula)

    figure = next(i for i, c in enumerate(states) if c["images"])
    screenshot(page, screenshots, "student-3-figure", cells(page).nth(figure))
    assert sum(c["images"] for c in states) == solution_images(FULL_RUN)


def test_answering_an_exercise_passes_its_checks_and_validate_says_what_is_left(
    page, student_lab, release_copy, screenshots
):
    path = lab_path(release_copy, FULL_RUN)
    release = nbformat.read(student_lab.root / path, as_version=4)
    answer_cell = cell_index(release, ANSWERED)
    checks_cell = cell_index(release, grade_id_of_tests(ANSWERED))
    open_notebook(page, student_lab, path)
    run_all(page)

    edit_cell(page, answer_cell, typed(answer_source(source_notebook(FULL_RUN), ANSWERED)))
    before = prompt(page, checks_cell)
    page.keyboard.press("Shift+Enter")  # the answer, then its checks
    page.keyboard.press("Shift+Enter")
    wait_until_ran(page, checks_cell, before)
    output = cells(page).nth(checks_cell).locator(".jp-OutputArea")
    screenshot(page, screenshots, "student-4-answer-passes-visible-checks", output)
    passed = re.search(rf"{ANSWERED}: (\d+) of (\d+) visible checks pass", output.inner_text())
    assert passed and passed[1] == passed[2], output.inner_text()
    assert "(more checks run when graded)" in output.inner_text()

    page.locator(f"{NOTEBOOK} .validate-button").click()  # saves, then runs nbgrader validate
    verdict = page.locator(".jp-Dialog #validation-message")
    verdict.wait_for(timeout=180_000)
    screenshot(page, screenshots, "student-5-validate-verdict")
    text = verdict.inner_text()
    assert "validation-failed" in (verdict.get_attribute("class") or ""), text
    assert NOT_IMPLEMENTED.format(ANSWERED) not in text  # the saved answer was validated
    for exercise in exercises_of(source_notebook(FULL_RUN)):
        if exercise != ANSWERED:
            assert NOT_IMPLEMENTED.format(exercise) in text
    page.locator(".jp-Dialog .jp-mod-accept").click()


@pytest.mark.parametrize("assignment", [a for a in ASSIGNMENTS if a != FULL_RUN])
def test_every_other_notebook_runs_to_its_end_unanswered(
    page, student_lab, release_copy, screenshots, assignment
):
    path = lab_path(release_copy, assignment)
    release = nbformat.read(student_lab.root / path, as_version=4)
    first = exercises_of(source_notebook(assignment))[0]
    stub = cell_index(release, grade_id_of_tests(first))
    open_notebook(page, student_lab, path)
    run_all(page)

    states = cell_states(page)
    screenshot(page, screenshots, f"student-6-{assignment}-first-exercise", cells(page).nth(stub))
    assert_ran_to_its_end_unanswered(page, release, states, assignment)
    formula = first_formula_cell(release)
    assert_math_typeset(page, formula)


# --- formgrader, as an instructor uses it ------------------------------------------------------


@pytest.fixture(scope="module")
def graded_course(tmp_path_factory) -> Path:
    """A course folder made by `grader init` (its nbgrader_config.py is what formgrader reads)
    where the sample class (two students), handed in as nbgrader collects, was autograded."""
    base = tmp_path_factory.mktemp("instructor")
    assert main(["init", str(base / "course")]) == 0
    set_exchange(base / "course", base / "exchange")
    course = Course(base / "course")
    for assignment in ASSIGNMENTS:  # released, as `nbgrader generate_assignment` leaves them
        release = notebook_path(course.release, assignment)
        release.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(notebook_path(RELEASE, assignment), release)
    write_class(course.submitted, STUDENTS)
    # Our own sample code: run without the sandbox, so bubblewrap is not needed here.
    outcomes = autograde(course.submitted, course, jobs=2, sandbox=None, progress=False)
    assert [o.problem for o in outcomes if o.problem] == []
    return course.root


@pytest.fixture(scope="module")
def instructor_lab(graded_course: Path, tmp_path_factory) -> Iterator[Lab]:
    with running_lab(graded_course, tmp_path_factory.mktemp("instructor-server")) as lab:
        yield lab


def points(assignment: str) -> float:
    return sum(EXERCISES[e].points for e in exercises_of(source_notebook(assignment)))


def test_formgrader_lists_the_assignments_their_notebooks_and_the_students(
    page, instructor_lab, screenshots
):
    frame = open_formgrader(page, instructor_lab)
    names = table_column(frame, ".name")
    screenshot(page, screenshots, "instructor-1-assignments")
    assert names == ASSIGNMENTS
    assert table_column(frame, ".num-submissions") == [str(len(STUDENTS))] * len(ASSIGNMENTS)

    frame.get_by_role("link", name="Manual Grading").click()
    frame.wait_for_url("**/formgrader/gradebook")
    for assignment in ASSIGNMENTS:
        frame.locator("tbody td a", has_text=assignment).click()
        frame.wait_for_url(f"**/formgrader/gradebook/{assignment}")
        notebooks = table_column(frame, ".name")
        screenshot(page, screenshots, f"instructor-2-notebooks-of-{assignment}")
        assert notebooks == [p.stem for p in sorted((SOLUTIONS / assignment).glob("*.ipynb"))]
        frame.locator(".breadcrumb a", has_text="Manual Grading").click()
        frame.wait_for_url("**/formgrader/gradebook")

    frame.get_by_role("link", name="Manage Students").click()
    frame.wait_for_url("**/formgrader/manage_students")
    students = table_column(frame, ".id")
    screenshot(page, screenshots, "instructor-3-students")
    assert students == sorted(STUDENTS)


def test_formgrader_shows_a_students_scores_and_diagnosis(page, instructor_lab, screenshots):
    student, diagnosis = DIAGNOSED
    expected = STUDENTS[student].expected(FULL_RUN)
    frame = open_formgrader(page, instructor_lab)
    row = submission_row(frame, FULL_RUN, student)
    code_score = row.locator("td.code-score").inner_text()
    screenshot(page, screenshots, "instructor-4-submissions")
    assert score(code_score) == (sum(expected.values()), points(FULL_RUN))

    open_submission(frame, row)
    box = frame.locator(f"input.score#{grade_id_of_tests(ANSWERED)}")
    cell = frame.locator("div.cell", has=box)
    feedback = cell.locator(".output_area").first
    screenshot(page, screenshots, f"instructor-5-{student}-{ANSWERED}-diagnosis", cell)
    assert float(box.get_attribute("placeholder")) == expected[ANSWERED]  # the autograded score
    out_of = re.search(r"/\s*([\d.]+)", cell.locator(".panel-heading").inner_text())
    assert out_of and float(out_of[1]) == EXERCISES[ANSWERED].points
    assert diagnosis in feedback.inner_text()


def test_the_feedback_page_shows_its_diagnosis_whole_and_its_math_offline(
    page, graded_course, screenshots
):
    """ivy's feedback page opened with the network off: her diagnosis wraps in its output box
    (no line runs out of it) and the formulas are typeset (MathML), no TeX left raw."""
    student, diagnosis = DIAGNOSED
    course = Course(graded_course)
    assert write_feedback(course, [student])[1] == []
    page.context.set_offline(True)
    page.goto((course.feedback_folder(student, FULL_RUN) / f"{FULL_RUN}.html").as_uri())
    output = page.locator("div.output_area pre", has_text=diagnosis).first
    screenshot(page, screenshots, "feedback-1-diagnosis-offline", output)
    overflowing = "e => [e, e.closest('.output_subarea')].some(b => b.scrollWidth > b.clientWidth)"
    assert not output.evaluate(overflowing), "a line of the diagnosis runs out of its box"
    prose = page.locator(".text_cell_render").all_inner_texts()
    assert [t for t in prose if "$" in t] == []
    formula = page.locator(".text_cell_render math").first
    screenshot(page, screenshots, "feedback-2-math-offline", formula)
    assert formula.bounding_box()["width"] > 0


@pytest.mark.skipif(not available(), reason="bubblewrap is not installed: the button grades in it")
def test_formgraders_autograde_button_grades_the_notebook_handed_in_now(
    page, instructor_lab, graded_course, screenshots
):
    """ada's notebook replaced by one with a classic mistake (as a later collect would): the
    Autograde button records what the new notebook earns, not ada's stored result. Last in this
    module: it changes ada's grades."""
    course = Course(graded_course)
    mistaken = STUDENTS[DIAGNOSED[0]]
    nbformat.write(mistaken.build(FULL_RUN), notebook_path(course.submitted / "ada", FULL_RUN))
    frame = open_formgrader(page, instructor_lab)
    formgrader_row(frame, "td.name", FULL_RUN).locator("td.num-submissions a").click()
    frame.wait_for_url(f"**/formgrader/manage_submissions/{FULL_RUN}")
    row = formgrader_row(frame, "td.student-id", "ada")
    press_in_row(frame, row, "autograde")
    screenshot(page, screenshots, "instructor-6-autograde-button")
    assert cell_scores(course, "ada", FULL_RUN) == mistaken.expected(FULL_RUN)
