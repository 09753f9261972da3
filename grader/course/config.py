"""The course's nbgrader configuration, shared by `nbgrader_config.py` and the `grader` CLI."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from traitlets.config import Config

# The folder holding the packages: a checkout (solutions/ and notebooks/ beside them), or the
# site-packages of an installed wheel, which holds neither.
REPO = Path(__file__).resolve().parents[2]
# The student release ships inside the wheel (pyproject.toml maps notebooks/ to grader/notebooks):
# `grader check` reads its exercises and imports cell there. It holds no answers.
_PACKAGED_RELEASE = Path(__file__).resolve().parents[1] / "notebooks"
RELEASE = _PACKAGED_RELEASE if _PACKAGED_RELEASE.is_dir() else REPO / "notebooks"
# The course source graded against unless another is named (`--source`): a checkout's; an
# installed wheel holds none.
SOLUTIONS = REPO / "solutions"

# --- time and resource limits, every one of them ----------------------------------------------
# Seconds of wall-clock time one exercise may run while graded (`grader autograde --timeout`).
EXERCISE_SECONDS = 60.0
# The sample class's looping student waits this long per exercise (`grader demo --timeout`).
DEMO_EXERCISE_SECONDS = 15.0
# What a runner may take beyond its exercises' time (start-up, imports) before it is killed.
RUNNER_GRACE_SECONDS = 60.0
# What the grader gives an exercise beyond its own time before it kills the runner itself (the
# runner's own clean-up of an overrun takes up to 5 s: grader.grading.sandboxed.runner).
EXERCISE_GRACE_SECONDS = 10.0
# Per exercise, in the runner's forked child (grader.grading.grade.Limits).
EXERCISE_MEMORY_MB = 3000  # torch needs ~1 GB of address space to import
EXERCISE_CPU_SECONDS = 60
EXERCISE_FILE_MB = 64
# Per sandbox uid: processes and threads a student's code may hold.
SANDBOX_PROCESSES = 64
SANDBOX_TMP_BYTES = 256 << 20  # the sandbox's private /tmp
# A worker's pre-started runner (grader.grading.prestarted): Python, torch and the imports cells, on
# a loaded machine; and the wait for a killed student's sandbox to be gone, its pipes closed.
PRESTART_SECONDS = 120
PRESTART_KILLED_SECONDS = 10
# A late file of an LMS download is timestamped this long after the due date: the download says
# that it was late, not when, and nbgrader's late penalty needs a time (gradebook/downloads.py).
LATE_BY_SECONDS = 1
# `grader serve`: how often the inbound is looked at when there is nothing to do; the waits
# before grading again after a grader fault; how long the broker and its workers may take to
# answer one request.
POLL_SECONDS = 2.0
RETRY_SECONDS = (5, 15, 60, 300)
BROKER_SOCKET_SECONDS = 5
WORKER_PING_SECONDS = 1.0
# Seconds nbgrader's own Execute may run one cell (`nbgrader autograde`, `nbgrader validate`).
CELL_SECONDS = 60

# --- the hidden inputs' seed --------------------------------------------------------------------
# A test cell's `grade()` reads it when nbgrader executes the notebook itself (default 0).
SEED_VARIABLE = "NORM_COURSE_SEED"


def fresh_seed() -> int:
    """A seed for one grading run: hidden inputs vary from run to run, so none can be learned."""
    return secrets.randbits(31)


def kernel_seed() -> int:
    """The seed of a grading run inside a notebook's kernel (see SEED_VARIABLE)."""
    return int(os.environ.get(SEED_VARIABLE, "0"))


# torch and matplotlib write warnings to stderr, and nbgrader zeroes a test cell with any stderr.
WARNINGS_ON_STDERR = r"(?m)^.*(Warning|warn\(|UserWarning|DeprecationWarning|FutureWarning).*$"


def use_this_environment() -> None:
    """Put this interpreter's bin/ first on PATH: nbgrader runs `alembic` and kernels by name,
    and must find this environment's even when started as .venv/bin/python without activation."""
    bin_dir = str(Path(sys.executable).parent)
    if os.environ.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def assignments(folder: Path = RELEASE) -> list[str]:
    """The assignments in `folder` (default: the student release), one per notebook:
    <assignment>/<assignment>.ipynb."""
    return sorted(p.parent.name for p in folder.glob("*/*.ipynb") if p.stem == p.parent.name)


def course_config(
    root: Path = REPO, db: Path | None = None, release: Path = RELEASE, source: Path = SOLUTIONS
) -> Config:
    """nbgrader settings for a course whose submissions live under `root`, graded against the
    notebooks in `source`.

    The gradebook defaults to `root/gradebook.db`: the grader's working directory, which the
    sandbox never mounts, so no student code can write it.
    """
    c = Config()
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.source_directory = str(source)
    c.CourseDirectory.release_directory = str(release)
    c.CourseDirectory.db_url = f"sqlite:///{db or root / 'gradebook.db'}"
    c.CourseDirectory.course_id = "normalization-course"
    c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
    # A student cannot choose the kernel that grades them: it is always this venv's python3.
    c.Execute.kernel_name = "python3"
    c.Execute.timeout = CELL_SECONDS
    c.OverwriteCells.add_missing_cells = True  # a deleted test cell is put back, not skipped
    c.IgnorePattern.enabled = True
    c.IgnorePattern.pattern = WARNINGS_ON_STDERR
    c.LimitOutput.max_lines = 200
    return c
