"""Grade a class: every student × notebook in parallel, resumable, recorded in nbgrader's gradebook.

Two phases per submission, pipelined:
1. grade (in worker threads, each driving a runner process): plan, run, judge; the result is
   written atomically to `results/<student>/<assignment>.json`;
2. record (in the main thread only, the gradebook's single writer; grader.gradebook.records):
   nbgrader's `autograde` with `InjectResults` in place of `Execute`, then a `.graded` stamp
   holding the submission's hash; the whole batch through one gradebook session.
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

import os
import shutil
import signal
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from nbformat.notebooknode import NotebookNode
from nbgrader.apps import NbGraderAPI

import grader.grading.sandbox  # Sandbox is looked up when grading: a test can make it unavailable
from grader.course import UNJUDGED, CannotStart, Course, Results, notebook_path
from grader.course.config import (
    EXERCISE_SECONDS,
    SANDBOX_PROCESSES,
    SOLUTIONS,
    assignments,
    fresh_seed,
    use_this_environment,
)
from grader.course.discovery import student_folders
from grader.course.intake import Submission
from grader.course.intake import fingerprint as notebook_fingerprint
from grader.course.progress import Progress
from grader.gradebook import records
from grader.gradebook.config import recording_api
from grader.gradebook.preprocessor import InjectResults
from grader.grading.grade import (
    DEFAULT_LIMITS,
    RUNNERS,
    GraderFault,
    Limits,
    grade_in_one_runner,
)
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import Sandbox, SandboxUnavailable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class GradebookLost(CannotStart):
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
    seed: int | None = None  # of the hidden inputs it was graded on
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
    Tool litter is no student, and a folder name nbgrader cannot store is left out
    (`misnamed_folders`)."""
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


def misnamed_folders(submissions: Path) -> list[Outcome]:
    """Every notebook of each student whose folder name nbgrader cannot store: not graded."""
    reasons = student_folders(submissions)[1]
    return [
        Outcome(t, problem=f"not graded: the folder name {reasons[t.student]}; rename it")
        for t in _tasks(submissions, reasons)
    ]


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


def register_all(course: Course, names: Collection[str] | None = None) -> None:
    """Put every assignment (or those `names`) in the gradebook, once per source."""
    use_this_environment()
    api = recording_api(course)
    for assignment in assignments() if names is None else sorted(names):
        _stop_point()
        records.register(course, api, assignment)


def grade_and_store(
    tasks: list[Task], course: Course, seed: int, limits: Limits, sandbox
) -> list[Submission]:
    """Phase 1 (any thread): read and grade one student's notebooks together and store each
    result; returns the submissions as read, for phase 2 to record, in the order of `tasks`."""
    submissions = [Submission.read(t.submission, t.assignment, course.source) for t in tasks]
    graded = grade_in_one_runner(submissions, seed, limits, sandbox, scratch=course.scratch)
    for task, submission, exercises in zip(tasks, submissions, graded, strict=True):
        path = course.results_file(task.student, task.assignment)
        try:
            Results(exercises, submission.fingerprint, submission.problem, seed).save(path)
        except OSError as error:
            raise GraderFault(f"could not store the result in {path.parent} ({error})") from None
    return submissions


def sandboxed(
    source: Path = SOLUTIONS, wall_seconds: float = EXERCISE_SECONDS
) -> tuple[Sandbox, Limits]:
    """The sandbox (hiding the answer key `source`) and limits student code is graded with;
    raises SandboxUnavailable."""
    return grader.grading.sandbox.Sandbox(source), sandbox_limits(wall_seconds)


def sandbox_limits(wall_seconds: float = EXERCISE_SECONDS) -> Limits:
    """What each exercise may use in the sandbox."""
    return Limits(wall_seconds=wall_seconds, processes=SANDBOX_PROCESSES)


class GradeThenInject(InjectResults):
    """nbgrader's autograde step for nbgrader's own `autograde` and formgrader's Autograde
    button: the notebook is graded in the sandbox first, unless its stored result was graded
    from these very bytes (`grader autograde`, having just graded it, sets `graded_now`)."""

    def preprocess(self, nb: NotebookNode, resources: dict):
        if not self.graded_now:
            student, assignment = (
                resources["nbgrader"]["student"],
                resources["nbgrader"]["assignment"],
            )
            submission = notebook_path(Path(self.submissions_dir) / student, assignment)
            grade_for_nbgrader(Path(self.results_dir).parent, student, assignment, submission)
        return super().preprocess(nb, resources)


def record(task: Task, course: Course, api: NbGraderAPI, submission: Submission) -> Outcome:
    """Phase 2 (main thread only): nbgrader autograde with the trusted results, then stamp."""
    problem = records.record(course, api, submission, task.student)
    if problem:
        return Outcome(task, problem=problem)
    results = Results.load(course.results_file(task.student, task.assignment))
    return Outcome(task, score=results.score, max_score=results.max_score, seed=results.seed)


def grade_for_nbgrader(root: Path, student: str, assignment: str, submission: Path) -> None:
    """For nbgrader's own `autograde` of the course at `root`: grade `submission` in the sandbox
    as `grader autograde` does, unless the stored result was graded from these very bytes.

    Raises:
        CannotStart: another run holds the course, or there is no sandbox to grade in.
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
        raise CannotStart(f"cannot grade {student}/{assignment}: {error}") from None
    with course.lock():
        course.clean_scratch()
        try:
            grade_and_store([task], course, fresh_seed(), limits, sandbox)
        finally:
            shutil.rmtree(course.scratch, ignore_errors=True)


class BatchProgress(Progress):
    """The batch's progress: notebooks recorded, students done, notebooks not recorded."""

    def __init__(self, tasks: list[Task]) -> None:
        super().__init__("autograde", len(tasks), "notebooks")
        self.left = Counter(task.student for task in tasks)
        self.failed = 0

    def recorded(self, outcome: Outcome) -> None:
        self.left[outcome.task.student] -= 1
        self.failed += bool(outcome.problem)
        students = f"{sum(n == 0 for n in self.left.values())}/{len(self.left)} students"
        self.advance(outcome.task.label, f"{students}, {self.failed} not recorded")


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
        CourseBusy: another run holds the course. GradebookLost: see `records.gradebook_problem`.
        Interrupted: a stop signal came; the finished notebooks are recorded, nothing else.
        SandboxUnavailable: the sandbox's runner cannot start; nothing was graded.
    """
    if isinstance(sandbox, Sandbox):  # a no-op unless made with wait=False
        sandbox.check_runner_starts()
    with course.lock(), _stop_on_signals():
        problem = records.gradebook_problem(course)
        if problem and not force:
            raise GradebookLost(
                f"{problem}. Nothing was graded. Restore it from a backup, or grade everything "
                "again into a new gradebook with --force (the old file is kept aside)."
            )
        if problem:
            records.start_new_gradebook(course)
        course.clean_scratch()
        try:
            handed = discover(submissions)
            released = records.gradable(course, {t.assignment for t in handed})
            register_all(course, released)
            # A regrade of named students draws each notebook's hidden inputs as last time.
            reproduce = force and bool(students) and seed is None
            seed = fresh_seed() if seed is None else seed
            outcomes, todo = misnamed_folders(submissions), []
            for task in handed:
                if task.assignment not in released or not _wanted(task, students, notebooks):
                    continue  # an assignment never released is not graded (records.gradable)
                stamp = course.stamp(task.student, task.assignment)
                unchanged = stamp.is_file() and stamp.read_text() == fingerprint(task, course)
                if unchanged and not force:
                    outcomes.append(Outcome(task, skipped=True))
                else:
                    todo.append(task)
            seeds = {t: _recorded_seed(course, t) if reproduce else None for t in todo}
            seeds = {t: seed if s is None else s for t, s in seeds.items()}
            run = _Run(course, recording_api(course), jobs, seeds, limits, sandbox)
            bar = BatchProgress(todo) if progress else nullcontext()
            with prestarted(sandbox, course.scratch), records.one_gradebook_session(), bar:
                outcomes += run.grade_and_record(todo, bar if progress else None)
            _stop_point()
            return sorted(outcomes, key=lambda o: (o.task.student, o.task.assignment))
        finally:
            shutil.rmtree(course.scratch, ignore_errors=True)


def _recorded_seed(course: Course, task: Task) -> int | None:
    """The seed `task`'s recorded result was graded with (None: none recorded)."""
    try:
        return Results.load(course.results_file(task.student, task.assignment)).seed
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class _Run:
    course: Course
    api: NbGraderAPI
    jobs: int | None
    seeds: dict[Task, int]  # each task's hidden inputs' seed
    limits: Limits
    sandbox: Sandbox | None

    def grade_and_record(self, todo: list[Task], bar: BatchProgress | None) -> list[Outcome]:
        """Grade each student's notebooks in worker threads, record them in this one; on a
        stop, record nothing more and wait for the workers, whose runners are being killed."""
        by_student: dict[tuple[str, int], list[Task]] = {}
        for task in todo:  # a student's notebooks together, each with its seed
            by_student.setdefault((task.student, self.seeds[task]), []).append(task)
        outcomes = []
        with ThreadPoolExecutor(max_workers=self.jobs or os.cpu_count() or 1) as pool:
            futures = {
                pool.submit(
                    grade_and_store, tasks, self.course, seed, self.limits, self.sandbox
                ): tasks
                for (_, seed), tasks in by_student.items()
            }
            for future in as_completed(futures):
                if RUNNERS.stopping.is_set():
                    break
                # Popped: a student's notebooks, as read, are kept no longer than recorded.
                tasks = futures.pop(future)
                for outcome in _record_all(tasks, future, self.course, self.api):
                    outcomes.append(outcome)
                    if bar:
                        bar.recorded(outcome)
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
