"""A course's folders: the course source (the solution notebooks with their hidden tests, the
answer key), the student release generated from it, and a grading working directory
(`Course.root`) holding the gradebook, the submissions as nbgrader records them (submitted/),
what nbgrader makes of them (autograded/, feedback/) and the grader's own results (results/). An
assignment is one notebook, <assignment>/<assignment>.ipynb, in each of those folders.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from grader.course.config import SOLUTIONS, assignments
from grader.course.results import results_file

# The small files nbgrader's exchange keeps beside a submission (late penalties and
# `release_feedback` read them).
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")


def notebook_path(folder: Path, assignment: str) -> Path:
    """`assignment`'s notebook in `folder` (a source, a release, one student's submissions)."""
    return folder / assignment / f"{assignment}.ipynb"


class CannotStart(RuntimeError):
    """The run cannot start; nothing was changed."""


class CourseBusy(CannotStart):
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
            raise CannotStart(f"cannot make the scratch folder {self.scratch} ({error})") from None

    def graded_stamps(self) -> list[Path]:
        return sorted(self.results.glob("*/*.graded"))


def holds_data(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0
