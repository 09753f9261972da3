"""A fault of the grader is never a student's grade, and every stop is clean.

A small class is graded once, cleanly, with a fixed seed; each test then breaks the grader in
one way (a runner that cannot start, a full disk, a signal at a random moment, a
second run, a lost gradebook) and checks that nothing wrong was recorded, that the run says so
and exits non-zero, and that the next run reaches exactly the clean run's per-cell scores.
"""

from __future__ import annotations

import contextlib
import copy
import os
import random
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import nbformat
import nbgrader.nbgraderformat.common
import pytest
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import MetadataValidator, ValidationError
from nbgrader.preprocessors import SaveAutoGrades
from nbgrader.utils import is_solution
from sqlalchemy import event
from sqlalchemy.orm import Session

from grader.autograde import GradebookLost, autograde, register_all
from grader.cli import main as cli
from grader.course import (
    Course,
    CourseBusy,
    nbgrader_metadata,
    notebook_path,
    set_nbgrader_metadata,
)
from grader.course.config import REPO, SOLUTIONS, assignments
from grader.course.intake import Submission
from grader.gradebook.records import cell_scores, one_gradebook_session
from grader.grading.grade import Limits, grade_in_one_runner
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import RUNNER_ROOT, Sandbox, available
from grader.release.demo import (
    PROFILES,
    Profile,
    _all_but_first,
    _edit_first_answer,
    _full,
    expected_scores,
    write_class,
)

pytestmark = pytest.mark.skipif(not available(), reason="bubblewrap is not installed")

SEED = 20261201
LIMITS = Limits(wall_seconds=10, processes=64)
NEWCOMER = "ada2"  # a student added after the clean run: graded by the faulty run, or not
# A fault in starting or feeding a runner is the same for any notebook: the tests of one grade
# the newcomer's first notebook only.
FIRST_NOTEBOOK = assignments()[0]
FIRST = {"notebooks": [FIRST_NOTEBOOK]}

# Answers that try to pass their own failure off as the grader's.
KILLS_RUNNER = """import glob, os, signal
for marker in glob.glob("out/*.started"):  # where a runner might note which answer it ran
    os.remove(marker)
os.kill(os.getppid(), signal.SIGKILL)
"""
FORGES_FAULT = """import os
try:  # speak for the runner on its stdout (a pipe only the grader's uid may open)
    with open(f"/proc/{os.getppid()}/fd/1", "w") as runner_stdout:
        runner_stdout.write("fault the disk is full\\n")
except OSError:
    pass
try:  # or reach into its memory, to make it say so (what ptrace allows)
    open(f"/proc/{os.getppid()}/mem", "r+b").close()
    os._exit(1)  # it could: stand for what it would do with that as this answer's crash
except OSError:
    pass
"""
CLASS = {
    "ada": PROFILES["ada"],
    "zed": Profile(
        "deletes the runner's markers and kills it in the first answer",
        _edit_first_answer(lambda src, name: KILLS_RUNNER + src),
        _all_but_first,
    ),
    "uma": Profile(
        "writes a fault line into the runner's stdout, then answers correctly",
        _edit_first_answer(lambda src, name: FORGES_FAULT + src),
        _full,
    ),
}


def recorded(course: Course) -> dict[tuple[str, str], dict[str, float]]:
    """Every per-cell score in the gradebook, by (student, assignment)."""
    students = [p.name for p in course.results.iterdir()] if course.results.is_dir() else []
    found = {(s, a): cell_scores(course, s, a) for s in students for a in assignments()}
    return {key: scores for key, scores in found.items() if scores is not None}


def run_autograde(course: Course, submissions: Path, sandbox: Sandbox, **options):
    return autograde(submissions, course, 2, SEED, LIMITS, sandbox, progress=False, **options)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """The class graded without a fault: its folder, course and per-cell scores."""
    root = tmp_path_factory.mktemp("faults")
    submissions = write_class(root / "submissions", CLASS)
    course = Course(root / "course")
    register_all(course)  # kept as it is now, so the stop tests need not pay for it again
    shutil.copytree(course.root, root / "prepared")
    sandbox = Sandbox()
    outcomes = run_autograde(course, submissions, sandbox)
    assert [o.problem for o in outcomes if o.problem] == []
    return root, recorded(course), sandbox


def test_the_clean_run_blames_no_one_for_the_grader_and_the_grader_for_no_one(clean):
    """A runner killed by the answer, its markers deleted first, costs that exercise only; an
    answer cannot make the runner report a fault of its own (its output, its memory)."""
    _, scores, _ = clean
    assert scores == expected_scores(CLASS)


@pytest.fixture
def course_copy(clean, tmp_path):
    """A copy of the clean course, and the class with a newcomer the copy has not graded."""
    root, _, _ = clean
    shutil.copytree(root / "submissions", tmp_path / "submissions")
    shutil.copytree(root / "course", tmp_path / "course")
    shutil.copytree(tmp_path / "submissions" / "ada", tmp_path / "submissions" / NEWCOMER)
    return Course(tmp_path / "course"), tmp_path / "submissions"


# Forwards what to run and the first exercise's inputs (two frames) from stdin, then ends.
FORWARD_ONE = """import sys

source, sink = sys.stdin.buffer, sys.stdout.buffer
for _ in range(2):
    header = source.read(8)
    sink.write(header + source.read(int.from_bytes(header, "big")))
sink.close()
source.read()
"""


class BrokenSandbox(Sandbox):
    """A sandbox whose runner starts numbered in `broken` (1, 2, ...) fail as `how` says."""

    def __init__(self, how: str, broken: set[int]):
        self.how, self.broken, self.starts = how, set(), 0
        super().__init__()  # its start-up probe is not counted
        self.broken = broken
        self.prestart = False  # every student's runner is started by `command`

    def command(self, command, job):
        full = super().command(command, job)
        if not self.broken:
            return full
        self.starts += 1
        if self.starts not in self.broken:
            return full
        if self.how == "hide the runner":  # e.g. a folder the runner's uid may not enter
            at = full.index("--chdir")
            return [*full[:at], "--tmpfs", str(RUNNER_ROOT), *full[at:]]
        if self.how == "cut the job":  # its stdin ends after the first exercise's inputs
            return ["sh", "-c", f'{shlex.quote(sys.executable)} -c "$0" | "$@"', FORWARD_ONE, *full]
        return ["bwrap", "--no-such-option"]  # bubblewrap itself fails to set up


class PrestartFails(Sandbox):
    """A sandbox whose pre-started runners cannot start (bubblewrap fails to set up)."""

    def prestart_command(self, root):
        return ["bwrap", "--no-such-option"]


def test_a_prestarted_runner_that_cannot_start_is_replaced_by_a_runner_per_student(
    course_copy, capsys
):
    course, submissions = course_copy
    outcomes = newcomer_outcomes(run_autograde(course, submissions, PrestartFails(), **FIRST))
    assert [o.problem for o in outcomes if o.problem] == []
    assert "the pre-started runner did not start" in capsys.readouterr().err
    assert (
        recorded(course)[(NEWCOMER, FIRST_NOTEBOOK)]
        == expected_scores(CLASS)[("ada", FIRST_NOTEBOOK)]
    )


def test_a_prestarted_runner_that_died_is_started_again(clean, tmp_path):
    *_, sandbox = clean
    notebooks = [notebook_path(SOLUTIONS, a) for a in assignments()]
    read = [Submission.read(path, a) for path, a in zip(notebooks, assignments(), strict=True)]
    with prestarted(sandbox, tmp_path) as pool:
        first = grade_in_one_runner(read, SEED, LIMITS, sandbox)
        os.killpg(pool.started[0].process.pid, signal.SIGKILL)
        pool.started[0].process.wait()
        assert grade_in_one_runner(read, SEED, LIMITS, sandbox) == first
        assert len(pool.started) == 2
    assert all(r.score == r.max_score for notebook in first for r in notebook)


def test_a_batch_is_recorded_in_one_gradebook_session(course_copy, monkeypatch):
    """nbgrader's recording opens the gradebook nine times a notebook (twice for its own default
    course): once a batch here."""
    course, submissions = course_copy
    opened = []
    original = Gradebook.__init__

    def counted(self, *args, **kwargs):
        opened.append(args)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Gradebook, "__init__", counted)
    outcomes = newcomer_outcomes(run_autograde(course, submissions, Sandbox()))
    assert [o.problem for o in outcomes if o.problem] == []
    assert len(outcomes) == len(assignments())
    assert len(opened) == len(set(opened))  # each (database, course) once, not per notebook


def test_a_notebook_is_committed_to_the_gradebook_once(course_copy):
    """nbgrader commits after each grade and comment it writes (each SQLite commit waits for
    the disk): a batch commits once a notebook."""
    course, submissions = course_copy
    commits = []

    def count(session):
        commits.append(session)

    event.listen(Session, "after_commit", count)
    try:
        outcomes = newcomer_outcomes(run_autograde(course, submissions, Sandbox()))
    finally:
        event.remove(Session, "after_commit", count)
    assert [o.problem for o in outcomes if o.problem] == []
    # nbgrader alone commits over a dozen times a notebook
    assert len(commits) <= 2 * len(outcomes), len(commits)


def metadata_verdicts(notebook) -> list[str]:
    """nbgrader's cell-metadata check of each graded cell of `notebook`, metadata corrupted
    three ways: its error for each ('' when it passes)."""
    verdicts, validator = [], MetadataValidator()
    for cell in notebook.cells:
        meta = nbgrader_metadata(cell)
        if not meta:
            continue
        for corrupt in ({}, {"points": "two"}, {"grade_id": 7}, {"solution": None}):
            broken = copy.deepcopy(cell)
            set_nbgrader_metadata(broken, {**meta, **corrupt})
            try:
                validator.validate_cell(broken)
                verdicts.append("")
            except ValidationError as error:
                verdicts.append(str(error))
    return verdicts


def test_the_metadata_check_while_recording_refuses_what_nbgraders_own_refuses():
    """While a batch records, nbgrader's cell-metadata check checks its schema once
    (`records._SchemaCheckedOnce`): every cell's metadata is still validated, with the same
    verdicts and errors, and nbgrader's own check is back afterwards."""
    notebook = nbformat.read(notebook_path(SOLUTIONS, FIRST_NOTEBOOK), as_version=4)
    stock = metadata_verdicts(notebook)
    assert "" in stock and len(set(stock)) > 2  # valid cells pass, each corruption is refused
    with one_gradebook_session():
        assert metadata_verdicts(notebook) == stock
    assert metadata_verdicts(notebook) == stock
    assert nbgrader.nbgraderformat.common.jsonschema is jsonschema


def test_a_notebook_nbgrader_fails_to_record_halfway_leaves_nothing_recorded(
    course_copy, monkeypatch
):
    """A notebook whose recording fails after nbgrader wrote its scores, before its comments,
    is not half in the gradebook: not recorded, said so, and the next run records it."""
    course, submissions = course_copy
    add_comment = SaveAutoGrades._add_comment

    def fails_on_the_first_notebook(self, cell, resources):
        if resources["nbgrader"]["notebook"] == FIRST_NOTEBOOK:
            raise OSError("the disk is full")
        add_comment(self, cell, resources)

    monkeypatch.setattr(SaveAutoGrades, "_add_comment", fails_on_the_first_notebook)
    outcomes = newcomer_outcomes(run_autograde(course, submissions, Sandbox()))
    failed = [o for o in outcomes if o.problem]
    assert [o.task.assignment for o in failed] == [FIRST_NOTEBOOK]
    assert "nbgrader could not record it" in failed[0].problem
    assert (NEWCOMER, FIRST_NOTEBOOK) not in recorded(course)  # no scores without comments
    assert len([key for key in recorded(course) if key[0] == NEWCOMER]) == len(outcomes) - 1
    monkeypatch.undo()
    assert [o.problem for o in run_autograde(course, submissions, Sandbox()) if o.problem] == []
    assert (
        recorded(course)[(NEWCOMER, FIRST_NOTEBOOK)]
        == expected_scores(CLASS)[("ada", FIRST_NOTEBOOK)]
    )


def newcomer_outcomes(outcomes):
    return [o for o in outcomes if o.task.student == NEWCOMER]


# How a runner fails, and what the grader then says: the last one, its `fault` line, after it
# ran the first exercise's answer (a grader error even though student code ran).
RUNNER_FAILURES = {
    "hide the runner": "did not start its job",
    "bwrap fails": "did not start its job",
    "cut the job": "the job ended early",
}


@pytest.mark.parametrize("how", sorted(RUNNER_FAILURES))
def test_a_runner_that_cannot_start_is_a_grader_error_graded_by_the_next_run(course_copy, how):
    course, submissions = course_copy
    before = recorded(course)
    sandbox = BrokenSandbox(how, broken={1, 2})
    outcomes = newcomer_outcomes(run_autograde(course, submissions, sandbox, **FIRST))
    assert len(outcomes) == 1
    assert all(o.grader_fault and "not graded: grader error" in o.problem for o in outcomes)
    assert all(RUNNER_FAILURES[how] in o.problem for o in outcomes)
    assert recorded(course) == before  # nothing recorded for the newcomer: no 0, no stamp
    assert not list((course.results / NEWCOMER).glob("*.graded"))

    regraded = newcomer_outcomes(run_autograde(course, submissions, sandbox, **FIRST))
    assert [o.problem for o in regraded if o.problem] == []
    assert (
        recorded(course)[(NEWCOMER, FIRST_NOTEBOOK)]
        == expected_scores(CLASS)[("ada", FIRST_NOTEBOOK)]
    )


def test_a_runner_that_fails_to_start_once_is_started_again(course_copy):
    course, submissions = course_copy
    sandbox = BrokenSandbox("bwrap fails", broken={1})
    outcomes = newcomer_outcomes(run_autograde(course, submissions, sandbox, **FIRST))
    assert [o.problem for o in outcomes if o.problem] == []
    assert (
        recorded(course)[(NEWCOMER, FIRST_NOTEBOOK)]
        == expected_scores(CLASS)[("ada", FIRST_NOTEBOOK)]
    )


def test_a_full_disk_in_the_course_folder_is_a_grader_error_graded_by_the_next_run(
    clean, course_copy, tmp_path
):
    course, submissions = course_copy
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(course.root, disk / "course")
        small = Course(disk / "course")
        filler = disk / "filler"
        with filler.open("wb", buffering=0) as handle, contextlib.suppress(OSError):
            while handle.write(bytes(4096)):  # until the disk is full
                pass
        done = _cli(
            "autograde", "--course", small.root, submissions, "--seed", SEED,
            "--assignment", FIRST_NOTEBOOK,
        )  # fmt: skip
        assert done.returncode == 1, done.stdout + done.stderr
        assert "not graded: grader error" in done.stdout
        assert not list((small.results / NEWCOMER).glob("*.graded"))
        filler.unlink()
        regraded = run_autograde(small, submissions, clean[2], **FIRST)
        assert [o.problem for o in regraded if o.problem] == []
        assert (
            recorded(small)[(NEWCOMER, FIRST_NOTEBOOK)]
            == expected_scores(CLASS)[("ada", FIRST_NOTEBOOK)]
        )
    finally:
        subprocess.run(["umount", "-l", str(disk)])


def test_a_duplicated_answer_cell_is_graded_and_recorded_not_skipped(course_copy):
    """Two answer cells with the same grade_id (a cell copied in Jupyter): the last one is the
    answer, as when the notebook runs top to bottom, and the notebook is recorded."""
    course, submissions = course_copy
    first = assignments()[0]
    path = notebook_path(submissions / NEWCOMER, first)
    notebook = nbformat.read(path, 4)
    answer = next(c for c in notebook.cells if is_solution(c))
    earlier = copy.deepcopy(answer)
    earlier.source = answer.source.replace("return", "return 0 *", 1)  # a draft, overwritten
    earlier.id = "pasted-copy"  # Jupyter gives a pasted cell its own id, not its metadata
    notebook.cells.insert(notebook.cells.index(answer), earlier)
    nbformat.write(notebook, path)
    done = _cli(
        "autograde", "--course", course.root, submissions, "--seed", SEED, "--assignment", first
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert recorded(course)[(NEWCOMER, first)] == expected_scores(CLASS)[("ada", first)]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grader", *map(str, args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_second_run_on_the_same_course_is_refused(course_copy):
    course, submissions = course_copy
    with course.lock(), pytest.raises(CourseBusy, match="another `grader autograde`"):
        run_autograde(course, submissions, None)


def _damage(gradebook: Path, how: str) -> None:
    if how == "deleted":
        gradebook.unlink()
    elif how == "zero bytes":
        gradebook.write_bytes(b"")
    else:
        gradebook.write_bytes(b"not a database" * 100)


@pytest.mark.parametrize("how", ["deleted", "zero bytes", "overwritten"])
def test_a_lost_gradebook_is_refused_and_never_recreated(course_copy, how, tmp_path):
    course, submissions = course_copy
    _damage(course.gradebook, how)
    state = course.gradebook.read_bytes() if course.gradebook.exists() else None
    with pytest.raises(GradebookLost, match="--force") as refused:
        run_autograde(course, submissions, None)
    assert str(course.gradebook) in str(refused.value)
    assert cli(["export", "--course", str(course.root), "--csv", str(tmp_path / "g.csv")]) == 2
    assert not (tmp_path / "g.csv").exists()
    assert (course.gradebook.read_bytes() if course.gradebook.exists() else None) == state


def test_force_grades_everything_into_a_new_gradebook_and_keeps_the_old_one(clean, course_copy):
    course, submissions = course_copy
    _, scores, _ = clean
    _damage(course.gradebook, "overwritten")
    sandbox = Sandbox()
    outcomes = run_autograde(course, submissions, sandbox, force=True, students=["zed"])
    assert [o.problem for o in outcomes if o.problem] == []
    assert not any(o.skipped for o in outcomes)
    assert recorded(course) == {k: v for k, v in scores.items() if k[0] == "zed"}
    assert [p.read_bytes() for p in course.root.glob("gradebook.db.lost-*")] == [
        b"not a database" * 100
    ]


# Signals: sent at seeded random moments of a real `grader autograde`, counted in the progress
# lines it writes (one per recorded notebook): 0 lines is while grading, more is while recording.
STOP_STUDENTS = ["ada", "zed"]  # one whose runner is killed once, to be started again
STOPS = [
    ("SIGTERM", False),
    ("SIGINT", True),  # Ctrl-C in a terminal: to the whole process group
    ("SIGHUP", False),
    ("SIGKILL", False),
]


def _descendants(pid: int) -> set[tuple[int, str]]:
    """(pid, start time) of every process below `pid`, sandboxed ones included."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append((int(entry.name), fields[19]))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child[0])
    return found


def _alive(process: tuple[int, str]) -> bool:
    try:
        stat = Path(f"/proc/{process[0]}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return stat[19] == process[1] and stat[0] != "Z"


@pytest.mark.parametrize(("name", "to_group"), STOPS)
def test_a_stop_at_a_random_moment_loses_nothing_and_leaves_nothing(
    clean, tmp_path, name, to_group
):
    root, scores, sandbox = clean
    rng = random.Random(f"{SEED}-{name}")
    after_lines, delay = rng.randrange(0, 4), rng.uniform(0, 0.5)
    shutil.copytree(root / "prepared", tmp_path / "course")
    course = Course(tmp_path / "course")
    command = [sys.executable, "-m", "grader", "autograde", "--course", str(course.root)]
    command += [str(root / "submissions"), "--seed", str(SEED), "--timeout", "10"]
    command += [f"--student={s}" for s in STOP_STUDENTS]
    grader = subprocess.Popen(
        command,
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    while not list(course.scratch.glob("**/grade-*")):  # grading has begun
        assert grader.poll() is None, grader.communicate()
        time.sleep(0.05)
    lines = 0
    while lines < after_lines and (line := grader.stderr.readline()):
        lines += "notebooks" in line
    time.sleep(delay)
    ours = _descendants(grader.pid)
    signum = signal.Signals[name]
    sent = time.monotonic()
    if to_group:
        os.killpg(grader.pid, signum)
    else:
        grader.send_signal(signum)
    grader.communicate(timeout=60)
    status = grader.returncode
    stopped_in = time.monotonic() - sent
    assert status == (-signum if name == "SIGKILL" else 128 + signum), f"after {lines} lines"
    assert stopped_in < 20
    deadline = time.monotonic() + 10
    while [p for p in ours if _alive(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in ours if _alive(p)] == []
    if name != "SIGKILL":
        assert not (course.scratch).exists()
    if course.gradebook.exists():
        with sqlite3.connect(course.gradebook) as db:
            assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    rerun = run_autograde(course, root / "submissions", sandbox, students=STOP_STUDENTS)
    assert [o.problem for o in rerun if o.problem] == []
    assert not course.scratch.exists()
    assert recorded(course) == {k: v for k, v in scores.items() if k[0] in STOP_STUDENTS}
