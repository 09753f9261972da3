"""nbgrader plugins for what a learning management system (LMS) gives and takes.

- `LmsCsvExport`, an export plugin: ``nbgrader export --exporter grader.gradebook.lms.LmsCsvExport
  [--to grades.csv]`` writes the gradebook with nbgrader's roster (`grader export` uses it);
  `CanvasCsvExport` and `MoodleCsvExport` (``--CanvasCsvExport.roster=FILE``) write it as
  Canvas's and Moodle's grade imports read it, for the students of the LMS's own roster
  (`grader export --lms canvas|moodle --roster FILE`).
- `ResubmissionCollector`, a zip_collect plugin: ``nbgrader zip_collect ASSIGNMENT
  --collector grader.gradebook.lms.ResubmissionCollector`` reads the file names of an LMS's
  submission download, where a resubmitted notebook is renamed ``01_layer_norm-1.ipynb``,
  ``01_layer_norm-2.ipynb``...: the latest one is the student's submission, and the log says
  which it took over which.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import ExportPlugin, FileNameCollectorPlugin
from traitlets import List, Unicode

from grader.gradebook.downloads import ATTEMPT
from grader.gradebook.rosters import (
    CANVAS_IDENTITY,
    CANVAS_POINTS_ROW,
    MOODLE_IDENTITY,
    read_roster,
    write_csv,
)

ID_COLUMNS = ["student_id", "last_name", "first_name", "email"]


def points_header(name: str, points: float) -> str:
    """An assignment's column, headed with its points as LMS imports read them."""
    return f"{name} ({points:g} pts)"


class _Export(ExportPlugin):
    """What every export shares: the assignments (the gradebook's, i.e. released ones; the
    `assignment` option narrows them) and each student's score after nbgrader's late penalty,
    0 for one not handed in, as in nbgrader's own CSV; every cell written inert
    (`rosters.inert`)."""

    def chosen_assignments(self, gradebook: Gradebook) -> list:
        return [a for a in gradebook.assignments if _chosen(a.name, self.assignment)]

    def dest(self) -> Path:
        return Path(self.to or "grades.csv")


class LmsCsvExport(_Export):
    """One row per student of nbgrader's roster (the gradebook's students, `nbgrader db student
    import` included), in id order: id, last name, first name, email, one column per assignment
    headed ``<assignment> (<points> pts)`` holding the score after nbgrader's late penalty, and
    the total."""

    def export(self, gradebook: Gradebook) -> None:
        assignments = self.chosen_assignments(gradebook)
        students = sorted(
            (s for s in gradebook.students if _chosen(s.id, self.student)), key=lambda s: s.id
        )
        total = sum(a.max_score for a in assignments)
        header = [*ID_COLUMNS, *(points_header(a.name, a.max_score) for a in assignments)]
        rows = [[*header, points_header("total", total)]]
        for student in students:
            scores = [_score(gradebook, a.name, student.id) for a in assignments]
            names = [student.last_name or "", student.first_name or "", student.email or ""]
            rows.append([student.id, *names, *map(_number, scores), _number(sum(scores))])
        write_csv(self.dest(), rows)
        self.log.info("Exported %d students to %s", len(students), self.dest())


class _RosterExport(_Export):
    """An export in an LMS's own import format, one row per student of the LMS's roster (its
    own export, `roster`), matched to nbgrader by id (`grader.gradebook.rosters`); a student
    of the gradebook not in the roster is left out and named in `unmatched`."""

    roster = Unicode("", help="the LMS's gradebook export, its roster").tag(config=True)
    lms = ""
    unmatched = List(Unicode(), help="after `export`: the graded students the roster lacks")

    def export(self, gradebook: Gradebook) -> None:
        roster = read_roster(self.lms, Path(self.roster))
        members = [m for m in roster.members if _chosen(m.nbgrader_id, self.student)]
        assignments = self.chosen_assignments(gradebook)
        columns = [roster.column_of(a.name) for a in assignments]
        rows = self.head(columns, [_number(a.max_score) for a in assignments])
        for member in members:
            scores = [_score(gradebook, a.name, member.nbgrader_id) for a in assignments]
            rows.append([*member.columns.values(), *map(_number, scores)])
        write_csv(self.dest(), rows)
        known = roster.by_nbgrader_id()
        self.unmatched = sorted(
            s.id for s in gradebook.students if s.id not in known and _chosen(s.id, self.student)
        )
        for student in self.unmatched:
            self.log.warning("%s is not in the %s roster: not exported", student, self.lms)

    def head(self, columns: list[str], points: list[str]) -> list[list[str]]:
        raise NotImplementedError


class CanvasCsvExport(_RosterExport):
    """Canvas's gradebook import (Grades → Import): Student, ID, SIS User ID, SIS Login ID and
    Section as the roster has them, one column per assignment named as Canvas names it
    (``name (Canvas id)``; a bare name makes Canvas create the assignment), and the "Points
    Possible" row; no total (Canvas computes its own)."""

    lms = "canvas"

    def head(self, columns: list[str], points: list[str]) -> list[list[str]]:
        blank = [""] * (len(CANVAS_IDENTITY) - 1)
        return [[*CANVAS_IDENTITY, *columns], [CANVAS_POINTS_ROW, *blank, *points]]


class MoodleCsvExport(_RosterExport):
    """Moodle's grade import (Grades → Import → CSV file): First name, Last name, ID number and
    Email address as the roster has them (map "ID number" to useridnumber, or "Email address"
    to useremail), one column per grade item named as the roster's export names it."""

    lms = "moodle"

    def head(self, columns: list[str], points: list[str]) -> list[list[str]]:
        return [[*MOODLE_IDENTITY, *columns]]


EXPORTS = {"nbgrader": LmsCsvExport, "canvas": CanvasCsvExport, "moodle": MoodleCsvExport}


def _chosen(name: str, only: list) -> bool:
    return not only or name in [str(o) for o in only]


def _score(gradebook: Gradebook, assignment: str, student: str) -> float:
    try:
        submission = gradebook.find_submission(assignment, student)
    except MissingEntry:
        return 0.0
    return max(0.0, submission.score - (submission.late_submission_penalty or 0.0))


def _number(value: float) -> str:
    return f"{value:g}"


def attempt(file_id: str) -> tuple[str, int]:
    """`01_layer_norm-2.ipynb` or `01_layer_norm (2).ipynb` -> ("01_layer_norm.ipynb", 2); a
    first submission is attempt 0 (`grader.gradebook.downloads.ATTEMPT`)."""
    stem, extension = os.path.splitext(file_id)
    found = ATTEMPT.match(stem)
    return found["stem"] + extension, int(found["dash"] or found["paren"] or 0)


class ResubmissionCollector(FileNameCollectorPlugin):
    """nbgrader's file-name collector, with an LMS's resubmission suffix understood: of one
    student's files with the same name but for the suffix, the highest attempt is collected
    under the released name and the others are skipped, each named in the log."""

    named_regexp = Unicode(
        r".*/[^/_]+_(?:[Ll][Aa][Tt][Ee]_)?(?P<student_id>[^_/]+)_\d+_(?P<file_id>[^/]+)$",
        help="As nbgrader's FileNameCollectorPlugin; the default reads an LMS download's "
        "`<name>_[LATE_]<student id>_<submission id>_<file name>`",
    ).tag(config=True)

    def collect(self, submitted_file: str) -> dict | None:
        if not self._at_the_top(submitted_file):
            self.log.warning(
                "Skipped %s: inside a folder of the download (only the names the LMS gives at "
                "its top say whose a file is)",
                submitted_file,
            )
            return None
        info = super().collect(submitted_file)
        if not info:
            return info
        released, number = attempt(info["file_id"])
        newer = self._newer_attempt(submitted_file, info["student_id"], released, number)
        if newer:
            self.log.warning(
                "Skipped %s: %s is a later resubmission of %s by %s",
                submitted_file,
                newer,
                released,
                info["student_id"],
            )
            return None
        if number:
            self.log.warning(
                "Collected %s as %s: resubmission %d, the latest of %s by %s",
                submitted_file,
                released,
                number,
                released,
                info["student_id"],
            )
        return {**info, "file_id": released}

    def _at_the_top(self, path: str) -> bool:
        """Whether `path` lies directly in zip_collect's extracted folder (its parent app's), not
        in a folder or a student's own zip inside it, where any name could claim any student."""
        app = self.parent
        if app is None or not hasattr(app, "extracted_directory"):
            return True  # not run by zip_collect: no download to be inside of
        extracted = Path(app._format_collect_path(app.extracted_directory)).resolve()
        return Path(path).resolve().parent == extracted

    def _newer_attempt(self, path: str, student: str, released: str, number: int) -> str:
        """A file beside `path` holding a later attempt of the same student's notebook."""
        for sibling in sorted(Path(path).parent.iterdir()):
            found = super().collect(str(sibling))
            if found and found["student_id"] == student:
                other, later = attempt(found["file_id"])
                if other == released and later > number:
                    return str(sibling)
        return ""
