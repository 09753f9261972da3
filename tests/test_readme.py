"""Every command in README.md's code blocks, checked against what it names or run as written.

Run exactly as written: `make test` by CI (.ci/run); here, each `grader ... --help`, the
student's `grader check` on the untouched release, the instructor's autograde, feedback and
export, in order, in a folder holding a one-student SUBMISSIONS class, and the nbgrader course
walk (run once for the suite by tests/course_walk.py, whose course tests/test_course.py goes on
with). Checked, not run: `grader
release` (it rewrites notebooks/; tests/test_release.py compares a fresh generation with it),
`grader release --check` and `grader demo` (tests/test_release.py and tests/test_grading.py run
what they run) parse with grader's own parser; `make` commands name the Makefile's targets and
variables; the conda route names environment.yml and its environment, and its `pytest` is the
suite `make test` runs; the CPU index given to `make` (not reachable here) is the one
environment.yml uses.
"""

from __future__ import annotations

import csv
import html
import importlib.util
import os
import re
import shutil
import subprocess

import nbformat
import pytest
from course_walk import FIRST, STUDENTS, WALKED, nbgrader, readme_commands, section

from grader.cli import build_parser
from grader.course import Layout, fetched_feedback, nbgrader_metadata, notebook_path
from grader.course.config import REPO, assignments
from grader.course.intake import exercises_of, source_notebook
from grader.grading.sandbox import available
from grader.release.demo import PROFILES, expected_scores, write_class
from grader.release.notebooks import student_wheel

GRADER = ".venv/bin/grader"
FROM_COURSE = "../.venv/bin/"  # the nbgrader course walk runs in the course folder
CHECKED = {
    "make",
    "conda",
    "pytest",
    GRADER,
    "cd",
    f"{FROM_COURSE}grader",
    f"{FROM_COURSE}nbgrader",
    "python3.11",  # the students' route: a venv of their own
    "normcourse/bin/pip",
    "normcourse/bin/jupyter",
    "normcourse/bin/python",
    "apt-get",
    ".venv/bin/celery",
}
MAKEFILE = (REPO / "Makefile").read_text()
ENVIRONMENT = (REPO / "environment.yml").read_text()


COMMANDS = readme_commands()
GRADER_COMMANDS = [argv for argv in COMMANDS if argv[0] == GRADER]
RUN_HERE = [argv for argv in GRADER_COMMANDS if "--help" in argv or argv[1] == "check"]
INSTRUCTOR = [argv for argv in GRADER_COMMANDS if argv[1] in ("autograde", "feedback", "export")]
NO_VENV = pytest.mark.skipif(not (REPO / GRADER).is_file(), reason=f"no {GRADER}: not make's")


def _of(program: str) -> list[list[str]]:
    return [argv for argv in COMMANDS if argv[0] == program]


def test_every_readme_command_is_one_this_file_checks():
    assert {argv[0] for argv in COMMANDS} <= CHECKED
    assert len(GRADER_COMMANDS) > len(RUN_HERE) + len(INSTRUCTOR)
    assert [argv[1] for argv in INSTRUCTOR] == ["autograde", "feedback", "export"]


def test_grade_on_submits_hosts_install_what_ci_installs_and_start_the_queues_app():
    ci = (REPO / ".ci" / "run").read_text()
    for argv in _of("apt-get"):
        assert argv[1] == "install" and all(package in ci for package in argv[2:]), argv
    (worker,) = _of(".venv/bin/celery")
    assert worker[1:4] == ["-A", "grader.serve.queue", "worker"]
    assert importlib.util.find_spec(worker[2]) is not None


def test_ci_runs_make_test_as_written():
    assert ["make", "test"] in COMMANDS
    assert re.search(r"^(time )?make test$", (REPO / ".ci" / "run").read_text(), re.M)


def test_make_commands_name_the_makefiles_targets_and_variables():
    targets = set(re.findall(r"^([\w-]+):", MAKEFILE, re.M))
    variables = set(re.findall(r"^(\w+)\s*\?=", MAKEFILE, re.M))
    for argv in _of("make"):
        for word in argv[1:]:
            name, assigns, _ = word.partition("=")
            assert name in (variables if assigns else targets), argv


def test_the_cpu_index_given_to_make_is_the_one_the_conda_route_uses():
    indexes = [w.partition("=")[2] for argv in _of("make") for w in argv if "_INDEX=" in w]
    assert indexes == ["https://download.pytorch.org/whl/cpu"]
    assert f"--extra-index-url {indexes[0]}" in ENVIRONMENT
    assert "--extra-index-url $(TORCH_INDEX)" in MAKEFILE


def test_the_conda_route_names_environment_yml_its_environment_and_the_suite():
    (name,) = re.findall(r"^name: (\S+)$", ENVIRONMENT, re.M)
    assert ["conda", "env", "create", "-f", "environment.yml"] in COMMANDS
    assert ["conda", "activate", name] in COMMANDS
    assert _of("pytest") == [["pytest"]]
    assert "$(PY) -m pytest $(PYTEST_ARGS)" in MAKEFILE  # the same suite, run by CI


@pytest.mark.parametrize("argv", GRADER_COMMANDS, ids=" ".join)
def test_each_grader_command_parses_and_has_help(argv, capsys):
    parser = build_parser()
    words = [w for w in argv[1:] if w != "--help"]
    if words:
        assert parser.parse_args(words).command == words[0]
    with pytest.raises(SystemExit) as done:
        parser.parse_args([*words, "--help"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: grader {' '.join(words[:1])}".rstrip())


@NO_VENV
@pytest.mark.parametrize("argv", RUN_HERE, ids=" ".join)
def test_readme_command_runs_as_written(argv):
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    if "--help" in argv:
        assert done.returncode == 0 and done.stdout.startswith("usage: grader"), done.stderr
    else:  # the untouched release: every exercise still to do
        assert done.returncode == 1 and "Still to fix:" in done.stdout, done.stdout + done.stderr


@NO_VENV
@pytest.mark.skipif(not available(), reason="bubblewrap is not installed: autograde refuses")
def test_the_instructor_commands_run_as_written_in_order(tmp_path):
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    write_class(tmp_path / "SUBMISSIONS", {"ada": PROFILES["ada"]})
    for argv in INSTRUCTOR:
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    assert len(list(Layout.of(tmp_path / "course").feedback.rglob("*.html"))) == len(assignments())
    (ada,) = csv.DictReader((tmp_path / "grades.csv").open())
    full = sum(
        sum(scores.values()) for scores in expected_scores({"ada": PROFILES["ada"]}).values()
    )
    (total,) = (column for column in ada if column.startswith("total ("))
    assert float(ada[total]) == full > 0


DIAGNOSED = "unbiased estimator"  # how the checks name ivy's mistake (grader.release.demo)


def test_the_nbgrader_course_walk_runs_as_written_in_order(readme_walk):
    """Each command of the walk as written, in its folder (the suite's one nbgrader cycle,
    tests/course_walk.py): ivy fetches the feedback it released and reads her mistake's
    diagnosis; the export and the report hold each student's grade and the diagnosis."""
    root = readme_walk / WALKED
    nbgrader("fetch_feedback", FIRST, cwd=root / "ivy", exchange=root / "exchange", user="ivy")
    (page,) = fetched_feedback(root / "ivy", FIRST).rglob(f"{FIRST}.html")
    assert DIAGNOSED in html.unescape(page.read_text())
    rows = {
        row["student_id"]: row for row in csv.DictReader((root / "course" / "grades.csv").open())
    }
    assert sorted(rows) == sorted(STUDENTS)
    for student, profile in STUDENTS.items():
        score = sum(expected_scores({profile: PROFILES[profile]})[(profile, FIRST)].values())
        assert [float(v) for k, v in rows[student].items() if k.startswith(f"{FIRST} (")] == [score]
    report = html.unescape((root / "course" / "reports" / f"{FIRST}.html").read_text())
    assert re.search(rf"<li>1 × [^<]*{DIAGNOSED}", report)


STUDENT = readme_commands(section("## For students"))
EXERCISE = exercises_of(source_notebook(assignments()[0]))[0]
CPU_INDEX = ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]


def test_the_csv_header_example_has_the_assignments_real_points():
    """README's `01_layer_norm (N pts)`: the points of its graded cells, written ones included."""
    assignment = assignments()[0]
    notebook = nbformat.read(notebook_path(REPO / "notebooks", assignment), as_version=4)
    points = sum(nbgrader_metadata(c).get("points", 0) for c in notebook.cells)
    assert f"`{assignment} ({points:g} pts)`" in (REPO / "README.md").read_text()


@pytest.mark.skipif(not (REPO / "solutions").is_dir(), reason="the wheel is built from a checkout")
def test_the_students_route_runs_as_written_from_only_what_it_installs(tmp_path):
    """The students' commands, in a folder holding only the students' wheel and a notebook as
    handed out: a venv without this one's packages, the wheel and JupyterLab installed into
    it (torch from pip's own configuration: PyTorch's CPU index is not reachable here), and
    the terminal check of the untouched notebook, which says every exercise is still to do."""
    wheel = student_wheel(tmp_path)
    assignment = assignments()[0]
    handed_out = notebook_path(tmp_path, assignment)
    handed_out.parent.mkdir()
    shutil.copy(notebook_path(REPO / "notebooks", assignment), handed_out)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PIP_NO_COMPILE"] = "1"  # pip byte-compiles what it installs (torch: thousands of files)
    assert [argv[0] for argv in STUDENT[:4]] == [
        "python3.11", "normcourse/bin/pip", "normcourse/bin/jupyter", "normcourse/bin/python"
    ]  # fmt: skip
    venv, install, lab, check = STUDENT[:4]
    assert wheel.name in install and "jupyterlab" in install
    assert install[2:4] == CPU_INDEX
    for argv in (venv, [*install[:2], *install[4:]]):
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    assert os.access(tmp_path / lab[0], os.X_OK) and lab[1:] == ["lab"]
    done = subprocess.run(check, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    assert f"`{EXERCISE}` is not implemented yet" in done.stdout
    assert "Still to fix:" in done.stdout
