"""An LMS's roster, as the LMS exports it, read as nbgrader ids; and CSV files whose cells a
spreadsheet shows as text, never runs.

- Canvas: the gradebook's CSV export (Grades → Export → Export Entire Gradebook): ``Student``
  ("Last, First"), ``ID`` (Canvas's user id, the one its submission downloads name),
  ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per assignment headed
  ``Name (Canvas id)``, and a ``Points Possible`` row. A student's nbgrader id is their SIS
  Login ID, or their Canvas ID when it is empty.
- Moodle: the gradebook's "Plain text file" export (Grades → Export): ``First name``,
  ``Last name``, ``ID number``, ``Institution``, ``Department``, ``Email address``, then one
  column per grade item headed ``Type: Name (Real)``. A student's nbgrader id is their ID
  number, or their email address when it is empty.

Groups, for group assignments: Canvas's group set CSV (People → Groups → Import → "Download
Course Roster CSV", the format of Canvas's Group Categories import): one row per member,
``group_name`` and the member as ``canvas_user_id`` (Canvas's ID: the roster's), ``login_id``
(the SIS Login ID: an nbgrader id) or ``user_id`` (the SIS User ID). Moodle has no such export:
the same columns, written by hand (``group_name`` as Moodle names the group, ``login_id`` the
nbgrader id), serve for Moodle's group downloads.

`grader roster` writes a roster as the CSV `nbgrader db student import` reads.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# A cell starting with one of these is a formula (or becomes one) when a spreadsheet opens the
# file: such a cell is written with a leading ' (OWASP's "CSV injection" advice).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

CANVAS_IDENTITY = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
CANVAS_TEST_STUDENT = "Student, Test"  # the student view's user, in every Canvas export
MOODLE_IDENTITY = ["First name", "Last name", "ID number", "Email address"]
NBGRADER_ROSTER = ["id", "first_name", "last_name", "email"]  # `nbgrader db student import`
LMSS = ("canvas", "moodle")


def inert(cell: object) -> str:
    """`cell` as text a spreadsheet shows as it is: a would-be formula gets a leading '."""
    text = str(cell)
    return f"'{text}" if text.startswith(FORMULA_STARTS) else text


def write_csv(dest: Path, rows: Iterable[list]) -> None:
    """`rows` as a CSV file, every cell inert."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with dest.open("w", newline="") as handle:
        writer = csv.writer(handle)
        for row in rows:
            writer.writerow([inert(cell) for cell in row])


class RosterError(ValueError):
    """A roster file that is not the LMS's export: one line saying what is wrong."""


@dataclass(frozen=True)
class Member:
    """One student of an LMS's roster."""

    nbgrader_id: str
    lms_id: str  # Canvas's user id; Moodle's ID number or email
    first_name: str
    last_name: str
    email: str
    columns: dict[str, str]  # the roster's identity columns, to be written back unchanged

    @property
    def full_name(self) -> str:
        """As Moodle names a student in its submission downloads."""
        return f"{self.first_name} {self.last_name}"


@dataclass(frozen=True)
class Roster:
    lms: str
    header: list[str]
    members: list[Member]

    def column_of(self, assignment: str) -> str:
        """The LMS's own column for `assignment` (Canvas: ``name (id)``; Moodle: ``Type: name
        (Real)``), or its bare name, which the LMS's import takes as a new assignment."""
        shape = (
            rf"{re.escape(assignment)} \(\d+\)"
            if self.lms == "canvas"
            else rf"[^:]+: {re.escape(assignment)} \([^)]*\)"
        )
        return next((h for h in self.header if re.fullmatch(shape, h)), assignment)

    def by_nbgrader_id(self) -> dict[str, Member]:
        return {m.nbgrader_id: m for m in self.members}


def _read_csv(path: Path, what: str) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows of the CSV file `path` (`what` it is, for the error), headers
    stripped, empty cells ''; raises RosterError."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # Excel's BOM
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = [h.strip() for h in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"cannot read {what} {path}: {error}") from None
    return header, [{k.strip(): v or "" for k, v in row.items() if k} for row in rows]


def read_roster(lms: str, path: Path) -> Roster:
    """The roster `path` as `lms` exports it; raises RosterError."""
    header, rows = _read_csv(path, f"the {lms} roster")
    identity = CANVAS_IDENTITY if lms == "canvas" else MOODLE_IDENTITY
    lacking = [c for c in identity if c not in header]
    if lacking:
        raise RosterError(
            f"{path} is not {lms.capitalize()}'s gradebook export: it lacks the column"
            f"{'s' if len(lacking) > 1 else ''} {', '.join(lacking)}"
        )
    read = _canvas_member if lms == "canvas" else _moodle_member
    members = [m for row in rows if (m := read(row)) is not None]
    return Roster(lms, header, members)


def _canvas_member(row: dict[str, str]) -> Member | None:
    if not row["ID"].strip() or row["Student"].strip() in (CANVAS_POINTS_ROW, CANVAS_TEST_STUDENT):
        return None  # the points row, a posting-policy row, the test student
    last, _, first = row["Student"].partition(", ")
    columns = {c: row[c] for c in CANVAS_IDENTITY}
    login, canvas_id = row["SIS Login ID"].strip(), row["ID"].strip()
    return Member(login or canvas_id, canvas_id, first, last, "", columns)


def _moodle_member(row: dict[str, str]) -> Member | None:
    key = row["ID number"].strip() or row["Email address"].strip()
    if not key:
        return None
    columns = {c: row[c] for c in MOODLE_IDENTITY}
    return Member(key, key, row["First name"], row["Last name"], row["Email address"], columns)


GROUP_MEMBER = ("canvas_user_id", "login_id", "user_id")  # any one names a member


@dataclass(frozen=True)
class Groups:
    """Group name -> its members' nbgrader ids."""

    members: dict[str, tuple[str, ...]]

    def of(self, student: str) -> tuple[str, ...]:
        """Everyone in `student`'s group (`student` alone when in none)."""
        return next((m for m in self.members.values() if student in m), (student,))


def read_groups(path: Path, roster: Roster | None) -> Groups:
    """The groups file `path` (see the module's docstring); a member named by Canvas's ID is
    mapped through the Canvas roster, as its submissions are. Raises RosterError."""
    header, rows = _read_csv(path, "the groups file")
    if not rows or "group_name" not in header or not set(GROUP_MEMBER) & set(header):
        raise RosterError(
            f"{path} is not a group set CSV: it needs a group_name column and one of "
            + ", ".join(GROUP_MEMBER)
        )
    members_of = roster.members if roster else []
    by_canvas_id = {m.lms_id: m.nbgrader_id for m in members_of}
    by_sis_id = {
        m.columns["SIS User ID"]: m.nbgrader_id for m in members_of if m.columns.get("SIS User ID")
    }
    members: dict[str, list[str]] = {}
    for row in rows:
        canvas_id, login, sis = (row.get(c, "").strip() for c in GROUP_MEMBER)
        student = (
            (canvas_id and by_canvas_id.get(canvas_id, "" if roster else canvas_id))
            or login
            or (sis and by_sis_id.get(sis, sis))
        )
        group = row["group_name"].strip()
        if group and student:
            members.setdefault(group, []).append(student)
    return Groups({name: tuple(ids) for name, ids in members.items()})


def nbgrader_roster(roster: Roster) -> list[list[str]]:
    """The rows of the CSV `nbgrader db student import` reads: the roster's students under
    their nbgrader ids, with their names and emails."""
    rows = [[m.nbgrader_id, m.first_name, m.last_name, m.email] for m in roster.members]
    return [NBGRADER_ROSTER, *rows]
