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
    bin: Path  # the fresh environment's scripts: python, grader
    site: Path  # its site-packages
    cwd: Path  # a folder outside the checkout

    def run(self, *args: str | Path) -> subprocess.CompletedProcess:
        # nbgrader runs the dependencies' commands (`alembic`) by name: they live beside this
        # interpreter, where pip would have put them in the fresh environment.
        path = os.pathsep.join(
            [str(self.bin), str(Path(sys.executable).parent), os.environ["PATH"]]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | {"PATH": path}
        return subprocess.run(
            [str(a) for a in args], cwd=self.cwd, env=env, capture_output=True, text=True
        )


def _run(*args: str | Path) -> None:
    subprocess.run([str(a) for a in args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    root = tmp_path_factory.mktemp("installed")
    source = shutil.copytree(REPO, root / "checkout", ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", root, source)
    (wheel,) = root.glob("*.whl")
    # The sandbox binds the environment into its private /tmp, creating the folders above it
    # closed to its uid: the environment is made right under /tmp, open to others.
    venv = Path(tempfile.mkdtemp(prefix="course-venv-"))
    venv.chmod(0o755)
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    site = venv / Path(sysconfig.get_path("purelib")).relative_to(sys.prefix)
    # The dependencies (torch, nbgrader...) are this environment's, reached by a .pth line
    # instead of downloaded again. A folder added so is searched, but its own .pth files, among
    # them the editable install's import hook, are never run: the checkout stays out of reach.
    (site / "course-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run(*pip, "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", wheel)
    (root / "elsewhere").mkdir()
    yield Installed(wheel, venv / "bin", site, root / "elsewhere")
    shutil.rmtree(venv)


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
        installed.bin / "python",
        "-c",
        "import grader.checks, grader.config as c; print(grader.checks.__file__, c.RELEASE)",
    )
    assert done.returncode == 0, done.stderr
    for path in map(Path, done.stdout.split()):
        assert path.is_relative_to(installed.site) and not path.is_relative_to(REPO), path


def test_grader_check_runs_the_visible_checks_of_a_student_notebook(installed):
    assignment = assignments()[0]
    notebook = installed.cwd / f"{assignment}.ipynb"
    nbformat.write(PROFILES["ada"].build(assignment), notebook)
    done = installed.run(installed.bin / "grader", "check", notebook)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All visible checks pass." in done.stdout
    for name in exercises_of(source_notebook(assignment)):
        assert f"`{name}`" in done.stdout or name in done.stdout, name


def test_autograde_grades_a_class_from_outside_the_checkout(installed):
    submissions = write_class(installed.cwd / "submissions", {s: PROFILES[s] for s in STUDENTS})
    sandbox = [] if available() else ["--unsafe-no-sandbox"]
    done = installed.run(
        installed.bin / "grader",
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
    exported = installed.run(installed.bin / "grader", "export", "--course", "course")
    assert exported.returncode == 0, exported.stderr
    with (installed.cwd / "grades.csv").open() as grades:
        totals = {row["student_id"]: float(row["total"]) for row in csv.DictReader(grades)}
    expected = {
        s: sum(sum(expected_scores()[(s, a)].values()) for a in assignments()) for s in STUDENTS
    }
    assert totals == expected
    assert expected["ada"] > 0


def test_autograde_without_a_course_source_says_how_to_name_it(installed):
    (installed.cwd / "empty").mkdir(exist_ok=True)
    done = installed.run(installed.bin / "grader", "autograde", "empty", "--course", "nowhere")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--source PATH" in done.stderr, done.stderr
    assert not (installed.cwd / "nowhere").exists()
