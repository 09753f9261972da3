"""One assignment's whole cycle on a fresh course folder, in a real JupyterLab driven by headless
Chromium: the instructor and the TA in formgrader, the student in the Assignment List and the
notebook, and the course's own commands (`grader init`, `autograde`, `feedback`, `export`,
`report`) where README's walk types them.

1. The instructor makes the course (`grader init`, then sets the exchange), and in formgrader
   generates the first assignment's student version and releases it.
2. ivy fetches it in the Assignment List, answers its first exercise with a classic mistake
   (the unbiased variance) and its written question, saves, and submits it there.
3. The instructor collects it in formgrader and runs `grader autograde`.
4. A TA opens ivy's notebook in formgrader, sees her autograded score and its diagnosis, and
   grades her written answer, with a comment.
5. A regrade (`grader autograde --force`) keeps the TA's score and comment.
6. The instructor makes the feedback pages (`grader feedback`) and releases them in formgrader;
   ivy fetches hers in the Assignment List: it shows the diagnosis, the TA's score and comment.
7. `grader export` writes the LMS's CSV and `grader report` the instructor's report.

A screenshot of every step goes to build/browser-screenshots/test_assignment_cycle/.
"""

from __future__ import annotations

import csv
from pathlib import Path

import nbformat
from browser_harness import (
    BROWSER_TESTS,
    Lab,
    cell_index,
    edit_cell,
    end_sessions,
    grade_by_hand,
    listed,
    on_assignment,
    open_assignment_list,
    open_formgrader,
    open_notebook,
    open_submission,
    press,
    rendered_text,
    running_labs,
    save_notebook,
    score,
    screenshot,
    set_exchange,
    student_home,
    submission_row,
    typed,
)
from nbgrader.api import Gradebook
from nbgrader.utils import is_grade

from grader.checks import EXERCISES
from grader.cli import main
from grader.course import (
    answer_cell,
    fetched_feedback,
    grade_id,
    grade_id_of_tests,
    nbgrader_metadata,
    notebook_path,
)
from grader.course.config import assignments
from grader.course.intake import exercises_of, source_notebook
from grader.gradebook.lms import points_header
from grader.publish.class_report import code_names
from grader.release.demo import PROFILES

pytestmark = BROWSER_TESTS

ASSIGNMENT = assignments()[0]
SOURCE = source_notebook(ASSIGNMENT)
EXERCISE = exercises_of(SOURCE)[0]  # ivy answers it with her classic mistake, and no other
MISTAKE = "unbiased variance"  # its name in the checks (grader.release.demo's ivy makes it)
DIAGNOSIS = {m.name: m.message for m in EXERCISES[EXERCISE].mistakes}[MISTAKE]
WRITTEN = next(grade_id(c) for c in SOURCE.cells if c.cell_type == "markdown" and is_grade(c))
WRITTEN_POINTS = next(
    nbgrader_metadata(c)["points"] for c in SOURCE.cells if grade_id(c) == WRITTEN
)
CODE_POINTS = sum(EXERCISES[e].points for e in exercises_of(SOURCE))
AUTOGRADED = PROFILES["ivy"].expected(ASSIGNMENT)[EXERCISE]  # every stub left scores 0
WRITTEN_ANSWER = "Each token is normalized over its own features, whatever the batch holds."
TA_SCORE, TA_COMMENT = 1.5, "Right about the batch; say what padding would do to it, too."


def test_an_assignment_from_release_to_the_lms(page, tmp_path, screenshots):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    assert main(["init", str(course)]) == 0
    set_exchange(course, exchange)
    home = student_home(tmp_path / "ivy", "ivy", exchange)
    servers = (course, tmp_path / "instructor-server"), (home, tmp_path / "ivy-server")
    with running_labs(*servers) as (instructor, ivy):
        formgrader = open_formgrader(page, instructor)
        on_assignment(formgrader, ASSIGNMENT, "assign")
        on_assignment(formgrader, ASSIGNMENT, "release")

        fetch_answer_and_submit(page, ivy, screenshots)

        on_assignment(open_formgrader(page, instructor), ASSIGNMENT, "collect")
        assert main(autograde(course)) == 0
        see_the_diagnosis_and_grade_the_written_answer(page, instructor, screenshots)
        assert written_grade(course) == (TA_SCORE, TA_COMMENT)

        assert main(autograde(course, "--force")) == 0  # a regrade
        assert written_grade(course) == (TA_SCORE, TA_COMMENT)
        assert total(course) == AUTOGRADED + TA_SCORE

        assert main(["feedback", "--course", str(course)]) == 0
        on_assignment(open_formgrader(page, instructor), ASSIGNMENT, "release-feedback")
        feedback = fetch_feedback(page, ivy, screenshots)
    assert DIAGNOSIS in feedback
    assert f"Written response (Score: {TA_SCORE} / {WRITTEN_POINTS:.1f})" in feedback
    assert TA_COMMENT in feedback

    assert main(["export", "--course", str(course), "--csv", str(tmp_path / "grades.csv")]) == 0
    (row,) = csv.DictReader((tmp_path / "grades.csv").open())
    assert row["student_id"] == "ivy"
    assert float(row[points_header(ASSIGNMENT, CODE_POINTS + WRITTEN_POINTS)]) == (
        AUTOGRADED + TA_SCORE
    )

    assert main(["report", "--course", str(course)]) == 0
    report = (course / "reports" / f"{ASSIGNMENT}.html").read_text()
    assert f"1 student graded; mean {AUTOGRADED + TA_SCORE:.1f}, " in report
    points = EXERCISES[EXERCISE].points
    assert f"<tr><td>{EXERCISE}</td><td>{points:g}</td><td>{AUTOGRADED:.2f}</td>" in report
    assert f"<li>1 × {code_names(DIAGNOSIS)}</li>" in report


def autograde(course: Path, *options: str) -> list[str]:
    """README's `grader autograde --course . --jobs 2`; unsandboxed: the answers are ours."""
    return ["autograde", "--course", str(course), "--jobs", "2", "--unsafe-no-sandbox", *options]


# --- the student, in JupyterLab --------------------------------------------------------------


def fetch_answer_and_submit(page, lab: Lab, screenshots: Path) -> None:
    """Fetch in the Assignment List; type the mistaken answer and the written one; save; submit."""
    open_assignment_list(page, lab)
    press(page, "Fetch", ASSIGNMENT)
    listed(page, "fetched", ASSIGNMENT).wait_for()
    screenshot(page, screenshots, "cycle-1-student-fetched")

    path = notebook_path(Path("."), ASSIGNMENT)
    release = nbformat.read(lab.root / path, as_version=4)
    mistaken = answer_cell(PROFILES["ivy"].build(ASSIGNMENT), EXERCISE).source
    open_notebook(page, lab, str(path))
    edit_cell(page, cell_index(release, EXERCISE), typed(mistaken))
    edit_cell(page, cell_index(release, WRITTEN), WRITTEN_ANSWER)
    save_notebook(page)
    screenshot(page, screenshots, "cycle-2-student-answered")
    saved = nbformat.read(lab.root / path, as_version=4)
    assert saved.cells[cell_index(release, WRITTEN)].source == WRITTEN_ANSWER
    end_sessions(lab)

    open_assignment_list(page, lab)
    press(page, "Submit", ASSIGNMENT)
    listed(page, "submitted", ASSIGNMENT).wait_for()
    screenshot(page, screenshots, "cycle-3-student-submitted")


def fetch_feedback(page, lab: Lab, screenshots: Path) -> str:
    """Fetch Feedback in the Assignment List: the feedback page's text, as the browser shows it."""
    open_assignment_list(page, lab)
    press(page, "Fetch Feedback", ASSIGNMENT)
    page.get_by_text("(view feedback)").wait_for(state="attached")
    (fetched,) = fetched_feedback(lab.root, ASSIGNMENT).rglob(f"{ASSIGNMENT}.html")
    text = rendered_text(page, lab, str(fetched.relative_to(lab.root)))
    screenshot(page, screenshots, "cycle-6-student-feedback")
    return text


# --- the TA, in formgrader -------------------------------------------------------------------


def see_the_diagnosis_and_grade_the_written_answer(page, lab: Lab, screenshots: Path) -> None:
    frame = open_formgrader(page, lab)
    row = submission_row(frame, ASSIGNMENT, "ivy")
    assert score(row.locator("td.code-score").inner_text()) == (AUTOGRADED, CODE_POINTS)
    open_submission(frame, row)
    checks = frame.locator("div.cell", has=frame.locator(f"#{grade_id_of_tests(EXERCISE)}"))
    screenshot(page, screenshots, "cycle-4-ta-sees-the-diagnosis", checks)
    assert DIAGNOSIS in checks.locator(".output_area").first.inner_text()

    grade_by_hand(frame, WRITTEN, TA_SCORE, TA_COMMENT)
    written = frame.locator("div.cell", has=frame.locator(f"input.score#{WRITTEN}"))
    screenshot(page, screenshots, "cycle-5-ta-graded-the-written-answer", written)
    assert WRITTEN_ANSWER in written.inner_text()


# --- what the gradebook holds ----------------------------------------------------------------


def written_grade(course: Path) -> tuple[float | None, str | None]:
    """The TA's score and comment of ivy's written answer."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade(WRITTEN, ASSIGNMENT, ASSIGNMENT, "ivy")
        comment = gradebook.find_comment(WRITTEN, ASSIGNMENT, ASSIGNMENT, "ivy")
        return grade.manual_score, comment.manual_comment


def total(course: Path) -> float:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return gradebook.find_submission(ASSIGNMENT, "ivy").score
