"""Grade a class: every student × notebook in parallel, resumable, recorded in nbgrader's gradebook.

Two phases per submission, pipelined:
1. grade (in worker threads, each driving a runner process): plan, run, judge; the result is
   written atomically to `results/<student>/<assignment>.json`;
2. record (in the main thread only, the gradebook's single writer): nbgrader's `autograde` with
   `InjectResults` in place of `Execute`, then a `.graded` stamp holding the submission's hash.
A re-run skips every submission whose stamp matches its current hash, so an interrupted batch
loses no finished grade and re-grading an unchanged class changes nothing.

A grader fault (a runner that cannot start or read its job, a full disk, a stop) is never a
grade: that submission is not recorded in nbgrader (the gradebook keeps what it held, if
anything) and not stamped, so the next run grades it. One run at a time holds the course
(a lock); SIGINT, SIGTERM and SIGHUP stop it cleanly (`Interrupted`); a gradebook that is gone
while the course says it graded notebooks is refused (`GradebookLost`), never re-created.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import secrets
import shutil
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath

import nbformat
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)
from traitlets.config import Config

import grader.sandbox  # Sandbox is looked up when grading: a test can make it unavailable
from grader.config import (
    EXERCISE_SECONDS,
    assignments,
    course_config,
    course_source,
    use_this_environment,
)
from grader.discovery import student_folders
from grader.nbgrader_steps import InjectResults, results_path
from grader.notebook import (
    read_notebook,
    restore_metadata,
    source_notebook,
    submitted_bytes,
    untag_earlier_copies,
)
from grader.sandbox import Sandbox, SandboxUnavailable
from grader.submission import (
    DEFAULT_LIMITS,
    RUNNERS,
    GraderFault,
    Limits,
    grade_notebooks,
)
from grader.untrusted import read_below

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SANDBOX_PROCESSES = 64  # per sandbox uid: processes and threads a student's code may hold
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


class Refused(RuntimeError):
    """The run cannot start; nothing was changed."""


class CourseBusy(Refused):
    pass


class GradebookLost(Refused):
    pass


class Interrupted(RuntimeError):
    """A stop signal ended the run; what was recorded before it stands, the rest is not graded."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@dataclass(frozen=True)
class Task:
    student: str
    assignment: str
    submission: Path  # may not exist: a missing notebook is graded as such

    @property
    def label(self) -> str:
        return f"{self.student}/{self.assignment}"


@dataclass
class Outcome:
    task: Task
    score: float = 0.0
    max_score: float = 0.0
    problem: str = ""  # why the submission could not be recorded, in plain words
    skipped: bool = False
    grader_fault: bool = False  # the problem is the grader's, not the submission's


@dataclass
class Course:
    """A grading working directory: gradebook, results, feedback; an nbgrader course folder
    (`grader init`) or a folder of its own beside the submissions.

    Students' work is never written to: nbgrader's `autograde` reads, when `grader autograde`
    records, a copy of each submission in `staged/` (its stripped nbgrader tags restored), not
    the course's `submitted/`, which `nbgrader collect` and `release_feedback` own."""

    root: Path
    results: Path = field(init=False)
    staged: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.results = self.root / "results"
        self.staged = self.root / "staged"
        # The runners' job folders: this course's own, in the system's temporary folder (the
        # sandbox shows a job at its own path, so a folder in the course would show the
        # course's path), found again by the next run to remove what a killed one left.
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        self.scratch = Path(tempfile.gettempdir()) / f"grader-scratch-{tag}"
        self.gradebook = self.root / "gradebook.db"

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the course for one run; the kernel releases it when the process dies, however."""
        path = self.root / "autograde.lock"
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise CourseBusy(
                    f"another `grader autograde` is grading {self.root} (it holds {path}); "
                    "wait for it to finish, or stop it"
                ) from None
            yield

    def clean_scratch(self) -> None:
        """Remove job folders a killed run left (students' code and hidden inputs)."""
        shutil.rmtree(self.scratch, ignore_errors=True)
        try:
            self.scratch.mkdir(mode=0o700)
        except OSError as error:
            raise Refused(f"cannot make the scratch folder {self.scratch} ({error})") from None

    def graded_stamps(self) -> list[Path]:
        return sorted(self.results.glob("*/*.graded"))

    def gradebook_problem(self) -> str:
        """What is wrong with the gradebook given what this course has graded ('' if nothing):
        missing, empty, unreadable, or without submissions the stamps say were recorded."""
        stamps = self.graded_stamps()
        if not stamps:
            return ""
        graded = f"{len(stamps)} notebooks were graded into it"
        if not _holds_data(self.gradebook):
            state = "missing" if not self.gradebook.exists() else "empty"
            return f"{self.gradebook} is {state}, but {graded}"
        try:  # mode=rw: never create it; a killed write's hot journal is rolled back
            with closing(sqlite3.connect(f"file:{self.gradebook}?mode=rw", uri=True)) as db:
                recorded = set(
                    db.execute(
                        "SELECT s.student_id, a.name FROM submitted_assignment s "
                        "JOIN assignment a ON s.assignment_id = a.id"
                    )
                )
        except sqlite3.DatabaseError as error:
            return f"{self.gradebook} is unreadable ({error}), but {graded}"
        lost = [p for p in stamps if (p.parent.name, p.stem) not in recorded]
        if lost:
            example = f"{lost[0].parent.name}/{lost[0].stem}"
            return f"{self.gradebook} lacks {len(lost)} of the {graded} (e.g. {example})"
        return ""

    def start_new_gradebook(self) -> None:
        """Set the old gradebook aside (never deleted) and forget every stamp, so that every
        assignment is registered and every submission graded into a new one."""
        if self.gradebook.exists():
            aside = self.gradebook.with_name(f"gradebook.db.lost-{time.strftime('%Y%m%d-%H%M%S')}")
            os.replace(self.gradebook, aside)
        for stamp in [*self.graded_stamps(), *(self.root / "release").glob(".*.source-sha256")]:
            stamp.unlink()

    def config(self) -> Config:
        """nbgrader's settings for this course, as every nbgrader command run in it reads them
        (`grader init` writes an nbgrader_config.py that loads them): nbgrader's folders, one
        gradebook, and `autograde` grading through the course's sandboxed checks."""
        config = course_config(root=self.root, release=self.root / "release")
        config.InjectResults.results_dir = str(self.results)
        config.InjectResults.submissions_dir = str(self.root / "submitted")
        config.Autograde.autograde_preprocessors = [
            InjectResults,
            IgnorePattern,
            ClearMetadataPreprocessor,
            LimitOutput,
            SaveAutoGrades,
            AssignLatePenalties,
            CheckCellMetadata,
        ]
        # Strip hidden-test markers wherever a student pasted them, instead of failing.
        config.ClearHiddenTests.enforce_metadata = False
        config.GenerateFeedback.preprocessors = [
            "nbgrader.preprocessors.ClearHiddenTests",
            "nbgrader.preprocessors.GetGrades",
            "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
        ]
        return config

    def api(self) -> NbGraderAPI:
        """nbgrader for `grader autograde`'s recording: it reads the staged copies, and the
        results just graded are the submission's own."""
        config = self.config()
        config.CourseDirectory.submitted_directory = str(self.staged)
        config.InjectResults.graded_now = True
        return NbGraderAPI(config=config)


def _tasks(submissions: Path, students: Iterable[str]) -> list[Task]:
    # Absolute: recording runs nbgrader, which changes the working directory while others grade.
    root = submissions.resolve()
    return [Task(s, a, root / s / a / f"{a}.ipynb") for s in students for a in assignments()]


def handed_in(task: Task) -> bool:
    """Whether the student handed this assignment in: its folder exists (a link counts, to be
    refused when read); the notebook in it may still be missing or broken."""
    return os.path.lexists(task.submission.parent)


def discover(submissions: Path) -> list[Task]:
    """One task per assignment a student handed in: <student>/<assignment>/<assignment>.ipynb.
    Tool litter is no student, and a folder name nbgrader cannot store is left out (`refused`)."""
    return [t for t in _tasks(submissions, student_folders(submissions)[0]) if handed_in(t)]


def not_handed_in(
    submissions: Path, students: Collection[str] = (), notebooks: Collection[str] = ()
) -> list[Task]:
    """Each student × assignment (of those named, if any) with no folder: nothing to grade,
    and nothing recorded, so that a later `nbgrader collect` of it finds no grade in its way."""
    tasks = _tasks(submissions, student_folders(submissions)[0])
    return [t for t in tasks if not handed_in(t) and _wanted(t, students, notebooks)]


def _wanted(task: Task, students: Collection[str], notebooks: Collection[str]) -> bool:
    return (not students or task.student in students) and (
        not notebooks or task.assignment in notebooks
    )


def refused(submissions: Path) -> list[Outcome]:
    """Every notebook of each student whose folder name nbgrader cannot store: not graded."""
    reasons = student_folders(submissions)[1]
    return [
        Outcome(t, problem=f"not graded: the folder name {reasons[t.student]}; rename it")
        for t in _tasks(submissions, reasons)
    ]


UNJUDGED = {"missing": "no answer", "crash": "crashed", "timeout": "timed out"}


def lost(task: Task, course: Course) -> str:
    """Why a recorded notebook lost points without its answers being judged, in a few words
    ('' when every answer was judged): missing, unreadable, or which exercises crashed, timed
    out or have no answer cell. The student's doing: graded 0 there, and the feedback says why."""
    stored = json.loads(results_path(course.results, task.student, task.assignment).read_text())
    by_cause: dict[str, list[str]] = {}
    for exercise in stored["exercises"]:
        if exercise.get("cause"):
            by_cause.setdefault(exercise["cause"], []).append(exercise["name"])
    if list(by_cause) == ["missing"] and len(by_cause["missing"]) == len(stored["exercises"]):
        try:  # no answer at all: is there a notebook?
            read_notebook(task.submission)
        except ValueError as error:  # "is missing", "is not a readable notebook (…)", a link
            return str(error).removeprefix(f"{task.submission.name} ")
    return "; ".join(f"{UNJUDGED[c]}: {', '.join(names)}" for c, names in by_cause.items())


def fingerprint(task: Task) -> str:
    """The submission's content hash, and the solutions', so a changed answer key regrades."""
    digest = hashlib.sha256()
    try:
        digest.update(submitted_bytes(task.submission))
    except (OSError, ValueError) as error:  # missing or refused: graded as such, stably
        digest.update(f"<{type(error).__name__}: {error}>".encode())
    digest.update((course_source() / task.assignment / f"{task.assignment}.ipynb").read_bytes())
    return digest.hexdigest()


def _stamp(course: Course, task: Task) -> Path:
    return course.results / task.student / f"{task.assignment}.graded"


def _write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def _holds_data(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def prepare(course: Course) -> None:
    """Put every assignment in the gradebook (nbgrader's generate_assignment), once per source."""
    use_this_environment()
    api = course.api()
    for assignment in assignments():
        _stop_point()
        source = course_source() / assignment / f"{assignment}.ipynb"
        stamp = course.root / "release" / f".{assignment}.source-sha256"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if stamp.is_file() and stamp.read_text() == digest and _holds_data(course.gradebook):
            continue
        result = api.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            detail = result.get("error") or result.get("log")
            raise RuntimeError(f"nbgrader could not register {assignment}: {detail}")
        _write_atomically(stamp, digest)


def grade(tasks: list[Task], course: Course, seed: int, limits: Limits, sandbox) -> list[str]:
    """Phase 1 (any thread): grade one student's notebooks together and store each result;
    returns the fingerprints graded, in the order of `tasks`."""
    digests = [fingerprint(t) for t in tasks]
    notebooks = [(t.submission, t.assignment) for t in tasks]
    graded = grade_notebooks(notebooks, seed, limits, sandbox, scratch=course.scratch)
    for task, digest, exercises in zip(tasks, digests, graded, strict=True):
        record = {"fingerprint": digest, "exercises": [asdict(e) for e in exercises]}
        path = results_path(course.results, task.student, task.assignment)
        try:
            _write_atomically(path, json.dumps(record))
        except OSError as error:
            raise GraderFault(f"could not store the result in {path.parent} ({error})") from None
    return digests


def sandboxed(wall_seconds: float = EXERCISE_SECONDS) -> tuple[Sandbox, Limits]:
    """The sandbox and limits student code is graded with; raises SandboxUnavailable."""
    return grader.sandbox.Sandbox(), Limits(wall_seconds=wall_seconds, processes=SANDBOX_PROCESSES)


def grade_submission(root: Path, student: str, assignment: str, submission: Path) -> None:
    """For nbgrader's own `autograde` of the course at `root`: grade `submission` in the sandbox
    as `grader autograde` does, unless the stored result was graded from these very bytes.

    Raises:
        Refused: another run holds the course, or there is no sandbox to grade in.
        GraderFault: the runner failed for the grader's reasons (nothing is stored).
    """
    course, task = Course(root), Task(student, assignment, submission)
    stored = results_path(course.results, student, assignment)
    try:
        if json.loads(stored.read_text())["fingerprint"] == fingerprint(task):
            return
    except (OSError, ValueError, KeyError):
        pass  # no result yet, or one that cannot be trusted: grade
    try:
        sandbox, limits = sandboxed()
    except SandboxUnavailable as error:
        raise Refused(f"cannot grade {student}/{assignment}: {error}") from None
    with course.lock():
        course.clean_scratch()
        try:
            grade([task], course, secrets.randbits(31), limits, sandbox)
        finally:
            shutil.rmtree(course.scratch, ignore_errors=True)


def _stage(course: Course, task: Task) -> None:
    """What nbgrader reads: the submission with any stripped nbgrader tags restored, or the
    release stub when there is nothing readable (so the record says 0, not 'needs grading'),
    with the files nbgrader's exchange keeps beside it (late penalties and `release_feedback`
    read them)."""
    target = course.staged / task.student / task.assignment / f"{task.assignment}.ipynb"
    shutil.rmtree(target.parent, ignore_errors=True)  # nothing left from an earlier copy
    target.parent.mkdir(parents=True)
    try:
        notebook = read_notebook(task.submission)
    except ValueError:
        notebook = read_notebook(course.root / "release" / task.assignment / target.name)
    restore_metadata(notebook, source_notebook(task.assignment))
    untag_earlier_copies(notebook)
    nbformat.write(notebook, target)
    for name in EXCHANGE_FILES:
        kept = _exchange_file(task, name)
        if kept is not None:
            (target.parent / name).write_bytes(kept)


def _exchange_file(task: Task, name: str) -> bytes | None:
    """One of the small files nbgrader's submit and collect keep beside a submission (None when
    absent or not a plain file: a submission from elsewhere has none)."""
    relative = PurePath(*task.submission.parts[-3:-1], name)
    try:
        return read_below(task.submission.parents[2], relative, 4096)
    except (OSError, ValueError):
        return None


def record(task: Task, course: Course, api: NbGraderAPI, digest: str) -> Outcome:
    """Phase 2 (main thread only): nbgrader autograde with the trusted results, then stamp."""
    _stage(course, task)
    result = api.autograde(task.assignment, task.student, force=True, create=True)
    if not result["success"]:
        tail = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
        return Outcome(task, problem=f"nbgrader could not record it: {' '.join(tail)}")
    _write_atomically(_stamp(course, task), digest)
    stored = json.loads(results_path(course.results, task.student, task.assignment).read_text())
    exercises = stored["exercises"]
    return Outcome(
        task,
        score=sum(e["score"] for e in exercises),
        max_score=sum(e["max_score"] for e in exercises),
    )


class Progress:
    """One status line: notebooks and students done, failures, time left (a log line per
    notebook when the output is not a terminal)."""

    def __init__(self, tasks: list[Task], stream=sys.stderr):
        self.left = {}
        for task in tasks:
            self.left[task.student] = self.left.get(task.student, 0) + 1
        self.total, self.done, self.failed = len(tasks), 0, 0
        self.start, self.stream = time.monotonic(), stream

    def advance(self, outcome: Outcome) -> None:
        self.done += 1
        self.failed += bool(outcome.problem)
        self.left[outcome.task.student] -= 1
        students_done = sum(n == 0 for n in self.left.values())
        elapsed = time.monotonic() - self.start
        remaining = elapsed / self.done * (self.total - self.done)
        width = 24
        bar = "#" * (width * self.done // max(self.total, 1))
        line = (
            f"[{bar:<{width}}] {self.done}/{self.total} notebooks, "
            f"{students_done}/{len(self.left)} students, {self.failed} not recorded, "
            f"~{remaining:.0f} s left  ({outcome.task.label})"
        )
        end = "\r" if self.stream.isatty() and self.done < self.total else "\n"
        print(line.ljust(110), end=end, file=self.stream, flush=True)


def autograde(
    submissions: Path,
    course: Course,
    jobs: int | None = None,
    seed: int | None = None,
    limits: Limits = DEFAULT_LIMITS,
    sandbox: Sandbox | None = None,
    progress: bool = True,
    force: bool = False,
    students: Collection[str] = (),
    notebooks: Collection[str] = (),
) -> list[Outcome]:
    """Grade every submission under `submissions`; returns one outcome per student × notebook.

    Args:
        force: grade again what is unchanged since it was recorded; with a lost gradebook, set
            it aside and grade everything into a new one (see `GradebookLost`).
        students, notebooks: grade only these students, only these assignments (default: all).
    Raises:
        CourseBusy: another run holds the course. GradebookLost: see `Course.gradebook_problem`.
        Interrupted: a stop signal came; the finished notebooks are recorded, nothing else.
    """
    with course.lock(), _stop_on_signals():
        problem = course.gradebook_problem()
        if problem and not force:
            raise GradebookLost(
                f"{problem}. Nothing was graded. Restore it from a backup, or grade everything "
                "again into a new gradebook with --force (the old file is kept aside)."
            )
        if problem:
            course.start_new_gradebook()
        course.clean_scratch()
        try:
            prepare(course)
            seed = secrets.randbits(31) if seed is None else seed  # hidden inputs vary per run
            outcomes, todo = refused(submissions), []
            for task in discover(submissions):
                if not _wanted(task, students, notebooks):
                    continue
                unchanged = _stamp(course, task).is_file() and (
                    _stamp(course, task).read_text() == fingerprint(task)
                )
                if unchanged and not force:
                    outcomes.append(Outcome(task, skipped=True))
                else:
                    todo.append(task)
            run = _Run(course, course.api(), jobs, seed, limits, sandbox)
            outcomes += run.grade_and_record(todo, Progress(todo) if progress else None)
            _stop_point()
            return sorted(outcomes, key=lambda o: (o.task.student, o.task.assignment))
        finally:
            shutil.rmtree(course.scratch, ignore_errors=True)


@dataclass
class _Run:
    course: Course
    api: NbGraderAPI
    jobs: int | None
    seed: int
    limits: Limits
    sandbox: Sandbox | None

    def grade_and_record(self, todo: list[Task], bar: Progress | None) -> list[Outcome]:
        """Grade each student's notebooks in worker threads, record them in this one; on a
        stop, record nothing more and wait for the workers, whose runners are being killed."""
        by_student: dict[str, list[Task]] = {}
        for task in todo:
            by_student.setdefault(task.student, []).append(task)
        outcomes = []
        with ThreadPoolExecutor(max_workers=self.jobs or os.cpu_count() or 1) as pool:
            futures = {
                pool.submit(grade, tasks, self.course, self.seed, self.limits, self.sandbox): tasks
                for tasks in by_student.values()
            }
            for future in as_completed(futures):
                if RUNNERS.stopping.is_set():
                    break
                for outcome in _record_all(futures[future], future, self.course, self.api):
                    outcomes.append(outcome)
                    if bar:
                        bar.advance(outcome)
            pool.shutdown(cancel_futures=True)
        return outcomes


def _record_all(tasks: list[Task], future, course: Course, api: NbGraderAPI) -> list[Outcome]:
    """Record each of one student's graded notebooks; a failure is that notebook's alone."""
    try:
        digests = future.result()
    except GraderFault as fault:  # never a grade: not recorded, not stamped, graded next run
        problem = f"not graded: grader error: {fault}"
        return [Outcome(t, problem=problem, grader_fault=True) for t in tasks]
    except Exception as error:  # one broken submission never stops the batch
        return [Outcome(t, problem=f"{type(error).__name__}: {error}") for t in tasks]
    outcomes = []
    for task, digest in zip(tasks, digests, strict=True):
        if RUNNERS.stopping.is_set():  # the rest is graded again by the next run
            break
        try:
            outcomes.append(record(task, course, api, digest))
        except Exception as error:
            outcomes.append(Outcome(task, problem=f"{type(error).__name__}: {error}"))
    return outcomes


_signalled: list[int] = []  # the stop signals received by the run in progress


def _stop_point() -> None:
    """Raise Interrupted if a stop signal came: called where stopping leaves nothing half-done."""
    if _signalled:
        raise Interrupted(_signalled[0])


@contextmanager
def _stop_on_signals() -> Iterator[None]:
    """While grading, a stop signal kills the runners and lets the gradebook write in progress
    finish: raising in the middle of it is not ours to do (nbgrader swallows
    KeyboardInterrupt while recording), so the signal is only noted here and acted on at the
    next `_stop_point`."""
    _signalled.clear()
    RUNNERS.reset()
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are delivered to the main thread only; its caller handles them
        return

    def stop(signum, frame) -> None:
        _signalled.append(signum)
        RUNNERS.stop()

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def students(outcomes: Iterable[Outcome]) -> list[str]:
    return sorted({o.task.student for o in outcomes})
