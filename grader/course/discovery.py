"""Which folders of a submissions folder are students, and whether it is laid out as expected.

SUBMISSIONS holds <student>/<assignment>/<assignment>.ipynb (nbgrader's submitted/ layout).
Folder names are data, never patterns: nbgrader matches a student id as a file glob and strips
its surrounding whitespace, so an id it cannot store as given is refused, by name, instead of
being recorded under another student's id (or re-recording the students a pattern matches).
"""

from __future__ import annotations

from pathlib import Path

from grader.course import Layout
from grader.course.config import assignments

EXPECTED = "<student>/<assignment>/<assignment>.ipynb"
TOOL_FOLDERS = {"__MACOSX", "__pycache__"}  # a zip's resource forks, Python's byte code
PATTERN_CHARACTERS = "*?[]"
# An id is letters, digits and these, from a letter or digit on: no markup in the instructor's
# pages (< > & " '), no formula in a spreadsheet (a leading = + - @), no path (/ \ . ..).
ID_PUNCTUATION = "._-@+"


def is_litter(name: str) -> bool:
    """Folders that tools leave (.ipynb_checkpoints, .git, __MACOSX): never students."""
    return name.startswith(".") or name in TOOL_FOLDERS


def why_unstorable(student: str) -> str:
    """Why nbgrader cannot store `student` as the id given ('' when it can)."""
    if student != student.strip():
        return "has leading or trailing whitespace, which nbgrader strips"
    if any(c in PATTERN_CHARACTERS for c in student):
        return f"has pattern characters ({PATTERN_CHARACTERS}), which nbgrader matches as a glob"
    if not student.isprintable():
        return "has a control character (e.g. a newline)"
    if "\\" in student:
        return "has a path separator (\\)"
    if not (student[:1].isalnum() and all(c.isalnum() or c in ID_PUNCTUATION for c in student)):
        return (
            f"is not letters, digits and {' '.join(ID_PUNCTUATION)} from a letter or digit on "
            "(it would be markup or a formula in the pages and files the instructor opens)"
        )
    return ""


def student_folders(submissions: Path) -> tuple[list[str], dict[str, str]]:
    """The student ids under `submissions`, sorted, and those refused with the reason."""
    names = sorted(p.name for p in submissions.iterdir() if p.is_dir() and not is_litter(p.name))
    refused = {name: why for name in names if (why := why_unstorable(name))}
    return [name for name in names if name not in refused], refused


def _holds_assignments(folder: Path) -> bool:
    return any((folder / a).is_dir() for a in assignments())


def layout_problem(submissions: Path, course: Path) -> str:
    """Why `submissions` is not a folder of students to grade into `course`, in one line naming
    the expected layout ('' when it is one)."""
    expected = f"expected {submissions}/{EXPECTED}"
    if not submissions.is_dir():
        what = "is not a folder" if submissions.exists() else "does not exist"
        return f"{submissions} {what} ({expected})"
    inner, outer = submissions.resolve(), course.resolve()
    if any(c in PATTERN_CHARACTERS for c in str(outer)):
        return (
            f"the course folder {outer} has pattern characters ({PATTERN_CHARACTERS}), which "
            "nbgrader matches as a glob: give another --course"
        )
    nbgraders_own = inner == Layout.of(outer).submitted  # read, never written: see autograde.Course
    if not nbgraders_own and (inner.is_relative_to(outer) or outer.is_relative_to(inner)):
        return (
            f"{submissions} and the course folder {course} must not contain one another "
            "(unless it is the course's own submitted/); give another --course"
        )
    folders = [p for p in submissions.iterdir() if p.is_dir() and not is_litter(p.name)]
    named_as_assignment = sorted(p for p in folders if p.name in assignments())
    if named_as_assignment:
        return (
            f"{named_as_assignment[0]} is named after an assignment, not a student: give the "
            f"folder that holds one folder per student ({expected})"
        )
    if any(_holds_assignments(p) for p in folders):
        return ""
    one_deeper = sorted(p for p in folders if any(_holds_assignments(q) for q in p.iterdir()))
    if one_deeper:
        return f"{submissions} holds no student folders, {one_deeper[0]} does: grade that folder"
    if any(submissions.glob("*.ipynb")):
        return f"{submissions} holds notebooks directly, not one folder per student ({expected})"
    return f"{submissions} holds no student folder with an assignment in it ({expected})"
