"""The LMS round trip, from files in each LMS's own format: Canvas's and Moodle's rosters (their
gradebook exports) in, their grade imports out, checked column by column; every cell of every
export inert in a spreadsheet; nbgrader's roster import written from an LMS's roster."""

from __future__ import annotations

import csv
import datetime
import io
import shutil
import zipfile
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from grader.cli import main
from grader.course import Layout
from grader.course.config import assignments, use_this_environment
from grader.gradebook.rosters import FORMULA_STARTS, inert

FIRST, SECOND = assignments()[:2]
POINTS = {FIRST: 21.0, SECOND: 23.0}


@pytest.fixture(scope="module")
def released_gradebook(tmp_path_factory) -> Path:
    """A gradebook holding FIRST and SECOND (released, one graded cell each); made once, for
    nbgrader's schema set-up takes seconds."""
    path = tmp_path_factory.mktemp("template") / "gradebook.db"
    use_this_environment()  # nbgrader runs alembic by name
    with Gradebook(f"sqlite:///{path}") as gradebook:
        for assignment, points in POINTS.items():
            gradebook.add_assignment(assignment)
            gradebook.add_notebook(assignment, assignment)
            gradebook.add_grade_cell(
                "answer", assignment, assignment, max_score=points, cell_type="code"
            )
    return path


@pytest.fixture
def graded_course(released_gradebook, tmp_path):
    """course(students): a course folder whose gradebook holds FIRST, SECOND and `students`
    (id -> {"score": {assignment: points}, and nbgrader's student fields})."""

    def course(students: dict[str, dict]) -> Path:
        root = tmp_path / "course"
        root.mkdir()
        shutil.copy(released_gradebook, root / "gradebook.db")
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gradebook:
            add_students(gradebook, students)
        return root

    return course


def add_students(gradebook: Gradebook, students: dict[str, dict]) -> None:
    for student, fields in students.items():
        scores = fields.pop("score", {})
        gradebook.add_student(student, **fields)
        for assignment, score in scores.items():
            gradebook.add_submission(assignment, student)
            grade = gradebook.find_grade("answer", assignment, assignment, student)
            grade.auto_score = score
            gradebook.db.commit()


def rows_of(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


def write_rows(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    return path


# Canvas's gradebook export: the identity columns, an existing column for FIRST (named as
# Canvas names it), one for another assignment, Canvas's computed columns, its points row, the
# student view's test student, and a student whose name would be a formula.
CANVAS_ROSTER = [
    ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{FIRST} (50001)",
     "Quiz 1 (50002)", "Current Score", "Final Score"],
    ["    Points Possible", "", "", "", "", "21", "5", "(read only)", "(read only)"],
    ["Nguyen, An", "10005", "s10005", "nguyenan", "Section 01", "", "4", "80", "80"],
    ["Student, Test", "10099", "", "", "Section 01", "", "", "", ""],
    ["=HYPERLINK(1), Eve", "10006", "s10006", "", "Section 02", "", "", "", ""],
]  # fmt: skip


def test_canvas_import_file_from_canvas_own_roster(tmp_path, capsys, graded_course):
    course = graded_course(
        {
            "nguyenan": {"score": {FIRST: 19.0, SECOND: 23.0}},
            "10006": {"score": {FIRST: 3.5}},  # no SIS Login ID: Canvas's own id
            "stray": {"score": {FIRST: 1.0}},  # graded, not in Canvas's roster
        },
    )
    roster = write_rows(tmp_path / "canvas.csv", CANVAS_ROSTER)
    out = tmp_path / "canvas-import.csv"
    argv = ["export", "--course", str(course), "--lms", "canvas", "--roster", str(roster)]
    assert main([*argv, "--csv", str(out)]) == 1  # stray is named, not exported
    assert "Not in the canvas roster, not exported: stray" in capsys.readouterr().out
    header, points, *students = rows_of(out)
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                      f"{FIRST} (50001)", SECOND]  # fmt: skip
    assert points == ["Points Possible", "", "", "", "", "21", "23"]
    assert students == [
        ["Nguyen, An", "10005", "s10005", "nguyenan", "Section 01", "19", "23"],
        ["'=HYPERLINK(1), Eve", "10006", "s10006", "", "Section 02", "3.5", "0"],
    ]


# Moodle's "Plain text file" grade export, with a grade item for SECOND.
MOODLE_ROSTER = [
    ["First name", "Last name", "ID number", "Institution", "Department", "Email address",
     f"Assignment: {SECOND} (Real)", "Course total (Real)", "Last downloaded from this course"],
    ["An", "Nguyen", "s10005", "Uni", "CS", "an@example.edu", "-", "0.00", "1700000000"],
    ["Bo", "Li", "", "Uni", "CS", "bo@example.edu", "-", "0.00", "1700000000"],
]  # fmt: skip


def test_moodle_import_file_from_moodle_own_roster(tmp_path, graded_course):
    course = graded_course(
        {"s10005": {"score": {FIRST: 21.0}}, "bo@example.edu": {"score": {SECOND: 7.25}}},
    )
    roster = write_rows(tmp_path / "moodle.csv", MOODLE_ROSTER)
    out = tmp_path / "moodle-import.csv"
    argv = ["export", "--course", str(course), "--lms", "moodle", "--roster", str(roster)]
    assert main([*argv, "--csv", str(out)]) == 0
    assert rows_of(out) == [
        ["First name", "Last name", "ID number", "Email address", FIRST,
         f"Assignment: {SECOND} (Real)"],
        ["An", "Nguyen", "s10005", "an@example.edu", "21", "0"],
        ["Bo", "Li", "", "bo@example.edu", "0", "7.25"],
    ]  # fmt: skip


@pytest.mark.parametrize(("lms", "roster"), [("canvas", CANVAS_ROSTER), ("moodle", MOODLE_ROSTER)])
def test_nbgrader_roster_import_file_from_the_lms_roster(lms, roster, tmp_path):
    path = write_rows(tmp_path / f"{lms}.csv", roster)
    out = tmp_path / "students.csv"
    assert main(["roster", lms, str(path), "--csv", str(out)]) == 0
    expected = {
        "canvas": [["nguyenan", "An", "Nguyen", ""], ["10006", "Eve", "'=HYPERLINK(1)", ""]],
        "moodle": [
            ["s10005", "An", "Nguyen", "an@example.edu"],
            ["bo@example.edu", "Bo", "Li", "bo@example.edu"],
        ],
    }[lms]
    assert rows_of(out) == [["id", "first_name", "last_name", "email"], *expected]


@pytest.mark.parametrize("lms", ["canvas", "moodle"])
def test_a_roster_not_in_the_lms_format_is_refused_in_one_line(
    lms, tmp_path, capsys, graded_course
):
    course = graded_course({"ada": {"score": {FIRST: 1.0}}})
    roster = write_rows(tmp_path / "roster.csv", [["student_id", "email"], ["ada", "a@x"]])
    argv = ["export", "--course", str(course), "--lms", lms, "--roster", str(roster)]
    assert main([*argv, "--csv", str(tmp_path / "out.csv")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{roster} is not {lms.capitalize()}'s gradebook export: it lacks the column" in line
    assert not (tmp_path / "out.csv").exists()


def test_export_takes_assignments_and_refuses_unknown_names(tmp_path, capsys, graded_course):
    course = graded_course({"ada": {"score": {FIRST: 2.0, SECOND: 3.0}}})
    out = tmp_path / "one.csv"
    assert main(["export", "--course", str(course), "--assignment", SECOND, "--csv", str(out)]) == 0
    assert rows_of(out) == [
        ["student_id", "last_name", "first_name", "email", f"{SECOND} (23 pts)", "total (23 pts)"],
        ["ada", "", "", "", "3", "3"],
    ]
    capsys.readouterr()
    typo = FIRST.replace("_", "", 1)
    assert main(["export", "--course", str(course), "--assignment", typo]) == 2
    assert f"no assignment {typo!r} graded here (did you mean {FIRST}?)" in capsys.readouterr().err


@pytest.mark.parametrize("start", FORMULA_STARTS)
def test_every_exporter_writes_a_would_be_formula_as_text(start, tmp_path, graded_course):
    """A name nbgrader's roster import took as given (`nbgrader db student import`)."""
    evil = f'{start}HYPERLINK("http://x")'
    course = graded_course({"ada": {"score": {FIRST: 1.0}, "last_name": evil, "email": evil}})
    out = tmp_path / "grades.csv"
    assert main(["export", "--course", str(course), "--csv", str(out)]) == 0
    (row,) = rows_of(out)[1:]
    assert row[1] == row[3] == f"'{evil}"
    canvas = [CANVAS_ROSTER[0], [f"{evil}, Ada", "1", "", "ada", evil]]
    roster = write_rows(tmp_path / "canvas.csv", [r + [""] * (9 - len(r)) for r in canvas])
    argv = ["export", "--course", str(course), "--lms", "canvas", "--roster", str(roster)]
    assert main([*argv, "--csv", str(out)]) == 0
    assert rows_of(out)[2][:5] == [f"'{evil}, Ada", "1", "", "ada", f"'{evil}"]


def test_a_plain_cell_is_left_as_it_is():
    assert [inert(c) for c in ["ada", "3.5", "Nguyen, An", " =x", "a=b"]] == [
        "ada", "3.5", "Nguyen, An", " =x", "a=b"
    ]  # fmt: skip


# --- a submission download ---------------------------------------------------------------------

DUE = datetime.datetime(2026, 3, 1, 12, 0)


def download(path: Path, entries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


def own_zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def due(course: Path) -> Path:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.update_or_create_assignment(FIRST, duedate=DUE)
    return course


def collected(course: Path) -> dict[str, tuple[bytes, str]]:
    """student -> (their notebook's bytes, their timestamp.txt or '')."""
    found = {}
    for notebook in sorted(Layout.of(course).submitted.glob(f"*/{FIRST}/{FIRST}.ipynb")):
        stamp = notebook.with_name("timestamp.txt")
        found[notebook.parents[1].name] = (
            notebook.read_bytes(),
            stamp.read_text() if stamp.exists() else "",
        )
    return found


CANVAS_CLASS = [
    *CANVAS_ROSTER[:3],
    ["Le, Bo", "10006", "", "lebo", "Section 01"],
    ["Kim, Cy", "10007", "", "kimcy", "Section 01"],
    ["Evil, Ed", "10008", "", "evil", "Section 01"],
    ["Dot, Dot", "10012", "", "..", "Section 01"],
]


def test_canvas_download_names_are_collected_timestamped_or_listed(tmp_path, capsys, graded_course):
    course = due(graded_course({}))
    roster = write_rows(tmp_path / "canvas.csv", [r + [""] * (9 - len(r)) for r in CANVAS_CLASS])
    nb = f"{FIRST}.ipynb"
    zipped = download(
        tmp_path / "submissions.zip",
        {
            f"nguyenan_10005_50005_{nb}": b"first",
            f"nguyenan_10005_50006_{FIRST} (1).ipynb": b"resubmitted",  # Canvas's resubmission
            f"lebo_LATE_10006_50007_{FIRST}-2.ipynb": b"late",
            f"kimcy_late_10007_50008_{nb}": b"late, lowercase",  # the id is 10007, not late
            f"evil_10008_50009_{FIRST}.zip": own_zip(
                {f"deep/{nb}": b"own zip", f"ghost_10010_1_{nb}": b"not a student"}
            ),
            f"../escape_10011_1_{nb}": b"outside",
            f"dot_10012_50010_{nb}": b"id ..",
            "readme.txt": b"not a submission",
        },
    )
    argv = ["collect", FIRST, str(zipped), "--lms", "canvas", "--roster", str(roster)]
    assert main([*argv, "--course", str(course)]) == 1
    after = f"{DUE + datetime.timedelta(seconds=1)} UTC"
    assert collected(course) == {
        "nguyenan": (b"resubmitted", ""),
        "lebo": (b"late", after),
        "kimcy": (b"late, lowercase", after),
        "evil": (b"own zip", ""),
    }
    listed = capsys.readouterr().out.split("NOT COLLECTED")[1]
    assert f"../escape_10011_1_{nb}: a path outside the download" in listed
    assert f"dot_10012_50010_{nb}: the student '10012' is not letters, digits" in listed
    assert "readme.txt: not a name canvas gives a submission" in listed


def test_canvas_download_without_a_roster_takes_canvas_ids(tmp_path, graded_course):
    course = graded_course({})
    zipped = download(tmp_path / "s.zip", {f"nguyenan_10005_50005_{FIRST}.ipynb": b"x"})
    assert main(["collect", FIRST, str(zipped), "--lms", "canvas", "--course", str(course)]) == 0
    assert collected(course) == {"10005": (b"x", "")}  # no due date: nothing late


def test_moodle_download_names_and_folders_are_collected(tmp_path, capsys, graded_course):
    course = graded_course({})
    roster = write_rows(tmp_path / "moodle.csv", MOODLE_ROSTER)
    nb = f"{FIRST}.ipynb"
    zipped = download(
        tmp_path / "moodle.zip",
        {
            f"An Nguyen_123456_assignsubmission_file_{nb}": b"an",
            f"Bo Li_123457_assignsubmission_file/{nb}": b"bo",  # "in folders", as Moodle 4
            f"Zed Unknown_123458_assignsubmission_file_{nb}": b"zed",
        },
    )
    argv = ["collect", FIRST, str(zipped), "--lms", "moodle", "--roster", str(roster)]
    assert main([*argv, "--course", str(course)]) == 1
    assert collected(course) == {"s10005": (b"an", ""), "bo@example.edu": (b"bo", "")}
    assert "the student 'Zed Unknown' is not in the roster" in capsys.readouterr().out


# Canvas's group set CSV, as People → Groups → Import → "Download Course Roster CSV" gives it.
CANVAS_GROUPS = [
    ["name", "canvas_user_id", "user_id", "login_id", "sections", "group_name", "canvas_group_id",
     "group_id"],
    ["An Nguyen", "10005", "s10005", "nguyenan", "Section 01", "Team 1", "301", ""],
    ["Bo Le", "10006", "", "lebo", "Section 01", "Team 1", "301", ""],
    ["Cy Kim", "10007", "", "kimcy", "Section 01", "Team 2", "302", ""],
    ["Ed Evil", "10008", "", "evil", "Section 01", "Team 2", "302", ""],
]  # fmt: skip


def test_a_canvas_group_submission_goes_to_every_member(tmp_path, capsys, graded_course):
    """Canvas names a group's submission by the member who handed it in; with the group set,
    every member gets the group's latest, late for all of them when it was late."""
    course = due(graded_course({}))
    roster = write_rows(tmp_path / "canvas.csv", [r + [""] * (9 - len(r)) for r in CANVAS_CLASS])
    groups = write_rows(tmp_path / "groups.csv", CANVAS_GROUPS)
    nb = f"{FIRST}.ipynb"
    zipped = download(
        tmp_path / "groups.zip",
        {
            f"nguyenan_10005_50005_{nb}": b"team 1, first",
            f"lebo_10006_50006_{FIRST}-1.ipynb": b"team 1, resubmitted by Bo",
            f"kimcy_LATE_10007_50007_{nb}": b"team 2, late",
        },
    )
    argv = ["collect", FIRST, str(zipped), "--lms", "canvas", "--roster", str(roster)]
    assert main([*argv, "--groups", str(groups), "--course", str(course)]) == 0
    after = f"{DUE + datetime.timedelta(seconds=1)} UTC"
    assert collected(course) == {
        "nguyenan": (b"team 1, resubmitted by Bo", ""),
        "lebo": (b"team 1, resubmitted by Bo", ""),
        "kimcy": (b"team 2, late", after),
        "evil": (b"team 2, late", after),
    }
    out = capsys.readouterr().out
    assert "  evil: kimcy_LATE_10007_50007_" in out  # each member, with the entry collected


# The same columns, written by hand for Moodle, which exports no group memberships.
MOODLE_GROUPS = [
    ["group_name", "login_id"],
    ["Team-A", "s10005"],
    ["Team-A", "bo@example.edu"],
]


@pytest.mark.parametrize(
    "entry",
    [
        "Team-A_17_assignsubmission_file_{nb}",  # Moodle 4: one entry, named by the group
        "Team-A-Bo Li_123457_assignsubmission_file_{nb}",  # before 4.0: one per member
    ],
)
def test_a_moodle_group_submission_goes_to_every_member(entry, tmp_path, graded_course):
    course = graded_course({})
    roster = write_rows(tmp_path / "moodle.csv", MOODLE_ROSTER)
    groups = write_rows(tmp_path / "groups.csv", MOODLE_GROUPS)
    zipped = download(tmp_path / "m.zip", {entry.format(nb=f"{FIRST}.ipynb"): b"team A"})
    argv = ["collect", FIRST, str(zipped), "--lms", "moodle", "--roster", str(roster)]
    assert main([*argv, "--groups", str(groups), "--course", str(course)]) == 0
    assert collected(course) == {"s10005": (b"team A", ""), "bo@example.edu": (b"team A", "")}


def test_a_group_submission_without_the_groups_file_is_listed_not_dropped(
    tmp_path, capsys, graded_course
):
    course = graded_course({})
    roster = write_rows(tmp_path / "moodle.csv", MOODLE_ROSTER)
    zipped = download(tmp_path / "m.zip", {f"Team-A_17_assignsubmission_file_{FIRST}.ipynb": b""})
    argv = ["collect", FIRST, str(zipped), "--lms", "moodle", "--roster", str(roster)]
    assert main([*argv, "--course", str(course)]) == 1
    assert "the student 'Team-A' is not in the roster" in capsys.readouterr().out
    assert collected(course) == {}


def test_a_groups_file_without_its_columns_is_refused_in_one_line(tmp_path, capsys, graded_course):
    course = graded_course({})
    groups = write_rows(tmp_path / "groups.csv", [["team", "student"], ["Team-A", "s10005"]])
    zipped = download(tmp_path / "m.zip", {f"x_1_assignsubmission_file_{FIRST}.ipynb": b""})
    argv = ["collect", FIRST, str(zipped), "--lms", "moodle", "--groups", str(groups)]
    assert main([*argv, "--course", str(course)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is not a group set CSV: it needs a group_name column" in line
    assert collected(course) == {}
