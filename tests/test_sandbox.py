"""The sandbox runs the grader's Python wherever it lives, and refuses, naming the folder and the
fix, when its runner cannot start (instead of scoring everyone 0).

What the sandbox keeps out is tested by the attacks in test_adversarial.py; that it changes no
honest score, in test_grading.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

import grader.grading.sandbox
from grader.course import ExerciseResult, answer_cell, notebook_path
from grader.course.config import REPO, SOLUTIONS
from grader.course.intake import Submission
from grader.grading.grade import grade_in_one_runner
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import (
    RUNNER_MODULE,
    Sandbox,
    SandboxUnavailable,
    _closed_to_others,
    available,
    symlinks_met,
)

ORDINARY_USER = 4242  # no passwd entry is needed
needs_bwrap = pytest.mark.skipif(not available(), reason="bubblewrap is not installed")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root can drop to another uid")

# One notebook graded in the sandbox, by whatever interpreter runs this.
GRADE_ONE = """
from grader.course.config import SOLUTIONS
from grader.course import notebook_path
from grader.grading.sandbox import Sandbox
from grader.grading.grade import grade_notebook_file

path = notebook_path(SOLUTIONS, "01_layer_norm")
results = grade_notebook_file(path, "01_layer_norm", seed=0, sandbox=Sandbox())
print(sum(r.score for r in results), "/", sum(r.max_score for r in results))
"""


def make_venv(folder: Path, sys_path: list[str], base: str = sys.executable) -> Path:
    """A virtualenv at `folder` (its python a link to the base interpreter, as venv makes it)
    whose packages are this environment's, reached through a .pth file (and, for an editable
    install, its finder): cheap, and where site-packages really are is somewhere else."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    purelib = Path(sysconfig.get_paths()["purelib"])
    finders = [f"import {f.stem}; {f.stem}.install()" for f in purelib.glob("__editable__*.py")]
    site = next(folder.glob("lib/python3*/site-packages"))
    (site / "course.pth").write_text("\n".join([*sys_path, str(purelib), *finders]) + "\n")
    return folder / "bin" / "python"


def run_python(
    python: Path | str, code: str, cwd: Path, user: int | None = None
) -> subprocess.CompletedProcess:
    """`code` run by `python` in `cwd`, as root or as the ordinary `user`."""
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd)}  # no PYTHONPATH: it finds what it finds
    drop = (
        [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    )
    return subprocess.run(
        [*drop, str(python), "-c", code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@needs_bwrap
@as_root
def test_a_venv_in_a_private_home_grades(tmp_path):
    # Ubuntu's homes are mode 750; the venv is reached through a link, as a dotfiles manager
    # would place it, and its python is a link to an interpreter under /root (mode 700).
    home = tmp_path / "home"
    home.mkdir(mode=0o750)
    python = make_venv(home / ".local" / "venvs" / "course", [])
    (home / ".venvs").mkdir()
    (home / ".venvs" / "course").symlink_to("../.local/venvs/course")
    done = run_python(home / ".venvs" / "course" / "bin" / python.name, GRADE_ONE, tmp_path)
    assert done.stdout.split() == ["19.0", "/", "19.0"], done.stderr[-2000:]


def python_anyone_can_run(user: int) -> str | None:
    """An interpreter of this Python version that `user` may run (pyenv's under /root is not)."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for python in (
        sys._base_executable,
        f"/usr/bin/python{version}",
        f"/usr/local/bin/python{version}",
    ):
        # Started through setpriv, an interpreter under /root runs; started again by itself
        # (as the grader starts the runner), it does not.
        check = (
            f"import subprocess, sys; assert sys.version.startswith('{version}.'); "
            "subprocess.run([sys.executable, '-c', ''], check=True)"
        )
        if Path(python).exists() and run_python(python, check, Path("/"), user).returncode == 0:
            return python
    return None


@contextmanager
def venv_of_an_ordinary_user() -> Iterator[tuple[Path, Path]]:
    """A venv in a mode-750 home owned by ORDINARY_USER, on a Python that user may run:
    (home, its python). Skips the test on a machine without such a Python."""
    base = python_anyone_can_run(ORDINARY_USER)
    if base is None:
        pytest.skip(f"no Python {sys.version_info[:2]} that an ordinary user may run")
    with tempfile.TemporaryDirectory() as scratch:  # pytest's own folders are root's alone
        Path(scratch).chmod(0o755)
        home = Path(scratch) / "home"
        home.mkdir(mode=0o750)
        python = make_venv(home / ".venvs" / "course", [], base)
        for path in [home, *home.rglob("*")]:
            os.chown(path, ORDINARY_USER, ORDINARY_USER, follow_symlinks=False)
        yield home, python


@needs_bwrap
@as_root
def test_a_venv_in_a_private_home_grades_as_an_ordinary_user():
    with venv_of_an_ordinary_user() as (home, python):
        done = run_python(python, GRADE_ONE, home, ORDINARY_USER)
    assert done.stdout.split() == ["19.0", "/", "19.0"], done.stderr[-2000:]


@needs_bwrap
@as_root
def test_a_checkout_in_a_private_folder_grades(tmp_path):
    # mkdtemp and umask 077 make folders of mode 700, which the runner's uid cannot enter.
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    checkout = private / "course"
    for part in ("grader", "norm_utils", "solutions"):
        shutil.copytree(REPO / part, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
    python = make_venv(tmp_path / "venv", [str(checkout)])
    done = run_python(python, GRADE_ONE, tmp_path)
    assert done.stdout.split() == ["19.0", "/", "19.0"], done.stderr[-2000:]


@needs_bwrap
@as_root
def test_a_venv_closed_to_others_is_refused_naming_it_and_the_fix(tmp_path):
    venv = tmp_path / "venv"
    python = make_venv(venv, [])
    venv.chmod(0o700)
    done = run_python(python, "from grader.grading.sandbox import Sandbox; Sandbox()", tmp_path)
    message = done.stderr.strip().splitlines()[-1]
    assert "the sandboxed runner cannot start, so every student would score 0" in message
    assert f"{venv} (mode 700)" in message
    assert "chmod -R o+rX" in message


@needs_bwrap
@as_root
def test_a_job_inside_a_private_folder_is_reachable():
    # TMPDIR=$(mktemp -d) puts every job folder under a folder of mode 700 inside /tmp.
    with tempfile.TemporaryDirectory() as private:
        job = Path(private) / "grade-job"
        job.mkdir()
        command = [sys.executable, "-c", "open('out', 'w').write('written')"]
        subprocess.run(Sandbox().command(command, job), check=True, timeout=60)
        assert (job / "out").read_text() == "written"


@needs_bwrap
def test_the_grader_is_neither_loaded_nor_importable_in_the_sandbox(tmp_path):
    code = (
        f"import sys, {RUNNER_MODULE}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'grader'))\n"
        "import grader"
    )
    command = Sandbox().command([sys.executable, "-P", "-c", code], tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.stdout == "[]\n", done.stderr[-2000:]
    assert "ModuleNotFoundError: No module named 'grader'" in done.stderr


@needs_bwrap
def test_a_runner_that_cannot_start_is_refused_with_the_reason(monkeypatch):
    # Leaving the course's reference out stands for anything the runner needs and cannot see.
    shown = grader.grading.sandbox.visible_paths

    def without_the_reference(keys):
        visible, masked = shown(keys)
        return [p for p in visible if p != REPO / "norm_utils"], masked

    monkeypatch.setattr(grader.grading.sandbox, "visible_paths", without_the_reference)
    with pytest.raises(SandboxUnavailable) as refused:
        Sandbox()
    message = str(refused.value)
    assert "cannot start, so every student would score 0" in message
    assert "ModuleNotFoundError: No module named 'norm_utils'" in message
    assert "--unsafe-no-sandbox" in message


@needs_bwrap
def test_an_answer_key_inside_a_folder_the_runner_sees_is_refused(monkeypatch):
    # As when the checkout lies in the virtualenv (pip install -e git+...: <venv>/src/<name>).
    monkeypatch.setattr(
        grader.grading.sandbox, "visible_paths", lambda keys: ([Path("/usr"), REPO.parent], [])
    )
    answer_key = REPO / "solutions"
    with pytest.raises(SandboxUnavailable, match=f"the answer key {answer_key} lies inside"):
        Sandbox()


def test_a_checkout_closed_to_others_is_named(tmp_path):
    checkout = tmp_path / "course"
    checkout.mkdir(mode=0o700)
    assert _closed_to_others([checkout]) == [checkout]
    checkout.chmod(0o755)
    assert _closed_to_others([checkout]) == []


def test_every_link_on_the_way_is_found_in_order(tmp_path):
    (tmp_path / "real" / "env").mkdir(parents=True)
    (tmp_path / "hop").symlink_to("real")
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "env").symlink_to(tmp_path / "hop" / "env")
    assert symlinks_met(tmp_path / "home" / "env" / ".." / "env") == {
        tmp_path / "home" / "env": str(tmp_path / "hop" / "env"),
        tmp_path / "hop": "real",
    }


# --- pre-started runners: a fresh sandbox for every student ---------------------------------------
# What one student may leave for the next one graded by the same pre-started runner: name ->
# (code leaving it, a condition true when the next student finds it). Each is written into the
# `layer_norm` answer cell ahead of the solution; one that finds something raises, scoring 0.
LEFT_FOR_THE_NEXT = {
    "tmp": ("open('/tmp/note', 'w').write('hi')", "os.path.exists('/tmp/note')"),
    "dev_shm": ("open('/dev/shm/note', 'w').write('hi')", "os.path.exists('/dev/shm/note')"),
    "process": (  # a fork (no new program can start: sandboxed.no_exec), renamed to be found
        "import ctypes, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    ctypes.CDLL(None).prctl(15, b'leftover', 0, 0, 0)\n"  # PR_SET_NAME
        "    time.sleep(600)\n"
        "while not any(open(f'/proc/{p}/comm').read() == 'leftover\\n'"
        " for p in os.listdir('/proc') if p.isdigit()):\n"
        "    time.sleep(0.01)",
        "any(open(f'/proc/{p}/comm').read() == 'leftover\\n'"
        " for p in os.listdir('/proc') if p.isdigit())",
    ),
    "module_state": ("torch.note = 'hi'\nmath.pi = 3", "hasattr(torch, 'note') or math.pi == 3"),
    "environment": ("os.environ['NOTE'] = 'hi'", "'NOTE' in os.environ"),
}
# Another student's job folder, being graded while this one is, seen from this one's.
CLASSMATE_SEEN = "os.listdir('..') != [os.path.basename(os.getcwd())]"
PRESTARTED_ASSIGNMENT = "01_layer_norm"


def submission_with(folder: Path, code: str) -> Submission:
    """The solution of 01_layer_norm with `code` run in its `layer_norm` answer cell first."""
    notebook = nbformat.read(notebook_path(SOLUTIONS, PRESTARTED_ASSIGNMENT), 4)
    cell = answer_cell(notebook, "layer_norm")
    cell.source = f"import os\n{code}\n{cell.source}"
    path = notebook_path(folder, PRESTARTED_ASSIGNMENT)
    path.parent.mkdir(parents=True)
    nbformat.write(notebook, path)
    return Submission.read(path, PRESTARTED_ASSIGNMENT)


def layer_norm_result(sandbox: Sandbox, folder: Path, code: str) -> ExerciseResult:
    results = grade_in_one_runner([submission_with(folder, code)], 0, sandbox=sandbox)[0]
    return next(r for r in results if r.name == "layer_norm")


@pytest.fixture(scope="module", params=["in /tmp", "outside /tmp"])
def one_prestarted_runner(request) -> Iterator[Sandbox]:
    """A sandbox with one pre-started runner, its job folders in /tmp (where the students' own
    /tmp hides them) or outside it (where a tmpfs over their folder must)."""
    sandbox = Sandbox()
    scratch = tempfile.mkdtemp(dir=None if request.param == "in /tmp" else "/var/tmp")
    try:
        with prestarted(sandbox, Path(scratch)) as pool:
            assert pool is not None
            yield sandbox
            assert len(pool.started) == 1  # every student was forked from the same one
    finally:
        shutil.rmtree(scratch)


def finding(condition: str) -> str:
    return f"if {condition}:\n    raise RuntimeError('found')"


@needs_bwrap
@as_root
@pytest.mark.parametrize("what", sorted(LEFT_FOR_THE_NEXT))
def test_nothing_a_student_leaves_reaches_the_next_on_a_prestarted_runner(
    one_prestarted_runner, tmp_path, what
):
    leave, found = LEFT_FOR_THE_NEXT[what]
    sandbox = one_prestarted_runner
    # Found by the student who left it (it could leave it, and the condition can be true),
    # not by the next one.
    first = layer_norm_result(sandbox, tmp_path / "first", f"{leave}\n{finding(found)}")
    assert "RuntimeError: found" in first.feedback
    assert layer_norm_result(sandbox, tmp_path / "next", finding(found)).score == 10


@needs_bwrap
@as_root
def test_a_student_on_a_prestarted_runner_sees_no_classmate_s_job_folder(
    one_prestarted_runner, tmp_path
):
    sandbox = one_prestarted_runner
    with tempfile.TemporaryDirectory(dir=sandbox.pool.started[0].root) as classmate:
        Path(classmate, "answers").write_text("hi")
        assert layer_norm_result(sandbox, tmp_path, finding(CLASSMATE_SEEN)).score == 10
