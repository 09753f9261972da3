"""The course's nbgrader configuration, shared by `nbgrader_config.py` and the `grader` CLI."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from traitlets.config import Config

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "solutions"
RELEASE = REPO / "notebooks"

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


def assignments() -> list[str]:
    """One assignment per notebook: solutions/<assignment>/<assignment>.ipynb."""
    return sorted(p.parent.name for p in SOLUTIONS.glob("*/*.ipynb"))


def course_config(root: Path = REPO, db: Path | None = None, release: Path = RELEASE) -> Config:
    """nbgrader settings for a course whose submissions live under `root`.

    The gradebook defaults to `root/gradebook.db`: the grader's working directory, which the
    sandbox never mounts, so no student code can write it.
    """
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = str(SOLUTIONS)
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
