"""A course folder made by `grader init`, run as nbgrader's own workflow: release, fetch,
submit and collect through an exchange, `grader autograde` into the same gradebook nbgrader's
commands read, and those commands still working after it (collect, autograde, feedback). The
course is the suite's one nbgrader cycle, README's walk (tests/course_walk.py), copied as it was
just after `grader autograde`."""

from __future__ import annotations

import csv
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from course_walk import (
    AUTOGRADE_LOG,
    COLLECTED,
    FIRST,
    GRADED,
    SECOND,
    STUDENTS,
    copy_of,
    hand_in,
    nbgrader,
)
from nbgrader.api import Gradebook, MissingEntry

from grader.autograde import autograde as grade_class
from grader.checks import EXERCISES
from grader.checks.core import Verdict
from grader.cli import main
from grader.course import Course, Layout, Results, fetched_feedback, notebook_path
from grader.gradebook.lms import points_header
from grader.gradebook.records import cell_scores
from grader.grading.sandbox import available
from grader.publish.class_report import code_names, write_reports
from grader.publish.feedback import write_feedback
from grader.release.demo import PROFILES, expected_scores, write_class


def tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def grader(*argv: str) -> subprocess.CompletedProcess:
    """One `grader` command, as typed in a terminal (its progress lines on stderr)."""
    command = [sys.executable, "-m", "grader", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def autograde(course: Path, *options: str) -> tuple[int, str]:
    argv = ["--course", str(course), "--jobs", "2", "--seed", "1", *options]
    done = grader("autograde", *argv, "--unsafe-no-sandbox")
    return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def cycle(readme_walk, tmp_path_factory):
    """The suite's one nbgrader cycle (tests/course_walk.py: `grader init`, the first assignment
    released, handed in by ada (right), ben (untouched) and ivy (a classic mistake), collected,
    and graded by `grader autograde` from the course's own submitted/), copied as it was just
    after `grader autograde`: what was in submitted/ before it, and what it printed."""
    root = copy_of(readme_walk / GRADED, tmp_path_factory.mktemp("nbgrader-course"))
    before = tree(Layout.of(readme_walk / COLLECTED / "course").submitted)
    output = (root / AUTOGRADE_LOG).read_text()
    return root, root / "exchange", root / "course", before, output


def score(course: Path, student: str, assignment: str) -> float:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return gradebook.find_submission(assignment, student).score


def test_init_refuses_a_folder_that_is_not_empty(tmp_path, capsys):
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "notes.txt").write_text("mine")
    assert main(["init", str(tmp_path / "course")]) == 2
    assert "already exists and is not an empty folder" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "course").iterdir()] == ["notes.txt"]


def test_autograde_grades_what_was_handed_in_and_writes_nothing_into_submitted(cycle):
    _, _, course, before, output = cycle  # its exit status: 0, or the walk would have failed
    assert tree(Layout.of(course).submitted) == before
    assert score(course, "ada", FIRST) == sum(expected_scores()[("ada", FIRST)].values())
    assert score(course, "ben", FIRST) == 0
    # ben's untouched stubs: not attempted (for the class report), not "got it wrong"
    untouched = Results.load(Course(course).results_file("ben", FIRST)).exercises
    assert {e.cause for e in untouched} == {"unanswered"}
    assert "not answered (the stub still raises NotImplementedError)" in output
    lines = output.split("Not handed in", 1)[1].splitlines()[1:]
    skipped = [line.split() for line in lines if line.startswith("  ")][:2]
    assert skipped == [["ada", SECOND], ["ben", SECOND]]  # what it skipped: released ones only
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as book, pytest.raises(MissingEntry):
        book.find_submission(SECOND, "ada")


def test_nbgraders_collect_of_a_later_assignment_works_after_grading(cycle):
    root, exchange, course, *_ = cycle
    nbgrader("release_assignment", SECOND, cwd=course, exchange=exchange)
    hand_in(root, exchange, "ada", SECOND, "ada")
    log = nbgrader("collect", SECOND, cwd=course, exchange=exchange)
    assert "already exists" not in log
    assert notebook_path(Layout.of(course).submitted / "ada", SECOND).is_file()


@pytest.fixture(scope="module")
def nbgraders_feedback(cycle):
    """The cycle's first assignment with feedback generated by nbgrader's own command (once per
    module, whichever test asks first: pytest-xdist may run them apart)."""
    _, exchange, course, *_ = cycle
    nbgrader("generate_feedback", FIRST, cwd=course, exchange=exchange)
    return cycle


def test_feedback_is_released_and_fetched_with_nbgraders_commands(nbgraders_feedback):
    root, exchange, course, *_ = nbgraders_feedback
    nbgrader("release_feedback", FIRST, cwd=course, exchange=exchange)
    nbgrader("fetch_feedback", FIRST, cwd=root / "ada", exchange=exchange, user="ada")
    handed_in = (Layout.of(course).submitted / "ada" / FIRST / "timestamp.txt").read_text()
    page = fetched_feedback(root / "ada", FIRST) / handed_in / f"{FIRST}.html"
    full = sum(expected_scores()[("ada", FIRST)].values())
    assert f"Score: {full:.1f} / " in page.read_text()


def score_lines(page: Path) -> list[str]:
    """Each score a page gives, as nbgrader's own page gives it: where ours says a written
    answer is not graded yet, nbgrader's says 0."""
    text = re.sub(r"not graded yet, ([\d.]+) points", r"Score: 0.0 / \1", page.read_text())
    return re.findall(r"Score: [-\d.]+ / [\d.]+", text)


def pages(course: Path) -> dict[Path, int]:
    """Each feedback page and when it was written."""
    return {p: p.stat().st_mtime_ns for p in Layout.of(course).feedback.rglob("*.html")}


def test_grader_feedback_gives_nbgraders_scores_and_renders_only_what_changed(
    nbgraders_feedback,
):
    """After nbgrader's own generate_feedback, `grader feedback`: the same scores on every page,
    with a progress line; a second run writes nothing; a TA's grade re-renders that student's
    page alone."""
    _, _, course, *_ = nbgraders_feedback
    nbgraders = {page: score_lines(page) for page in pages(course)}
    assert len(nbgraders) == len(STUDENTS)  # their first assignment: nothing else was graded
    done = grader("feedback", "--course", str(course), "--jobs", "2")
    assert done.returncode == 0, done.stderr
    assert f"feedback {len(STUDENTS)}/{len(STUDENTS)} pages" in done.stderr
    assert {page: score_lines(page) for page in pages(course)} == nbgraders
    written = pages(course)
    assert write_feedback(Course(course), sorted(STUDENTS), jobs=2)[1] == []
    assert pages(course) == written
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_submission_notebook(FIRST, FIRST, "ben").grades[0]
        grade.manual_score = grade.max_score  # as a TA does in formgrader
        gradebook.db.commit()
        ta_score = f"Score: {grade.max_score:.1f} / {grade.max_score:.1f}"
    write_feedback(Course(course), sorted(STUDENTS), jobs=2)
    changed = [page for page, written_at in pages(course).items() if written[page] != written_at]
    assert [page.parts[-3] for page in changed] == ["ben"]
    assert ta_score in score_lines(changed[0])


def test_zip_collect_takes_an_lms_resubmission_and_says_so(cycle):
    """An LMS download holding a first attempt and a resubmission (`-1`): the latest wins."""
    _, exchange, course, *_ = cycle
    archive = course / "downloaded" / FIRST / "archive"
    archive.mkdir(parents=True)
    first, latest = (
        archive / f"dandy_77_1001_{FIRST}.ipynb",
        archive / f"dandy_77_1002_{FIRST}-1.ipynb",
    )
    nbformat.write(PROFILES["ivy"].build(FIRST), first)
    nbformat.write(PROFILES["ada"].build(FIRST), latest)
    collector = "--collector=grader.gradebook.lms.ResubmissionCollector"
    log = nbgrader("zip_collect", FIRST, collector, cwd=course, exchange=exchange)
    assert f"Skipped {course / 'downloaded' / FIRST / 'extracted' / first.name}" in log
    assert "resubmission 1, the latest" in log
    collected = notebook_path(Layout.of(course).submitted / "77", FIRST)
    assert collected.read_bytes() == latest.read_bytes()
    status, output = autograde(course, "--student", "77")
    assert status == 0, output
    assert score(course, "77", FIRST) == sum(expected_scores()[("ada", FIRST)].values())


def test_zip_collect_takes_ids_only_from_the_top_of_the_download(cycle):
    """A notebook inside a folder of the download (a student's own zip, extracted) is no one's:
    its name would claim a classmate who never handed anything in."""
    _, exchange, course, *_ = cycle
    inside = course / "downloaded" / FIRST / "archive" / "nested"
    inside.mkdir(parents=True)
    planted = inside / f"eve_88_1003_{FIRST}.ipynb"
    nbformat.write(PROFILES["ada"].build(FIRST), planted)
    collector = "--collector=grader.gradebook.lms.ResubmissionCollector"
    log = nbgrader("zip_collect", FIRST, collector, "--force", cwd=course, exchange=exchange)
    assert "inside a folder of the download" in log
    assert not (Layout.of(course).submitted / "88").exists()


def test_the_lms_export_lists_the_whole_roster_with_each_assignments_points(cycle):
    """nbgrader's export with the course's plugin: a roster student who handed nothing in
    scores 0; each assignment's column says its points."""
    _, exchange, course, *_ = cycle
    nbgrader("db", "student", "add", "zed", "--last-name=Zed", cwd=course, exchange=exchange)
    exporter = "--exporter=grader.gradebook.lms.LmsCsvExport"
    nbgrader("export", exporter, "--to=lms.csv", cwd=course, exchange=exchange)
    rows = {row["student_id"]: row for row in csv.DictReader((course / "lms.csv").open())}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        column = points_header(FIRST, gradebook.find_assignment(FIRST).max_score)
    assert sorted(rows) == sorted(["77", *STUDENTS, "zed"])
    assert rows["zed"]["last_name"] == "Zed"
    assert rows["zed"][column] == "0"
    assert float(rows["ada"][column]) == score(course, "ada", FIRST) > 0
    # `grader export` is that export
    assert main(["export", "--course", str(course), "--csv", str(course / "grader.csv")]) == 0
    assert (course / "grader.csv").read_text() == (course / "lms.csv").read_text()


@pytest.mark.skipif(not available(), reason="bubblewrap is not installed: nothing to grade in")
def test_nbgraders_autograde_grades_the_notebook_handed_in_now(cycle):
    """The same per-cell scores as `grader autograde`; a worse notebook, a worse score; a new
    student graded, not a missing result."""
    _, exchange, course, *_ = cycle
    recorded = cell_scores(Course(course), "ada", FIRST)
    nbgrader("autograde", FIRST, "--student=ada", "--force", cwd=course, exchange=exchange)
    assert cell_scores(Course(course), "ada", FIRST) == recorded
    worse = notebook_path(Layout.of(course).submitted / "ada", FIRST)
    nbformat.write(PROFILES["ivy"].build(FIRST), worse)  # a classic mistake: fewer points
    nbgrader("autograde", FIRST, "--student=ada", "--force", cwd=course, exchange=exchange)
    assert score(course, "ada", FIRST) == sum(expected_scores()[("ivy", FIRST)].values())
    new = notebook_path(Layout.of(course).submitted / "cat", FIRST)
    new.parent.mkdir(parents=True)
    nbformat.write(PROFILES["ada"].build(FIRST), new)
    nbgrader("autograde", FIRST, "--student=cat", cwd=course, exchange=exchange)
    assert cell_scores(Course(course), "cat", FIRST) == recorded


def test_the_class_report_counts_the_diagnoses_recorded_not_the_feedbacks_wording(
    tmp_path, monkeypatch
):
    """Two students, each with a classic mistake in one exercise, graded with the feedback's
    wording changed (its arrow before a diagnosis renamed): the report still counts each."""
    render = Verdict.render
    monkeypatch.setattr(Verdict, "render", lambda verdict: render(verdict).replace("→", "=>"))
    mistaken = {"ivy": "unbiased variance", "jon": "eps outside the square root"}
    submissions = write_class(tmp_path / "class", {s: PROFILES[s] for s in mistaken})
    course = Course(tmp_path / "course")
    grade_class(submissions, course, jobs=1, progress=False, notebooks=[FIRST])
    exercise = "layer_norm"  # where both profiles make their mistake (grader.release.demo)
    for student, mistake in mistaken.items():
        result = Results.load(course.results_file(student, FIRST)).by_name()[exercise]
        assert "=>" in result.feedback and "→" not in result.feedback
        assert [d.name for d in result.diagnoses] == [mistake]

    (page,) = write_reports(course, sorted(mistaken), tmp_path / "reports")
    messages = {m.name: m.message for m in EXERCISES[exercise].mistakes}
    report = page.read_text()
    for mistake in mistaken.values():
        assert f"<li>1 × {code_names(messages[mistake])}</li>" in report
    # Their written answers (the solution's) are still to grade by a person, each student's line
    # says so, and both students attempted the exercise and got it wrong.
    assert "<td>0</td><td>–</td><td>2</td></tr>" in report  # 0 graded, no mean, 2 to grade
    for student in mistaken:
        assert re.search(
            rf"<tr><td>{student}</td><td>[\d.]+</td><td>{exercise}: [^<]*</td><td>1</td>", report
        )
    assert re.search(
        rf"<tr><td>{exercise}</td>(<td>[^<]*</td>){{3}}<td>0 \(0%\)</td><td>2 ", report
    )
