"""The course as a user installs it: a wheel built from this checkout, installed into a fresh
environment and run from a folder outside the checkout, where the editable install cannot help."""

from __future__ import annotations

import ast
import csv
import inspect
import json
import os
import re
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
from test_no_answers_for_students import _modules, graded_names, reference_lines

import grader.checks
from grader.checks import EXERCISES
from grader.course.config import REPO, assignments
from grader.course.intake import answer_source, exercises_of, setup_code, source_notebook
from grader.grading.sandbox import available, runner_setup
from grader.release.demo import PROFILES, expected_scores, write_class
from grader.release.notebooks import student_wheel
from normcheck import expected

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


def _install(wheel: Path) -> tuple[Path, Path, Path]:
    """`wheel` installed (--target) outside a fresh environment that reaches it by a .pth line:
    (that environment, its interpreter, where the wheel was installed)."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
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
    return venv, python, packages


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[Installed]:
    """The wheel installed outside a fresh environment, so the sandbox must find the course's
    code where it was installed, not inside sys.prefix."""
    root = tmp_path_factory.mktemp("installed")
    source = shutil.copytree(REPO, root / "checkout", ignore=NOT_SOURCE)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run(*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", root, source)
    (wheel,) = root.glob("*.whl")
    venv, python, packages = _install(wheel)
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
        for package in ("grader", "norm_utils", "normcheck")
        for p in (REPO / package).rglob("*.py")
    }
    assert sorted(modules - names) == []
    stored = {p.relative_to(REPO).as_posix() for p in (REPO / "normcheck" / "data").iterdir()}
    assert len(stored) == 2 * len(assignments()) and stored <= names
    assert sorted(released) == [f"grader/notebooks/{a}/{a}.ipynb" for a in assignments()]
    assert [n for n in names if "solutions" in n.split("/")] == []
    assert [n for n, text in texts.items() if any(m in text for m in ANSWER_MARKERS)] == []


def test_the_installed_grader_is_the_wheel_not_the_checkout(installed):
    done = installed.run(
        installed.python,
        "-c",
        "import grader.checks, grader.course.config as c, norm_utils as n;"
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


# --- the students' wheel: what the released notebooks import, and no answer ---------------------


@dataclass(frozen=True)
class StudentInstall:
    wheel: Path
    python: Path  # a fresh environment reaching only the students' wheel and the dependencies

    def run(self, script: str, *args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NBGRADER"))}
        return subprocess.run(
            [str(self.python), "-c", script, *args],
            cwd=self.wheel.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> Iterator[StudentInstall]:
    wheel = student_wheel(tmp_path_factory.mktemp("student"))
    venv, python, packages = _install(wheel)
    yield StudentInstall(wheel, python)
    shutil.rmtree(venv)
    shutil.rmtree(packages)


def _definitions(source: str) -> set[str]:
    """The names of the functions and classes `source` defines, at any depth."""
    nodes = ast.walk(ast.parse(source))
    return {n.name for n in nodes if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def answer_code_names() -> set[str]:
    """Every graded exercise's and reference's name, and the top-level functions and classes of
    the check modules: the known mistakes' implementations, the hidden checks' inputs."""
    check_modules = [m for m in _modules(grader.checks) if hasattr(m, "EXERCISES")][1:]
    bodies = (ast.parse(inspect.getsource(m)).body for m in check_modules)
    code = {n.name for b in bodies for n in b if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    return code | graded_names()


def _wheel_texts(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as archive:
        return {n: archive.read(n).decode() for n in archive.namelist() if n.endswith(".py")}


def test_the_students_wheel_holds_no_grader_reference_known_mistake_or_hidden_check(student):
    with zipfile.ZipFile(student.wheel) as archive:
        names = archive.namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"normcheck", "norm_utils"}
    texts = _wheel_texts(student.wheel)
    defined = {n: _definitions(text) & answer_code_names() for n, text in texts.items()}
    assert {n: d for n, d in defined.items() if d} == {}
    lines = reference_lines()
    assert {
        n: [x for x in lines if x in text]
        for n, text in texts.items()
        if any(x in text for x in lines)
    } == {}
    stored = expected.stored()
    assert sorted(stored) == sorted(EXERCISES)
    for name, exercise in stored.items():  # the visible checks, and nothing of a hidden one
        visible = [(c.description, c.points) for c in EXERCISES[name].checks if not c.hidden]
        assert [(c.rule.description, c.rule.points) for c in exercise.cases] == visible, name


# Run where only the students' wheel is installed: the solution passes, ε outside the square root
# is named (under Validate, where it raises), a stub is not implemented yet and the notebook goes
# on.
STUDENT_SCRIPT = """
import json, os, sys
from normcheck import CheckFailed, check
try:
    import grader
    sys.exit(f"grader is installed: {grader.__path__}")
except ModuleNotFoundError:
    pass
for name, (setup, source) in json.loads(sys.argv[1]).items():
    namespace = {}
    exec(setup, namespace)
    exec(source, namespace)
    check(name, namespace[name])
print("=== mistake")
namespace = {}
exec(sys.argv[2], namespace)
os.environ["NBGRADER_EXECUTION"] = "validate"  # nbgrader's Validate: a wrong answer raises
try:
    check("layer_norm", namespace["layer_norm"])
except CheckFailed as failure:
    print(f"FAILED {failure}")
del os.environ["NBGRADER_EXECUTION"]
print("=== stub")
exec(sys.argv[3], namespace)
check("layer_norm", namespace["layer_norm"])
print("went on")
"""
EPS_OUTSIDE = """
import torch
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    n = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
    dims = tuple(range(-n, 0))
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dims, keepdim=True)
    y = (x - mean) / (var.sqrt() + eps)
    return y if weight is None else y * weight + bias
"""
STUB = """
def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    raise NotImplementedError()
"""


def test_with_only_the_students_wheel_check_passes_names_a_mistake_and_waits_for_a_stub(student):
    answers = {}
    for assignment in assignments():
        notebook = source_notebook(assignment)
        setup = runner_setup(setup_code(notebook))  # without its import of the checks
        answers |= {n: (setup, answer_source(notebook, n)) for n in exercises_of(notebook)}
    done = student.run(STUDENT_SCRIPT, json.dumps(answers), EPS_OUTSIDE, STUB)
    assert done.returncode == 0, done.stderr[-2000:]
    solutions, rest = done.stdout.split("=== mistake\n")
    mistake, stub = rest.split("=== stub\n")
    passed = re.findall(r"^(\w+): (\d+) of \2 visible checks pass \(more checks", solutions, re.M)
    assert sorted(name for name, _ in passed) == sorted(EXERCISES), solutions
    assert mistake.startswith("FAILED layer_norm: ")
    assert "ε is added outside the square root" in mistake
    assert "`layer_norm` is not implemented yet" in stub
    assert stub.rstrip().endswith("went on")


def test_the_students_wheel_is_the_same_bytes_when_built_again(student, tmp_path):
    assert student_wheel(tmp_path).read_bytes() == student.wheel.read_bytes()
