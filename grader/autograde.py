"""Grade a class: every student × notebook in parallel, resumable, recorded in nbgrader's gradebook.

Two phases per submission, pipelined:
1. grade (in worker threads, each driving a runner process): plan, run, judge; the result is
   written atomically to `results/<student>/<assignment>.json`;
2. record (in the main thread only, the gradebook's single writer): nbgrader's `autograde` with
   `InjectResults` in place of `Execute`, then a `.graded` stamp holding the submission's hash;
   the whole batch through one gradebook session (`one_gradebook_session`).
Each worker's runners are forked from a pre-started one (grader.grading.prestarted), graded as root.
A re-run skips every submission whose stamp matches its current hash, so an interrupted batch
loses no finished grade and re-grading an unchanged class changes nothing.

A grader fault (a runner that cannot start or read its job, a full disk, a stop) is never a
grade: that submission is not recorded in nbgrader (the gradebook keeps what it held, if
anything) and not stamped, so the next run grades it. One run at a time holds the course
(a lock); SIGINT, SIGTERM and SIGHUP stop it cleanly (`Interrupted`); a gradebook that is gone
while the course says it graded notebooks is refused (`GradebookLost`), never re-created.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePath

import nbformat
from nbgrader.api import Gradebook
from nbgrader.apps import NbGraderAPI

import grader.grading.sandbox  # Sandbox is looked up when grading: a test can make it unavailable
from grader.course.config import (
    EXERCISE_SECONDS,
    SANDBOX_PROCESSES,
    SOLUTIONS,
    assignments,
    fresh_seed,
    use_this_environment,
)
from grader.course.discovery import student_folders
from grader.course.intake import Submission, read_notebook
from grader.course.intake import fingerprint as notebook_fingerprint
from grader.course.layout import (
    Course,
    Refused,
    Results,
    holds_data,
    notebook_path,
    write_atomically,
)
from grader.course.untrusted import read_below
from grader.grading.grade import (
    DEFAULT_LIMITS,
    RUNNERS,
    GraderFault,
    Limits,
    grade_submissions,
)
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import Sandbox, SandboxUnavailable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


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


def _tasks(submissions: Path, students: Iterable[str]) -> list[Task]:
    # Absolute: recording runs nbgrader, which changes the working directory while others grade.
    root = submissions.resolve()
    return [Task(s, a, notebook_path(root / s, a)) for s in students for a in assignments()]


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
    results = Results.load(course.results_file(task.student, task.assignment))
    if results.problem:  # no notebook to judge: "is missing", "is not a readable notebook (…)"
        return results.problem.removeprefix(f"{task.submission.name} ")
    by_cause: dict[str, list[str]] = {}
    for exercise in results.exercises:
        if exercise.cause:
            by_cause.setdefault(exercise.cause, []).append(exercise.name)
    return "; ".join(f"{UNJUDGED[c]}: {', '.join(names)}" for c, names in by_cause.items())


def fingerprint(task: Task, course: Course) -> str:
    """The submission's content hash, and its source's, so a changed answer key regrades."""
    return notebook_fingerprint(task.submission, course.source_notebook(task.assignment))


def prepare(course: Course) -> None:
    """Put every assignment in the gradebook (nbgrader's generate_assignment), once per source."""
    use_this_environment()
    api = course.api()
    for assignment in assignments():
        _stop_point()
        stamp = course.source_stamp(assignment)
        digest = hashlib.sha256(course.source_notebook(assignment).read_bytes()).hexdigest()
        if stamp.is_file() and stamp.read_text() == digest and holds_data(course.gradebook):
            continue
        result = api.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            detail = result.get("error") or result.get("log")
            raise RuntimeError(f"nbgrader could not register {assignment}: {detail}")
        write_atomically(stamp, digest)


def grade(
    tasks: list[Task], course: Course, seed: int, limits: Limits, sandbox
) -> list[Submission]:
    """Phase 1 (any thread): read and grade one student's notebooks together and store each
    result; returns the submissions as read, for phase 2 to record, in the order of `tasks`."""
    submissions = [Submission.read(t.submission, t.assignment, course.source) for t in tasks]
    graded = grade_submissions(submissions, seed, limits, sandbox, scratch=course.scratch)
    for task, submission, exercises in zip(tasks, submissions, graded, strict=True):
        path = course.results_file(task.student, task.assignment)
        try:
            Results(exercises, submission.fingerprint, submission.problem).save(path)
        except OSError as error:
            raise GraderFault(f"could not store the result in {path.parent} ({error})") from None
    return submissions


def sandboxed(
    source: Path = SOLUTIONS, wall_seconds: float = EXERCISE_SECONDS
) -> tuple[Sandbox, Limits]:
    """The sandbox (hiding the answer key `source`) and limits student code is graded with;
    raises SandboxUnavailable."""
    limits = Limits(wall_seconds=wall_seconds, processes=SANDBOX_PROCESSES)
    return grader.grading.sandbox.Sandbox(source), limits


def grade_submission(root: Path, student: str, assignment: str, submission: Path) -> None:
    """For nbgrader's own `autograde` of the course at `root`: grade `submission` in the sandbox
    as `grader autograde` does, unless the stored result was graded from these very bytes.

    Raises:
        Refused: another run holds the course, or there is no sandbox to grade in.
        GraderFault: the runner failed for the grader's reasons (nothing is stored).
    """
    course, task = Course(root), Task(student, assignment, submission)
    try:
        stored = Results.load(course.results_file(student, assignment))
        if stored.fingerprint == fingerprint(task, course):
            return
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no result yet, or one that cannot be trusted: grade
    try:
        sandbox, limits = sandboxed(course.source)
    except SandboxUnavailable as error:
        raise Refused(f"cannot grade {student}/{assignment}: {error}") from None
    with course.lock():
        course.clean_scratch()
        try:
            grade([task], course, fresh_seed(), limits, sandbox)
        finally:
            shutil.rmtree(course.scratch, ignore_errors=True)


def _stage(course: Course, task: Task, submission: Submission) -> None:
    """What nbgrader reads: the submission as graded (see Submission.recorded), or the release
    stub when there is nothing readable (so the record says 0, not 'needs grading'), with the
    files nbgrader's exchange keeps beside it (late penalties and `release_feedback` read
    them)."""
    target = course.staged_notebook(task.student, task.assignment)
    shutil.rmtree(target.parent, ignore_errors=True)  # nothing left from an earlier copy
    target.parent.mkdir(parents=True)
    notebook = submission.recorded
    if notebook is None:
        notebook = read_notebook(course.released_notebook(task.assignment))
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


def record(task: Task, course: Course, api: NbGraderAPI, submission: Submission) -> Outcome:
    """Phase 2 (main thread only): nbgrader autograde with the trusted results, then stamp."""
    _stage(course, task, submission)
    result = api.autograde(task.assignment, task.student, force=True, create=True)
    if not result["success"]:
        tail = (result.get("error") or result.get("log") or "").strip().splitlines()[-1:]
        return Outcome(task, problem=f"nbgrader could not record it: {' '.join(tail)}")
    write_atomically(course.stamp(task.student, task.assignment), submission.fingerprint)
    results = Results.load(course.results_file(task.student, task.assignment))
    return Outcome(task, score=results.score, max_score=results.max_score)


# nbgrader's modules that open the gradebook while its `autograde` records one notebook: nine
# times a notebook, each a new engine, schema check and session.
RECORDING_MODULES = (
    "nbgrader.converters.autograde",
    "nbgrader.preprocessors.overwritekernelspec",
    "nbgrader.preprocessors.overwritecells",
    "nbgrader.preprocessors.saveautogrades",
    "nbgrader.preprocessors.latesubmissions",
)


class _Kept:
    """One gradebook as nbgrader's recording code uses it, kept open for the batch: its `close`
    (and the end of a `with`) only ends the transaction, as closing its session would."""

    def __init__(self, gradebook: Gradebook) -> None:
        self._gradebook = gradebook

    def __getattr__(self, name: str):
        return getattr(self._gradebook, name)

    def __enter__(self) -> _Kept:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._gradebook.db.rollback()  # what is committed stays; what is not is dropped


@contextmanager
def one_gradebook_session() -> Iterator[None]:
    """While recording a batch (in this thread only), every gradebook nbgrader's `autograde`
    opens is one, opened once per database and course."""
    opened: dict[tuple[str, str], Gradebook] = {}

    def kept(db_url: str, course_id: str = "default_course", authenticator=None) -> _Kept:
        if (db_url, course_id) not in opened:
            opened[(db_url, course_id)] = Gradebook(db_url, course_id, authenticator)
        return _Kept(opened[(db_url, course_id)])

    modules = {importlib.import_module(name): kept for name in RECORDING_MODULES}
    for module in modules:
        modules[module], module.Gradebook = module.Gradebook, kept
    try:
        yield
    finally:
        for module, previous in modules.items():
            module.Gradebook = previous
        for gradebook in opened.values():
            gradebook.close()


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
            seed = fresh_seed() if seed is None else seed
            outcomes, todo = refused(submissions), []
            for task in discover(submissions):
                if not _wanted(task, students, notebooks):
                    continue
                stamp = course.stamp(task.student, task.assignment)
                unchanged = stamp.is_file() and stamp.read_text() == fingerprint(task, course)
                if unchanged and not force:
                    outcomes.append(Outcome(task, skipped=True))
                else:
                    todo.append(task)
            run = _Run(course, course.api(), jobs, seed, limits, sandbox)
            with prestarted(sandbox, course.scratch), one_gradebook_session():
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
                # Popped: a student's notebooks, as read, are kept no longer than recorded.
                tasks = futures.pop(future)
                for outcome in _record_all(tasks, future, self.course, self.api):
                    outcomes.append(outcome)
                    if bar:
                        bar.advance(outcome)
            pool.shutdown(cancel_futures=True)
        return outcomes


def _record_all(tasks: list[Task], future, course: Course, api: NbGraderAPI) -> list[Outcome]:
    """Record each of one student's graded notebooks; a failure is that notebook's alone."""
    try:
        submissions = future.result()
    except GraderFault as fault:  # never a grade: not recorded, not stamped, graded next run
        problem = f"not graded: grader error: {fault}"
        return [Outcome(t, problem=problem, grader_fault=True) for t in tasks]
    except Exception as error:  # one broken submission never stops the batch
        return [Outcome(t, problem=f"{type(error).__name__}: {error}") for t in tasks]
    outcomes = []
    for task, submission in zip(tasks, submissions, strict=True):
        if RUNNERS.stopping.is_set():  # the rest is graded again by the next run
            break
        try:
            outcomes.append(record(task, course, api, submission))
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
