"""README's nbgrader course walk, run once for the whole suite: the one nbgrader cycle the tests
share (tests/test_readme.py checks its end, tests/test_course.py what nbgrader's own commands do
with the course it graded).

Each command of README's walk runs as written, in its folder; in between, what the instructor
does by hand (set the exchange; generate a second assignment, released to no one yet) and what
the students do (fetch, answer as their sample profile, submit). Copies of the folder are kept
as it was before and after `grader autograde`, for the tests that go on from there.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from filelock import FileLock

from grader.course import notebook_path
from grader.course.config import REPO, assignments
from grader.grading.sandbox import available
from grader.release.demo import PROFILES

COURSE_ID = "normalization-course"
BIN = Path(sys.executable).parent
CACHE = ".nbgrader-cache"  # in a student's folder: nbgrader's record of their submissions
FIRST, SECOND = assignments()[:2]
# Who hands in the first assignment, as which sample profile: right, untouched, a classic mistake.
STUDENTS = {"ada": "ada", "ben": "ben", "ivy": "ivy"}
COLLECTED, GRADED, WALKED = "collected", "graded", "walked"  # the folder before, after, at the end
AUTOGRADE_LOG = "autograde.log"  # in GRADED: what `grader autograde` printed
DONE = "done"


def readme_commands(text: str = (REPO / "README.md").read_text()) -> list[list[str]]:
    """Each line of the ```bash blocks in `text` (README), split as the shell would, without
    its comment."""
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    lines = (line for block in blocks for line in block.splitlines())
    return [argv for line in lines if (argv := shlex.split(line, comments=True))]


def section(heading: str) -> str:
    """README's text under `heading`, up to the next heading of any level."""
    text = (REPO / "README.md").read_text()
    return re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#)", text, re.S | re.M)[1]


WALK = readme_commands(section("### An nbgrader course, end to end"))


def nbgrader(*argv: str, cwd: Path, exchange: Path, user: str = "") -> str:
    """One nbgrader command as typed in `cwd` (a student's when `user` is given); its log."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    # As the student `user` would: named (nbgrader's exchange otherwise takes their login), with
    # their own record of what they submitted (otherwise in the login's home, shared by all)
    student = ["--course", COURSE_ID, f"--student={user}", f"--Exchange.cache={cwd / CACHE}"]
    student = student if user else []
    done = subprocess.run(
        [str(BIN / "nbgrader"), *argv, *student, f"--Exchange.root={exchange}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done.stdout + done.stderr


def hand_in(root: Path, exchange: Path, student: str, assignment: str, profile: str) -> None:
    """`student` fetches `assignment`, answers it as the sample student `profile`, submits."""
    home = root / student
    home.mkdir(exist_ok=True)
    nbgrader("fetch_assignment", assignment, cwd=home, exchange=exchange, user=student)
    notebook = PROFILES[profile].build(assignment)
    nbformat.write(notebook, notebook_path(home, assignment))
    nbgrader("submit", assignment, cwd=home, exchange=exchange, user=student)


def copy_of(walked: Path, to: Path) -> Path:
    """A copy of a walk's folder (`walked`: the exchange, the course, the students' folders) at
    `to`, its course's exchange moved with it."""
    shutil.copytree(walked, to, symlinks=True, dirs_exist_ok=True)
    config = to / "course" / "nbgrader_config.py"
    config.write_text(config.read_text().replace(str(walked), str(to)))
    return to


def walk(folder: Path) -> None:
    """README's walk in `folder`/WALKED, with the copies COLLECTED and GRADED beside it."""
    root = folder / WALKED
    root.mkdir(parents=True)
    (root / ".venv").symlink_to(Path(sys.prefix))  # README's commands run `../.venv/bin/...`
    exchange = root / "exchange"
    exchange.mkdir(mode=0o777)
    cwd = root
    for argv in WALK:
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            with (cwd / "nbgrader_config.py").open("a") as config:  # as README asks
                config.write(f"c.Exchange.root = {str(exchange)!r}\n")
            continue
        if argv[1] == "collect":
            for student, profile in STUDENTS.items():
                hand_in(root, exchange, student, FIRST, profile)
        if argv[1] == "autograde":
            shutil.copytree(root, folder / COLLECTED, symlinks=True)
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        if argv[1] == "generate_assignment":
            nbgrader("generate_assignment", SECOND, cwd=cwd, exchange=exchange)
        if argv[1] == "autograde":
            shutil.copytree(root, folder / GRADED, symlinks=True)
            (folder / GRADED / AUTOGRADE_LOG).write_text(done.stdout + done.stderr)
    (folder / DONE).touch()


def walked_once(base: Path) -> Path:
    """The walk's folder under `base`, walked by whichever test process asks first (pytest-xdist
    runs a session fixture once per worker; the lock makes the others wait and read it)."""
    if not available():
        pytest.skip("bubblewrap is not installed: README's autograde refuses to grade")
    if not (BIN / "grader").is_file():
        pytest.skip(f"no `grader` command in {BIN}: README's walk runs it")
    folder = base / "readme-walk"
    with FileLock(f"{folder}.lock"):
        if not (folder / DONE).is_file():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed walk left
            walk(folder)
    return folder
