"""An LMS's submission download (a zip), collected into nbgrader's submitted/ folder.

Each top-level entry of the download is one student's submission, named by the LMS:

- Canvas: ``<sortable name>_[LATE_|late_]<user id>_<submission id>_<file name>``, where a
  resubmitted file is ``<name>-<n>.ipynb`` or ``<name> (<n>).ipynb``; the user id is the
  roster's ID column.
- Moodle: ``<Full Name>_<participant id>_assignsubmission_file_<file name>`` (or a folder of
  that name holding the file, with "Download submissions in folders"); the full name is the
  roster's First and Last name.

A group's submission (a group assignment) goes to every member of the group, with the groups
file (`rosters.read_groups`): Canvas names it by the member who submitted, Moodle by the group
(``<Group name>_<group id>_assignsubmission_file_…``; before Moodle 4.0, one entry per member,
``<Group name>-<Full Name>_<participant id>_…``). The latest attempt of any member is the
group's.

Only those top-level names say whose a file is: a student's own zip is read for that student's
notebook only, never as other students. The id a name maps to (through the LMS's roster, else
the LMS's own id) is refused when nbgrader could not store it
(`discovery.why_unstorable`); an unsafe entry (a link, a path escaping the folder, a zip too
large) is skipped for its student with a log line, and the class goes on. A late submission is
timestamped one second after the assignment's due date (the LMS's download says that it was
late, not when), so nbgrader's late penalty applies.
"""

from __future__ import annotations

import datetime
import io
import re
import shutil
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from nbgrader.api import Gradebook, MissingEntry

from grader.course import Course, notebook_path
from grader.course.config import LATE_BY_SECONDS
from grader.course.discovery import why_unstorable
from grader.course.layout import EXCHANGE_FILES
from grader.gradebook.config import gradebook_url
from grader.gradebook.rosters import Groups, Roster

CANVAS_NAME = re.compile(
    r"^(?P<name>[^_/]+)_(?P<late>LATE_)?(?P<key>\d+)_\d+_(?P<file>.+)$", re.IGNORECASE
)
MOODLE_NAME = re.compile(r"^(?P<key>.+?)_(?P<participant>\d+)_assignsubmission_\w+?_(?P<file>.*)$")
ATTEMPT = re.compile(r"^(?P<stem>.+?)(?:-(?P<dash>\d+)| \((?P<paren>\d+)\))?$")
MAX_MEMBER_BYTES = 20 << 20  # as a submitted notebook (grader.course.intake)
LATE_BY = datetime.timedelta(seconds=LATE_BY_SECONDS)


@dataclass(frozen=True)
class Named:
    """What an LMS's name of a submitted file says: whose, which file, which attempt."""

    lms_id: str  # Canvas's user id, Moodle's participant id
    person: str  # Moodle's full name (Canvas's roster is matched by user id)
    file: str  # the file's name as the student uploaded it, attempt suffix removed
    attempt: int
    late: bool


def named(name: str, lms: str) -> Named | None:
    """`name` (a top-level entry of the download) as `lms` names submissions; None when it
    is not such a name."""
    found = (CANVAS_NAME if lms == "canvas" else MOODLE_NAME).match(name)
    if not found:
        return None
    path = PurePosixPath(found["file"])
    attempt = ATTEMPT.match(path.stem)
    number = int(attempt["dash"] or attempt["paren"] or 0)
    late = bool(found.groupdict().get("late"))
    if lms == "canvas":
        return Named(found["key"], "", attempt["stem"] + path.suffix, number, late)
    return Named(found["participant"], found["key"], attempt["stem"] + path.suffix, number, late)


@dataclass
class Collected:
    """What a collection did, for the instructor's summary."""

    students: dict[str, str] = field(default_factory=dict)  # id -> the entry collected
    skipped: list[str] = field(default_factory=list)  # "<entry>: why", one per entry left


def collect(
    download: Path,
    assignment: str,
    course: Course,
    lms: str,
    roster: Roster | None = None,
    groups: Groups | None = None,
) -> Collected:
    """Each student's (or group's) latest submission of `assignment` in `download` into the
    course's submitted/<id>/<assignment>/, timestamped after the due date when the LMS says
    late; a group's, for each of its members."""
    done = Collected()
    ids = _ids(roster, lms)
    chosen: dict[tuple[str, ...], tuple[int, str, bytes, bool]] = {}
    with zipfile.ZipFile(download) as archive:
        for entry, data in _top_level(archive, lms, done):
            name = named(entry, lms)
            if name is None:
                done.skipped.append(f"{entry}: not a name {lms} gives a submission")
                continue
            key = name.person or name.lms_id
            students = _recipients(name, roster, ids, groups)
            if students:
                why = next((w for w in map(why_unstorable, students) if w), "")
            else:
                why = "is not in the roster" + (" nor a group of the groups file" if groups else "")
            if why:
                done.skipped.append(f"{entry}: the student {key!r} {why}")
                continue
            if name.file != f"{assignment}.ipynb" and not name.file.endswith(".zip"):
                done.skipped.append(f"{entry}: not {assignment}.ipynb")
                continue
            if name.file.endswith(".zip"):
                data = _own_zip_notebook(data, assignment)
                if data is None:
                    done.skipped.append(f"{entry}: the student's zip holds no {assignment}")
                    continue
            if students not in chosen or name.attempt > chosen[students][0]:
                chosen[students] = (name.attempt, entry, data, name.late)
    due = _due_date(course, assignment)
    for students, (_, entry, data, late) in sorted(chosen.items()):
        for student in students:
            _write(course, student, assignment, data, due + LATE_BY if late and due else None)
            done.students[student] = entry
        if late and not due:
            done.skipped.append(f"{entry}: late, but {assignment} has no due date: not penalized")
    return done


def _recipients(
    name: Named, roster: Roster | None, ids: dict[str, str], groups: Groups | None
) -> tuple[str, ...]:
    """The nbgrader ids an entry named `name` is the submission of: its student's, or with
    groups, everyone in the group it names or its student is in; () when it names no one."""
    key = name.person or name.lms_id
    if groups and key in groups.members:  # Moodle names a group's submission by the group
        return groups.members[key]
    student = name.lms_id if roster is None else ids.get(key) or _group_member(key, ids)
    if not student:
        return ()
    return groups.of(student) if groups else (student,)


def _group_member(key: str, ids: dict[str, str]) -> str | None:
    """The student of a name Moodle before 4.0 gives a group member: ``<Group name>-<Full
    Name>`` (a group's name may hold a '-' too)."""
    return next(
        (ids[key[i + 1 :]] for i, c in enumerate(key) if c == "-" and key[i + 1 :] in ids), None
    )


def _ids(roster: Roster | None, lms: str) -> dict[str, str]:
    """The LMS's key of each roster student -> their nbgrader id."""
    if roster is None:
        return {}
    key = (lambda m: m.lms_id) if lms == "canvas" else (lambda m: m.full_name)
    return {key(m): m.nbgrader_id for m in roster.members}


def _top_level(archive: zipfile.ZipFile, lms: str, done: Collected):
    """(entry name, bytes) of each top-level file of the download, and, for Moodle, of each
    file directly in a top-level folder, named by that folder; unsafe ones are skipped."""
    for info in archive.infolist():
        parts = PurePosixPath(info.filename).parts
        if info.is_dir() or not parts or parts[0] == "__MACOSX":
            continue
        # Moodle's folder <Full Name>_<id>_assignsubmission_file holds the files as uploaded
        entry = parts[0] if len(parts) == 1 else f"{parts[0].removesuffix('_')}_{parts[-1]}"
        unsafe = _unsafe(info, parts) or (
            lms == "canvas" and len(parts) > 1 and "inside a folder, which Canvas never makes"
        )
        if unsafe:
            done.skipped.append(f"{info.filename}: {unsafe}")
            continue
        yield entry, archive.read(info)


def _unsafe(info: zipfile.ZipInfo, parts: tuple[str, ...]) -> str:
    if info.filename.startswith("/") or ".." in parts or "\\" in info.filename:
        return "a path outside the download (skipped)"
    if stat.S_ISLNK(info.external_attr >> 16):
        return "a symbolic link (skipped)"
    if info.file_size > MAX_MEMBER_BYTES:
        return f"over {MAX_MEMBER_BYTES >> 20} MB (skipped)"
    if len(parts) > 2:
        return "nested below a student's folder (skipped)"
    return ""


def _own_zip_notebook(data: bytes, assignment: str) -> bytes | None:
    """The assignment's notebook in a student's own zip, at any depth; other files ignored."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as inner:
            for info in inner.infolist():
                name = PurePosixPath(info.filename).name
                if name == f"{assignment}.ipynb" and not _unsafe(info, ("x", name)):
                    return inner.read(info)
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    return None


def _due_date(course: Course, assignment: str) -> datetime.datetime | None:
    with Gradebook(gradebook_url(course)) as gradebook:
        try:
            return gradebook.find_assignment(assignment).duedate
        except MissingEntry:
            return None


def _write(
    course: Course, student: str, assignment: str, data: bytes, late: datetime.datetime | None
) -> None:
    """The student's notebook as nbgrader's collect leaves it, replacing an earlier copy."""
    target = notebook_path(course.submitted / student, assignment)
    shutil.rmtree(target.parent, ignore_errors=True)
    target.parent.mkdir(parents=True)
    target.write_bytes(data)
    if late is not None:
        (target.parent / EXCHANGE_FILES[0]).write_text(f"{late.isoformat(' ')} UTC")
