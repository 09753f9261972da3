"""The gradebook's records: each assignment registered once per source, each graded notebook
recorded by nbgrader's own `autograde` (with `InjectResults` in place of `Execute`) and stamped
with its fingerprint, and what the gradebook holds read back.

Recording is the gradebook's single writer's (the main thread only); a batch goes through one
gradebook session (`one_gradebook_session`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Collection, Iterator
from contextlib import closing, contextmanager
from pathlib import Path, PurePath

import jsonschema
import nbformat
import nbgrader.nbgraderformat.common
from nbgrader.api import Gradebook, MissingEntry, SubmittedNotebook
from nbgrader.apps import NbGraderAPI

from grader.course import EXCHANGE_FILES, Course, exercise_of_test, holds_data, write_atomically
from grader.course.config import assignments
from grader.course.intake import Submission, make_inert, read_notebook
from grader.course.untrusted import read_below
from grader.gradebook.config import CONFIG_FILE, gradebook_file, gradebook_url


def register(course: Course, api: NbGraderAPI, assignment: str) -> None:
    """Put `assignment` in the gradebook (nbgrader's generate_assignment), once per source."""
    stamp = course.source_stamp(assignment)
    digest = hashlib.sha256(course.source_notebook(assignment).read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest and _holds_data(course):
        return
    result = api.generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        detail = result.get("error") or result.get("log")
        raise RuntimeError(f"nbgrader could not register {assignment}: {detail}")
    write_atomically(stamp, digest)


def record(course: Course, api: NbGraderAPI, submission: Submission, student: str) -> str:
    """nbgrader autograde of one graded notebook with its trusted results, then its stamp;
    returns why it could not be recorded ('' when it was)."""
    standing = _standing_grades(course, student, submission)
    _stage(course, student, submission)
    result = {"success": False}
    try:
        result = api.autograde(submission.assignment, student, force=True, create=True)
    finally:
        result["success"] = _settle(result["success"])
    if not result["success"]:
        tail = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
        return f"nbgrader could not record it: {' '.join(tail) or 'it rolled part of it back'}"
    _keep_standing(course, student, submission.assignment, standing)
    write_atomically(course.stamp(student, submission.assignment), submission.fingerprint)
    return ""


def _standing_grades(course: Course, student: str, submission: Submission) -> set[str]:
    """The grade cells a person graded on the very notebook recorded again (the same bytes as
    last time): nbgrader's autograde flags every hand-graded cell as needing grading again,
    which is right for a resubmission (the answer may have changed) and wrong for a regrade
    of the same answer."""
    stamp = course.stamp(student, submission.assignment)
    if not (stamp.is_file() and stamp.read_text() == submission.fingerprint):
        return set()
    assignment = submission.assignment
    with Gradebook(gradebook_url(course)) as gradebook:
        try:
            notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:
            return set()
        return {
            g.name
            for g in notebook.grades
            if g.manual_score is not None and not g.needs_manual_grade
        }


def _keep_standing(course: Course, student: str, assignment: str, names: set[str]) -> None:
    if not names:
        return
    with Gradebook(gradebook_url(course)) as gradebook:
        notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        for grade in notebook.grades:
            if grade.name in names:
                grade.needs_manual_grade = False
        gradebook.db.commit()


def _stage(course: Course, student: str, submission: Submission) -> None:
    """What nbgrader reads: the submission as graded (see Submission.recorded), or the release
    stub when there is nothing readable (so the record says 0, not 'needs grading'), with the
    files nbgrader's exchange keeps beside it (late penalties and `release_feedback` read
    them)."""
    target = course.staged_notebook(student, submission.assignment)
    shutil.rmtree(target.parent, ignore_errors=True)  # nothing left from an earlier copy
    target.parent.mkdir(parents=True)
    notebook = submission.recorded
    if notebook is None:
        notebook = read_notebook(course.released_notebook(submission.assignment))
    nbformat.write(make_inert(notebook), target)
    for name in EXCHANGE_FILES:
        kept = _exchange_file(submission.path, name)
        if kept is not None:
            (target.parent / name).write_bytes(kept)


def _exchange_file(submitted: Path, name: str) -> bytes | None:
    """One of the small files nbgrader's submit and collect keep beside a submission (None when
    absent or not a plain file: a submission from elsewhere has none)."""
    relative = PurePath(*submitted.parts[-3:-1], name)
    try:
        return read_below(submitted.parents[2], relative, 4096)
    except (OSError, ValueError):
        return None


# nbgrader's modules that open the gradebook while its `autograde` records one notebook: nine
# times a notebook, each a new engine, schema check and session.
RECORDING_MODULES = (
    "nbgrader.converters.autograde",
    "nbgrader.preprocessors.overwritekernelspec",
    "nbgrader.preprocessors.overwritecells",
    "nbgrader.preprocessors.saveautogrades",
    "nbgrader.preprocessors.latesubmissions",
)


class _OneCommitANotebook:
    """A batch's gradebook session as nbgrader uses it: nbgrader commits after every grade and
    comment it writes, a dozen times a notebook, and each SQLite commit waits for the disk;
    here its commits only flush, and `record` commits once the notebook is recorded (or rolls
    it back). A rollback of nbgrader's own still rolls back, and the notebook is not recorded."""

    def __init__(self, session) -> None:
        self.session = session
        self.rolled_back = False

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def commit(self) -> None:
        self.session.flush()

    def rollback(self) -> None:
        self.session.rollback()
        self.rolled_back = True


class _SharedGradebook:
    """One gradebook as nbgrader's recording code uses it, kept open for the batch: its `close`
    (and the end of a `with`) leaves the notebook's writes for `record` to commit."""

    def __init__(self, gradebook: Gradebook) -> None:
        self._gradebook = gradebook

    def __getattr__(self, name: str):
        return getattr(self._gradebook, name)

    def __enter__(self) -> _SharedGradebook:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        pass


# The batch's session of each database, while one records (the main thread only).
_batch_sessions: dict[str, _OneCommitANotebook] = {}


def _settle(recorded: bool) -> bool:
    """Commit the notebook nbgrader just recorded in the batch's sessions, or roll it back when
    nbgrader failed or rolled part of it back; whether it is recorded."""
    recorded = recorded and not any(s.rolled_back for s in _batch_sessions.values())
    for shared in _batch_sessions.values():
        if recorded:
            shared.session.commit()
        else:
            shared.session.rollback()
        shared.rolled_back = False
    return recorded


@contextmanager
def one_gradebook_session() -> Iterator[None]:
    """While recording a batch (in this thread only), every gradebook nbgrader's `autograde`
    opens is one, opened once per database and course, committed once a notebook."""
    opened: dict[tuple[str, str], Gradebook] = {}
    own: dict[Gradebook, object] = {}  # each gradebook's own session, to close with it

    def shared(
        db_url: str, course_id: str = "default_course", authenticator=None
    ) -> _SharedGradebook:
        if (db_url, course_id) not in opened:
            gradebook = Gradebook(db_url, course_id, authenticator)
            own[gradebook] = gradebook.db
            # One session a database, whatever the course: another would not see the writes
            # of this notebook until they are committed.
            if db_url not in _batch_sessions:
                _batch_sessions[db_url] = _OneCommitANotebook(gradebook.db)
            gradebook.db = _batch_sessions[db_url]
            opened[(db_url, course_id)] = gradebook
        return _SharedGradebook(opened[(db_url, course_id)])

    modules = {importlib.import_module(name): shared for name in RECORDING_MODULES}
    for module in modules:
        modules[module], module.Gradebook = module.Gradebook, shared
    try:
        with _schema_checked_once():
            yield
    finally:
        for module, previous in modules.items():
            module.Gradebook = previous
        _settle(False)  # nothing is left half-recorded
        _batch_sessions.clear()
        for gradebook, session in own.items():
            gradebook.db = session
            gradebook.close()


class _SchemaCheckedOnce:
    """`jsonschema` as nbgrader's cell-metadata check uses it (`jsonschema.validate` only, in
    `nbgrader.nbgraderformat.common`), with the schema itself checked once: `jsonschema.validate`
    checks the schema against its meta-schema before every instance, that is for every graded
    cell of every notebook, twice a notebook (nbgrader's `CheckCellMetadata` runs in both of
    autograde's passes), and that check was most of the metadata check's cost. Each instance is
    still validated in full, and an invalid one raises the same error (`best_match`)."""

    def __init__(self) -> None:
        self._validators: dict[str, object] = {}

    def validate(self, instance, schema) -> None:
        key = json.dumps(schema, sort_keys=True)
        if key not in self._validators:
            cls = jsonschema.validators.validator_for(schema)
            cls.check_schema(schema)
            self._validators[key] = cls(schema)
        error = jsonschema.exceptions.best_match(self._validators[key].iter_errors(instance))
        if error is not None:
            raise error


@contextmanager
def _schema_checked_once() -> Iterator[None]:
    """While recording a batch, nbgrader's cell-metadata check checks its schema once."""
    common = nbgrader.nbgraderformat.common
    previous, common.jsonschema = common.jsonschema, _SchemaCheckedOnce()
    try:
        yield
    finally:
        common.jsonschema = previous


# --- what the gradebook holds --------------------------------------------------------------------


def gradebook_problem(course: Course) -> str:
    """What is wrong with the gradebook given what `course` has graded ('' if nothing):
    missing, empty, unreadable, or without submissions the stamps say were recorded."""
    stamps = course.graded_stamps()
    if not stamps:
        return ""
    graded = f"{len(stamps)} notebooks were graded into it"
    if gradebook_file(course) is None:  # a database server's: its keeping is the server's
        return ""
    if not holds_data(course.gradebook):
        state = "missing" if not course.gradebook.exists() else "empty"
        return f"{course.gradebook} is {state}, but {graded}"
    try:  # mode=rw: never create it; a killed write's hot journal is rolled back
        with closing(sqlite3.connect(f"file:{course.gradebook}?mode=rw", uri=True)) as db:
            recorded = set(
                db.execute(
                    "SELECT s.student_id, a.name FROM submitted_assignment s "
                    "JOIN assignment a ON s.assignment_id = a.id"
                )
            )
    except sqlite3.DatabaseError as error:
        return f"{course.gradebook} is unreadable ({error}), but {graded}"
    lost = [p for p in stamps if (p.parent.name, p.stem) not in recorded]
    if lost:
        example = f"{lost[0].parent.name}/{lost[0].stem}"
        return f"{course.gradebook} lacks {len(lost)} of the {graded} (e.g. {example})"
    return ""


def released(course: Course) -> list[str]:
    """The assignments nbgrader counts as released in `course`: generated into its release/
    folder (`nbgrader generate_assignment`), or in its gradebook."""
    return [
        a
        for a in assignments()
        if course.released_notebook(a).is_file() or a in _registered(course)
    ]


def gradable(course: Course, handed_in: Collection[str] = ()) -> list[str]:
    """The assignments `grader autograde` grades, exports and totals: in an nbgrader course
    folder (one with an nbgrader_config.py), those released there, never another; in a grading
    folder of its own, also those `handed_in`, which it releases itself."""
    found = set(released(course))
    if not (course.root / CONFIG_FILE).is_file():
        found |= set(handed_in)
    return [a for a in assignments() if a in found]


def _registered(course: Course) -> set[str]:
    if gradebook_file(course) is None:  # a database server's
        with Gradebook(gradebook_url(course)) as gradebook:
            return {a.name for a in gradebook.assignments}
    if not holds_data(course.gradebook):  # nbgrader would create it
        return set()
    try:
        with closing(sqlite3.connect(f"file:{course.gradebook}?mode=ro", uri=True)) as db:
            return {name for (name,) in db.execute("SELECT name FROM assignment")}
    except sqlite3.DatabaseError:
        return set()  # gradebook_problem says what is wrong with it


def start_new_gradebook(course: Course) -> None:
    """Set the old gradebook aside (never deleted) and forget every stamp, so that every
    assignment is registered and every submission graded into a new one."""
    if course.gradebook.exists():
        aside = course.gradebook.with_name(f"gradebook.db.lost-{time.strftime('%Y%m%d-%H%M%S')}")
        os.replace(course.gradebook, aside)
    for stamp in [*course.graded_stamps(), *course.release.glob(".*.source-sha256")]:
        stamp.unlink()


def cell_scores(course: Course, student: str, assignment: str) -> dict[str, float | None] | None:
    """The gradebook's score of each exercise's test cell in the student's notebook (None:
    not scored), or None when the notebook was never recorded."""
    if not _holds_data(course):  # nbgrader would create it
        return None
    with Gradebook(gradebook_url(course)) as gradebook:
        try:
            notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:
            return None
        return {
            exercise_of_test(name): score
            for name, (score, _) in cell_grades(notebook).items()
            if exercise_of_test(name)
        }


def _holds_data(course: Course) -> bool:
    """Whether the gradebook may hold anything (a database server's is taken to)."""
    path = gradebook_file(course)
    return path is None or holds_data(path)


def cell_grades(notebook: SubmittedNotebook) -> dict[str, tuple[float | None, float]]:
    """Each graded cell's (score, points) in a notebook the gradebook holds, by grade_id: the
    autograder's score, or a TA's where one was given (nbgrader's `Grade.score`)."""
    return {g.name: (g.score, g.max_score) for g in notebook.grades}


NOT_GRADED, STALE = "not graded", "stale"


def grades_to_review(notebook: SubmittedNotebook) -> dict[str, str]:
    """The graded cells whose score is not a person's verdict on the answer as it stands, by
    grade_id: NOT_GRADED when a person is still to grade it (nbgrader's `needs_manual_grade`,
    and no score but the autograder's none), STALE when a person graded it before the
    notebook was autograded again (nbgrader flags the cell and keeps their `manual_score`)."""
    flagged = [g for g in notebook.grades if g.needs_manual_grade]
    return {
        g.name: NOT_GRADED if g.manual_score is None else STALE
        for g in flagged
        if g.manual_score is not None or g.auto_score is None
    }
