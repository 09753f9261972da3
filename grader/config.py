"""The course's nbgrader configuration, shared by `nbgrader_config.py` and the `grader` CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traitlets.config import Config

# The folder holding the packages: a checkout (solutions/ and notebooks/ beside them), or the
# site-packages of an installed wheel, which holds neither.
REPO = Path(__file__).resolve().parents[1]
# The student release ships inside the wheel (pyproject.toml maps notebooks/ to grader/notebooks):
# `grader check` reads its exercises and imports cell there. It holds no answers.
_PACKAGED_RELEASE = Path(__file__).resolve().parent / "notebooks"
RELEASE = _PACKAGED_RELEASE if _PACKAGED_RELEASE.is_dir() else REPO / "notebooks"
_source = REPO / "solutions"

# Seconds of wall-clock time one exercise may run while graded (`grader autograde --timeout`).
EXERCISE_SECONDS = 60.0

# torch and matplotlib write warnings to stderr, and nbgrader zeroes a test cell with any stderr.
WARNINGS_ON_STDERR = r"(?m)^.*(Warning|warn\(|UserWarning|DeprecationWarning|FutureWarning).*$"


def use_this_environment() -> None:
    """Put this interpreter's bin/ first on PATH: nbgrader runs `alembic` and kernels by name,
    and must find this environment's even when started as .venv/bin/python without activation."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


class MissingSource(ValueError):
    """The course source to grade against (the answer key) is not where it was said to be."""


def assignments(folder: Path = RELEASE) -> list[str]:
    """The assignments in `folder` (default: the student release), one per notebook:
    <assignment>/<assignment>.ipynb."""
    return sorted(p.parent.name for p in folder.glob("*/*.ipynb") if p.stem == p.parent.name)


def use_source(folder: Path | None) -> Path:
    """Grade against the course source in `folder` (None: the checkout's solutions/) from now on.

    Raises MissingSource, in words an instructor can act on, unless the folder holds every
    assignment's source notebook.
    """
    global _source
    if folder is None and not _source.is_dir():
        raise MissingSource(
            "this installation holds no course source (the solution notebooks): run from a "
            "checkout of the course, or name its solutions/ folder with --source PATH"
        )
    folder = (folder or _source).expanduser().resolve()
    lacking = [f"{a}/{a}.ipynb" for a in assignments() if not (folder / a / f"{a}.ipynb").is_file()]
    if lacking:
        raise MissingSource(
            f"{folder} is not this course's source: it lacks {', '.join(lacking)} "
            "(name the folder holding the solution notebooks, solutions/ in a checkout)"
        )
    _source = folder
    return folder


def course_source() -> Path:
    """The folder of nbgrader source notebooks (solutions and hidden tests) graded against: the
    one given to `use_source`, else the checkout's solutions/."""
    return _source


def course_config(root: Path = REPO, db: Path | None = None, release: Path = RELEASE) -> Config:
    """nbgrader settings for a course whose submissions live under `root`.

    The gradebook defaults to `root/gradebook.db`: the grader's working directory, which the
    sandbox never mounts, so no student code can write it.
    """
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = str(course_source())
    c.CourseDirectory.release_directory = str(release)
    c.CourseDirectory.db_url = f"sqlite:///{db or root / 'gradebook.db'}"
    c.CourseDirectory.course_id = "normalization-course"
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    # A student cannot choose the kernel that grades them: it is always this venv's python3.
    c.Execute.kernel_name = "python3"
    c.Execute.timeout = 60  # seconds per cell
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back, not skipped
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = WARNINGS_ON_STDERR
    c.LimitOutput.max_lines = 200
    return c
