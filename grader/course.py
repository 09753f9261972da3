"""The one model of the course: course → assignment → notebook → exercise.

The course is nbgrader's: a source (the solution notebooks with their hidden tests, the answer
key), the student release generated from it, and a grading working directory (`Course.root`)
holding the gradebook, the submissions as nbgrader records them (submitted/), what nbgrader makes
of them (autograded/, feedback/) and the grader's own results (results/). An assignment is one
notebook, <assignment>/<assignment>.ipynb, in each of those folders; an exercise is an answer
cell of that notebook with a test cell of its own.

Cells are read with nbgrader's own metadata helpers, and by two conventions of this course: the
locked setup cell (`SETUP_ID`: the imports every answer may rely on) and each exercise's test
cell, tagged with the exercise's name and `TEST_SUFFIX`. An exercise's answer is found by
`answer_cell` alone, for grading as for recording.
"""

from __future__ import annotations

import ast
import fcntl
import hashlib
import json
import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry, SubmittedNotebook
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)
from nbgrader.utils import is_grade, is_solution
from traitlets.config import Config

from grader.config import SOLUTIONS, assignments, course_config

SETUP_ID = "imports"
TEST_SUFFIX = "_tests"


def notebook_path(folder: Path, assignment: str) -> Path:
    """`assignment`'s notebook in `folder` (a source, a release, one student's submissions)."""
    return folder / assignment / f"{assignment}.ipynb"


# --- cells ---------------------------------------------------------------------------------------


def nbgrader_metadata(cell: NotebookNode) -> dict:
    """The cell's nbgrader metadata, which nbgrader.utils's helpers read (empty, and not the
    cell's, for a cell nbgrader does not know)."""
    return cell.metadata.get("nbgrader", {})


def set_nbgrader_metadata(cell: NotebookNode, metadata: dict | None) -> None:
    """Tag `cell` with a copy of `metadata`, or (None) take its nbgrader tag away."""
    if metadata is None:
        cell.metadata.pop("nbgrader", None)
    else:
        cell.metadata["nbgrader"] = dict(metadata)


def grade_id(cell: NotebookNode) -> str:
    """The cell's nbgrader name ('' for a cell nbgrader does not know)."""
    return nbgrader_metadata(cell).get("grade_id", "")


def is_test_cell(cell: NotebookNode) -> bool:
    """An autograded test cell: code that nbgrader grades and the student does not write."""
    return cell.cell_type == "code" and bool(is_grade(cell)) and not is_solution(cell)


def grade_id_of_tests(exercise: str) -> str:
    """The grade_id of `exercise`'s test cell (nbgrader's name for its score)."""
    return exercise + TEST_SUFFIX


def exercise_of_test(test_id: str) -> str:
    """The exercise a test cell's grade_id belongs to ('' when it is not a test cell's)."""
    return test_id.removesuffix(TEST_SUFFIX) if test_id.endswith(TEST_SUFFIX) else ""


def defines(source: str, name: str) -> bool:
    """Whether the cell's top level defines a function or class `name` (by its text, should the
    student's code not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # what a source can make it
        return bool(re.search(rf"^(def|class)\s+{re.escape(name)}\b", source, re.M))
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name for n in tree.body)


def answer_cell(notebook: NotebookNode, name: str) -> NotebookNode | None:
    """Exercise `name`'s answer cell, or None: the code cell tagged `name`, else (an editor
    stripped the tags) a code cell defining `name`. Of several, the last: in Jupyter the cell
    run last defines the name."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    found = [c for c in code if grade_id(c) == name] or [c for c in code if defines(c.source, name)]
    return found[-1] if found else None


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    """A classic mistake the checks recognized in an answer: its name in the checks, and the
    sentence the student's feedback gives it."""

    name: str
    message: str


@dataclass(frozen=True)
class ExerciseResult:
    """What the gradebook, the feedback and the class report need of one exercise: plain
    numbers and text."""

    name: str
    score: float
    max_score: float
    feedback: str
    cause: str = ""  # "missing", "crash" or "timeout": why no output of it could be judged
    diagnoses: tuple[Diagnosis, ...] = ()  # the mistakes recognized, as the feedback names them


@dataclass(frozen=True)
class Results:
    """The grader's decision on one submitted notebook, as results/<student>/<assignment>.json
    keeps it for nbgrader's autograde to record."""

    exercises: list[ExerciseResult]
    fingerprint: str = ""  # of the submission and the source it was graded against
    problem: str = ""  # why the notebook could not be read ("" when it was)

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)

    def by_name(self) -> dict[str, ExerciseResult]:
        return {e.name: e for e in self.exercises}

    def save(self, path: Path) -> None:
        write_atomically(path, json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Results:
        stored = json.loads(path.read_text())
        exercises = [
            ExerciseResult(
                **{**e, "diagnoses": tuple(Diagnosis(**d) for d in e.get("diagnoses", ()))}
            )
            for e in stored["exercises"]
        ]
        return cls(exercises, stored.get("fingerprint", ""), stored.get("problem", ""))


def results_file(results: Path, student: str, assignment: str) -> Path:
    """Where `Results` of a student's notebook are kept in a course's `results` folder."""
    return results / student / f"{assignment}.json"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old text or the new, never a part (a killed run leaves a `.partial`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


# --- a grading working directory -----------------------------------------------------------------


class Refused(RuntimeError):
    """The run cannot start; nothing was changed."""


class CourseBusy(Refused):
    pass


class MissingSource(ValueError):
    """The course source to grade against (the answer key) is not where it was said to be."""


class Layout(NamedTuple):
    """nbgrader's folders of a course folder (its CourseDirectory's source, release, submitted,
    autograded and feedback directories), each named as its field; naming one creates nothing."""

    source: Path  # the course's own source notebooks (`grader init` copies them there)
    release: Path  # what generate_assignment writes
    submitted: Path  # what collect and submit write: <student>/<assignment>/
    autograded: Path
    feedback: Path  # the pages, <student>/<assignment>/<assignment>.html

    @classmethod
    def of(cls, root: Path) -> Layout:
        return cls(*(root / name for name in cls._fields))


def fetched_feedback(home: Path, assignment: str) -> Path:
    """Where nbgrader's fetch_feedback puts a student's feedback on `assignment`, one folder per
    submission's timestamp, in the student's folder `home`."""
    return home / assignment / "feedback"


def checked_source(folder: Path | None) -> Path:
    """The course source in `folder` (None: the checkout's solutions/), resolved.

    Raises MissingSource, in words an instructor can act on, unless the folder holds every
    assignment's source notebook.
    """
    if folder is None and not SOLUTIONS.is_dir():
        raise MissingSource(
            "this installation holds no course source (the solution notebooks): run from a "
            "checkout of the course, or name its solutions/ folder with --source PATH"
        )
    folder = (folder or SOLUTIONS).expanduser().resolve()
    lacking = [f"{a}/{a}.ipynb" for a in assignments() if not notebook_path(folder, a).is_file()]
    if lacking:
        raise MissingSource(
            f"{folder} is not this course's source: it lacks {', '.join(lacking)} "
            "(name the folder holding the solution notebooks, solutions/ in a checkout)"
        )
    return folder


@dataclass
class Course:
    """A grading working directory (gradebook, results, feedback), made if missing: an nbgrader
    course folder (`grader init`) or a folder of its own beside the submissions; and the course
    source its submissions are graded against.

    Students' work is never written to: nbgrader's `autograde` reads, when `grader autograde`
    records, a copy of each submission in `staged/` (its stripped nbgrader tags restored), not
    the course's `submitted/`, which `nbgrader collect` and `release_feedback` own."""

    root: Path
    # Default: the course folder's own source/ (`grader init` made it), else the checkout's.
    source: Path | None = None

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        layout = Layout.of(self.root)
        if self.source is None:
            self.source = layout.source if layout.source.is_dir() else SOLUTIONS
        self.results = self.root / "results"
        self.staged = self.root / "staged"
        self.submitted = layout.submitted
        self.release = layout.release
        self.gradebook = self.root / "gradebook.db"
        self.feedback = layout.feedback
        self.autograded = layout.autograded
        # The runners' job folders: this course's own, in the system's temporary folder (the
        # sandbox shows a job at its own path, so a folder in the course would show the
        # course's path), found again by the next run to remove what a killed one left.
        tag = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        self.scratch = Path(tempfile.gettempdir()) / f"grader-scratch-{tag}"

    # Where each thing of a student × assignment lives.

    def source_notebook(self, assignment: str) -> Path:
        return notebook_path(self.source, assignment)

    def results_file(self, student: str, assignment: str) -> Path:
        return results_file(self.results, student, assignment)

    def stamp(self, student: str, assignment: str) -> Path:
        """Holds the fingerprint of the submission last recorded (see grader.autograde)."""
        return self.results / student / f"{assignment}.graded"

    def staged_notebook(self, student: str, assignment: str) -> Path:
        return notebook_path(self.staged / student, assignment)

    def released_notebook(self, assignment: str) -> Path:
        return notebook_path(self.release, assignment)

    def source_stamp(self, assignment: str) -> Path:
        """Holds the digest of the source last registered in the gradebook."""
        return self.release / f".{assignment}.source-sha256"

    def autograded_notebook(self, student: str, assignment: str) -> Path:
        """nbgrader's record of the submission: the staged notebook, scored and with feedback."""
        return notebook_path(self.autograded / student, assignment)

    def feedback_folder(self, student: str, assignment: str) -> Path:
        """nbgrader's feedback page on the student's notebook, and what release_feedback
        releases with it."""
        return self.feedback / student / assignment

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
        if not holds_data(self.gradebook):
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
        for stamp in [*self.graded_stamps(), *self.release.glob(".*.source-sha256")]:
            stamp.unlink()

    def config(self) -> Config:
        """nbgrader's settings for this course, as every nbgrader command run in it reads them
        (`grader init` writes an nbgrader_config.py that loads them): nbgrader's folders, one
        gradebook, and `autograde` grading through the course's sandboxed checks."""
        from grader.nbgrader_steps import InjectResults  # it reads Results: import late

        config = course_config(root=self.root, source=self.source, release=self.release)
        config.InjectResults.results_dir = str(self.results)
        config.InjectResults.submissions_dir = str(self.submitted)
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

    def cell_scores(self, student: str, assignment: str) -> dict[str, float | None] | None:
        """The gradebook's score of each exercise's test cell in the student's notebook (None:
        not scored), or None when the notebook was never recorded."""
        if not holds_data(self.gradebook):  # nbgrader would create it
            return None
        with Gradebook(f"sqlite:///{self.gradebook}") as gradebook:
            try:
                notebook = gradebook.find_submission_notebook(assignment, assignment, student)
            except MissingEntry:
                return None
            return {
                exercise_of_test(name): score
                for name, (score, _) in cell_grades(notebook).items()
                if exercise_of_test(name)
            }


def cell_grades(notebook: SubmittedNotebook) -> dict[str, tuple[float | None, float]]:
    """Each graded cell's (score, points) in a notebook the gradebook holds, by grade_id: the
    autograder's score, or a TA's where one was given (nbgrader's `Grade.score`)."""
    return {g.name: (g.score, g.max_score) for g in notebook.grades}


def holds_data(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0
