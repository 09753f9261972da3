"""Grade a class: every student × notebook in parallel, resumable, recorded in nbgrader's gradebook.

Two phases per submission, pipelined:
1. grade (in worker threads, each driving a runner process): plan, run, judge; the result is
   written atomically to `results/<student>/<assignment>.json`;
2. record (in the main thread only, the gradebook's single writer): nbgrader's `autograde` with
   `InjectResults` in place of `Execute`, then a `.graded` stamp holding the submission's hash.
A re-run skips every submission whose stamp matches its current hash, so an interrupted batch
loses no finished grade and re-grading an unchanged class changes nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

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

from grader.config import assignments, course_config, course_source, use_this_environment
from grader.nbgrader_steps import InjectResults, results_path
from grader.notebook import read_notebook, restore_metadata, source_notebook, submitted_bytes
from grader.sandbox import Sandbox
from grader.submission import DEFAULT_LIMITS, Limits, grade_notebooks


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


@dataclass
class Course:
    """A grading working directory: gradebook, staged submissions, results, feedback."""

    root: Path
    results: Path = field(init=False)
    staged: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.results = self.root / "results"
        self.staged = self.root / "submitted"

    def api(self) -> NbGraderAPI:
        config = course_config(root=self.root, release=self.root / "release")
        config.CourseDirectory.submitted_directory = str(self.staged)
        config.InjectResults.results_dir = str(self.results)
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
        return NbGraderAPI(config=config)


def discover(submissions: Path) -> list[Task]:
    """One task per student folder × assignment: <student>/<assignment>/<assignment>.ipynb."""
    students = sorted(p.name for p in submissions.iterdir() if p.is_dir())
    return [Task(s, a, submissions / s / a / f"{a}.ipynb") for s in students for a in assignments()]


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


def prepare(course: Course) -> None:
    """Put every assignment in the gradebook (nbgrader's generate_assignment), once per source."""
    use_this_environment()
    api = course.api()
    for assignment in assignments():
        source = course_source() / assignment / f"{assignment}.ipynb"
        stamp = course.root / "release" / f".{assignment}.source-sha256"
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        if stamp.is_file() and stamp.read_text() == digest:
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
    graded = grade_notebooks([(t.submission, t.assignment) for t in tasks], seed, limits, sandbox)
    for task, digest, exercises in zip(tasks, digests, graded, strict=True):
        record = {"fingerprint": digest, "exercises": [asdict(e) for e in exercises]}
        path = results_path(course.results, task.student, task.assignment)
        _write_atomically(path, json.dumps(record))
    return digests


def _stage(course: Course, task: Task) -> None:
    """What nbgrader reads: the submission with any stripped nbgrader tags restored, or the
    release stub when there is nothing readable (so the record says 0, not 'needs grading')."""
    target = course.staged / task.student / task.assignment / f"{task.assignment}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        notebook = read_notebook(task.submission)
    except ValueError:
        notebook = read_notebook(course.root / "release" / task.assignment / target.name)
    restore_metadata(notebook, source_notebook(task.assignment))
    nbformat.write(notebook, target)


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
            f"{students_done}/{len(self.left)} students, {self.failed} failed, "
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
) -> list[Outcome]:
    """Grade every submission under `submissions`; returns one outcome per student × notebook."""
    prepare(course)
    api = course.api()
    seed = secrets.randbits(31) if seed is None else seed  # hidden inputs differ every run
    tasks = discover(submissions)
    outcomes: list[Outcome] = []
    todo = []
    for task in tasks:
        stamp = _stamp(course, task)
        if stamp.is_file() and stamp.read_text() == fingerprint(task):
            outcomes.append(Outcome(task, skipped=True))
        else:
            todo.append(task)
    bar = Progress(todo) if progress else None
    by_student: dict[str, list[Task]] = {}
    for task in todo:
        by_student.setdefault(task.student, []).append(task)
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        futures = {
            pool.submit(grade, tasks, course, seed, limits, sandbox): tasks
            for tasks in by_student.values()
        }
        for future in as_completed(futures):
            for outcome in _record_all(futures[future], future, course, api):
                outcomes.append(outcome)
                if bar:
                    bar.advance(outcome)
    return sorted(outcomes, key=lambda o: (o.task.student, o.task.assignment))


def _record_all(tasks: list[Task], future, course: Course, api: NbGraderAPI) -> list[Outcome]:
    """Record each of one student's graded notebooks; a failure is that notebook's alone."""
    try:
        digests = future.result()
    except Exception as error:  # one broken submission never stops the batch
        return [Outcome(t, problem=f"{type(error).__name__}: {error}") for t in tasks]
    outcomes = []
    for task, digest in zip(tasks, digests, strict=True):
        try:
            outcomes.append(record(task, course, api, digest))
        except Exception as error:
            outcomes.append(Outcome(task, problem=f"{type(error).__name__}: {error}"))
    return outcomes


def students(outcomes: Iterable[Outcome]) -> list[str]:
    return sorted({o.task.student for o in outcomes})
