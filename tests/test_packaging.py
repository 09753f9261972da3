"""The course as a user installs it: a wheel built from this checkout, installed into a fresh
environment and run from a folder outside the checkout, where the editable install cannot help."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from grader.config import REPO, assignments
from grader.demo import PROFILES, expected_scores, write_class
from grader.notebook import exercises_of, source_notebook
from grader.sandbox import available

# Building writes build/ and *.egg-info: the wheel is built from a copy, so the checkout (which
# other tests fingerprint) is never touched.
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
STUDENTS = ("ada", "ben")  # correct everywhere; the untouched release
ANSWER_MARKERS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path  # a fresh environment's interpreter
    packages: Path  # where the wheel was installed: outside that environment
    cwd: Path  # a folder outside the checkout

    def run(self, *args: str | Path) -> subprocess.CompletedProcess:
        # nbgrader runs the dependencies' commands (`alembic`) by name: they live beside this
        # interpreter, where pip would have put them in the fresh environment.
        path = os.pathsep.join(
            [str(self.packages / "bin"), str(Path(sys.executable).parent), os.environ["PATH"]]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PATH": path}
        return subprocess.run(
            [str(a) for a in args], cwd=self.cwd, env=env, capture_output=True, text=True
        )

    def grader(self, *args: str | Path) -> subprocess.CompletedProcess:
        """The wheel's `grader` command, as its console script."""
        return self.run(self.packages / "bin" / "grader", *args)


def _run(*args: str | Path) -> None:
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


def _open_folder(prefix: str) -> Path:
    """A folder right under /tmp, open to others: the sandbox binds what the runner needs into
    its private /tmp, and the folders it creates above a deeper one are closed to its uid."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    return folder


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    """The wheel installed (--target) outside a fresh environment that reaches it by a .pth line,
    so the sandbox must find the course's code where it was installed, not inside sys.prefix."""
    root = tmp_path_factory.mktemp("installed")
    source = shutil.copytree(REPO, root / "checkout", ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", root, source)
    (wheel,) = root.glob("*.whl")
    venv, packages = _open_folder("course-venv-"), _open_folder("course-packages-")
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(
        *pip, "--python", python, "install", "--no-deps", "--no-index", "--target", packages, wheel
    )
    # The dependencies (torch, nbgrader...) are this environment's, not downloaded again. A folder
    # added by a .pth line is searched, but its own .pth files, among them the editable install's
    # import hook, are never run: the checkout stays out of reach.
    site = venv / Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    (site / "course.pth").write_text(f"{packages}\n{sysconfig.get_path('purelib')}\n")
    (root / "elsewhere").mkdir()
    yield Installed(wheel, python, packages, root / "elsewhere")
    shutil.rmtree(venv)
    shutil.rmtree(packages)


def test_the_wheel_holds_every_module_and_the_release_but_no_answer_key(installed):
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        released = [n for n in names if n.endswith(".ipynb")]
        texts = {n: wheel.read(n).decode() for n in released}
    modules = {
        p.relative_to(REPO).as_posix()
        for package in ("grader", "norm_utils")
        for p in (REPO / package).rglob("*.py")
    }
    assert sorted(modules - names) == []
    assert sorted(released) == [f"grader/notebooks/{a}/{a}.ipynb" for a in assignments()]
    assert [n for n in names if "solutions" in n.split("/")] == []
    assert [n for n, text in texts.items() if any(m in text for m in ANSWER_MARKERS)] == []


def test_the_installed_grader_is_the_wheel_not_the_checkout(installed):
    done = installed.run(
        installed.python,
        "-c",
        "import grader.checks, grader.config as c, norm_utils as n;"
        "print(grader.checks.__file__, n.__file__, c.RELEASE)",
    )
    assert done.returncode == 0, done.stderr
    for path in map(Path, done.stdout.split()):
        assert path.is_relative_to(installed.packages) and not path.is_relative_to(REPO), path


def test_grader_check_runs_the_visible_checks_of_a_student_notebook(installed):
    assignment = assignments()[0]
    notebook = installed.cwd / f"{assignment}.ipynb"
    nbformat.write(PROFILES["ada"].build(assignment), notebook)
    done = installed.grader("check", notebook)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All visible checks pass." in done.stdout
    for name in exercises_of(source_notebook(assignment)):
        assert name in done.stdout, name


def test_autograde_grades_a_class_from_outside_the_checkout(installed):
    submissions = write_class(installed.cwd / "submissions", {s: PROFILES[s] for s in STUDENTS})
    sandbox = [] if available() else ["--unsafe-no-sandbox"]
    done = installed.grader(
        "autograde",
        submissions,
        "--course",
        "course",
        "--source",
        REPO / "solutions",
        "--jobs",
        "2",
        *sandbox,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    exported = installed.grader("export", "--course", "course")
    assert exported.returncode == 0, exported.stderr
    with (installed.cwd / "grades.csv").open() as grades:
        rows = list(csv.DictReader(grades))
    (total,) = (column for column in rows[0] if column.startswith("total ("))  # its points
    totals = {row["student_id"]: float(row[total]) for row in rows}
    expected = {
        s: sum(sum(expected_scores()[(s, a)].values()) for a in assignments()) for s in STUDENTS
    }
    assert totals == expected
    assert expected["ada"] > 0


@pytest.mark.parametrize("command", [["autograde", ".", "--course", "nowhere"], ["release"]])
def test_a_command_needing_the_course_source_says_how_to_name_it(installed, command):
    before = sorted(p for p in installed.packages.rglob("*") if "__pycache__" not in p.parts)
    done = installed.grader(*command)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--source PATH" in done.stderr, done.stderr
    assert not (installed.cwd / "nowhere").exists()
    after = sorted(p for p in installed.packages.rglob("*") if "__pycache__" not in p.parts)
    assert after == before
