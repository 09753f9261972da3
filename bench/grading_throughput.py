"""Grading throughput: stock `nbgrader autograde` against our `grader autograde`, same inputs.

Stock nbgrader here is the course's own nbgrader configuration
(`grader.course.config.course_config`) with nbgrader's default autograde preprocessors, `Execute`
first: every student notebook runs top to bottom in a kernel, experiments included, and the test
cells' `check()`/`grade()` score it (hidden inputs from NORM_COURSE_SEED=0). Ours is `grader
autograde --seed 0`: one sandboxed runner per student, only what the checks need, results recorded
through nbgrader. Both get the course's 60 s: per cell (stock, Execute.timeout) or per exercise
(ours, `--timeout 60`).

Measured, on the bundled demo class (grader.release.demo.PROFILES) and on a generated class of
`--students` copies of the honest profiles:
- wall seconds per student × notebook, median of `--runs` (ours) / `--stock-runs` (stock) runs;
- peak RSS of the largest single process (wait4's ru_maxrss) and of the whole grading process
  tree summed (psutil, sampled every 0.25 s);
- the per-cell scores both record in their nbgrader gradebooks, every difference with its cause;
- the sandbox's cost (ours with bubblewrap vs --unsafe-no-sandbox) and our fixed cost per student
  × notebook (everything but the student's code, whose own time is measured in-process).
Stock nbgrader on the generated class runs on `--stock-students` students and is extrapolated.

    .venv/bin/python bench/grading_throughput.py [options]

"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    bench_parser,
    load_1min,
    markdown_table,
    median_and_spread,
    print_header,
    progress,
)

from grader.autograde import autograde, register_all
from grader.checks import EXERCISES
from grader.checks.core import outputs_of, plan
from grader.course import Course, grade_id, grade_id_of_tests, notebook_path
from grader.course.config import CELL_SECONDS, SEED_VARIABLE, assignments, use_this_environment
from grader.course.intake import (
    Submission,
    answer_source,
    exercises_of,
    setup_code,
    source_notebook,
)
from grader.gradebook.records import cell_scores
from grader.grading.grade import grade_in_one_runner
from grader.grading.sandbox import available as sandbox_available
from grader.grading.sandboxed.calling import load_answer
from grader.release.demo import PROFILES, Profile, write_class

try:  # psutil comes with jupyter's dependencies; without it only the largest process is known
    import psutil
except ImportError:  # pragma: no cover
    psutil = None

SEED = 0  # stock nbgrader's grade() reads NORM_COURSE_SEED, default 0: ours must use the same
# Ours gets per exercise the limit stock nbgrader has per cell.
TIMEOUT_S = CELL_SECONDS
BIN = Path(sys.executable).parent
# The generated class: honest work, right or wrong, in a notebook nbgrader can execute as handed
# in (not: nothing or invalid JSON, a dead or hung kernel, stripped metadata, deleted cells).
HONEST = ("ada", "ben", "eli", "ivy", "jon", "kim", "lou", "max", "oli")
LOG_RECORD = re.compile(r"^(\d{9,11}\.\d{3}) \[(\w+) \| (\w+)\] ?(.*)$")


# --- measuring one command ----------------------------------------------------------------------


@dataclass
class Measured:
    """One grading command: wall time, memory, the load around it, and its log."""

    seconds: float
    largest_rss_mb: float
    tree_rss_mb: float
    load_before: float
    load_after: float
    returncode: int
    started_at: float  # epoch seconds, to line up with nbgrader's log timestamps
    log: str


class TreeSampler(threading.Thread):
    """Samples the summed RSS of a process and all its descendants (kernels, runners, bwrap)."""

    def __init__(self, pid: int, interval: float = 0.25):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self.done = threading.Event()

    def run(self) -> None:
        if psutil is None:
            return
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self.done.wait(self.interval):
            self.peak = max(self.peak, _tree_rss(root))


def _tree_rss(root) -> int:
    total = 0
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        try:
            total += process.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def measure(command: list[str], cwd: Path, env: dict[str, str]) -> Measured:
    """Run `command`, returning its wall time and peak memory. wait4 reports the child's usage
    together with every descendant it reaped, so ru_maxrss is the largest single process."""
    load_before = load_1min()
    with tempfile.TemporaryFile("w+") as log:
        started_at, start = time.time(), time.perf_counter()
        child = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        sampler = TreeSampler(child.pid)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - start
        sampler.done.set()
        sampler.join()
        child.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        log.seek(0)
        text = log.read()
    return Measured(
        seconds=seconds,
        largest_rss_mb=usage.ru_maxrss / 1024,
        tree_rss_mb=sampler.peak / (1 << 20) if psutil else float("nan"),
        load_before=load_before,
        load_after=load_1min(),
        returncode=child.returncode,
        started_at=started_at,
        log=text,
    )


def grading_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # nbgrader starts kernels by name
    env[SEED_VARIABLE] = str(SEED)
    return env


# --- the classes ---------------------------------------------------------------------------------


def generated_profiles(students: int) -> dict[str, Profile]:
    """`students` students cycling through the honest profiles (stock nbgrader executes every
    cell of theirs, as it would for most of a real class)."""
    running = [name for name in HONEST if name in PROFILES]
    return {
        f"s{i:03d}_{running[i % len(running)]}": PROFILES[running[i % len(running)]]
        for i in range(students)
    }


def profile_of(student: str) -> str:
    return student.rsplit("_", 1)[-1]


# --- stock nbgrader ------------------------------------------------------------------------------

STOCK_CONFIG = '''\
"""Stock nbgrader for the benchmark: the course's configuration, nbgrader's default autograde
preprocessors (Execute first), submissions read from {submissions}."""
from pathlib import Path

from grader.course.config import course_config
from grader.course import Layout

here = Path(__file__).resolve().parent
c = get_config()  # noqa: F821
c.merge(course_config(root=here, release=Layout.of(here).release))
c.CourseDirectory.submitted_directory = {submissions!r}
# Timestamps with milliseconds, to attribute time to each student.
c.Application.log_format = "%(created).3f [%(name)s | %(levelname)s] %(message)s"
'''


def stock_course(root: Path, submissions: Path, env: dict[str, str]) -> None:
    """A course directory for plain `nbgrader`, with every assignment generated (not timed)."""
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(STOCK_CONFIG.format(submissions=str(submissions)))
    for assignment in assignments():
        command = [str(BIN / "nbgrader"), "generate_assignment", assignment, "--create"]
        subprocess.run(command, cwd=root, env=env, check=True, capture_output=True)


def run_stock(submissions: Path, root: Path) -> list[Measured]:
    """`nbgrader autograde ASSIGNMENT` for each assignment, each over the whole class."""
    env = grading_env()
    stock_course(root, submissions, env)
    runs = []
    for assignment in assignments():
        progress(f"  stock nbgrader autograde {assignment} ...")
        command = [str(BIN / "nbgrader"), "autograde", assignment]
        runs.append(measure(command, root, env))
        (root / f"autograde-{assignment}.log").write_text(runs[-1].log)  # kept with --keep
    return runs


@dataclass
class LogRecord:
    time: float
    level: str
    message: str


def log_records(log: str) -> Iterator[LogRecord]:
    """nbgrader's log as records (continuation lines, e.g. tracebacks, joined to theirs)."""
    current: LogRecord | None = None
    for line in log.splitlines():
        match = LOG_RECORD.match(line)
        if match:
            if current:
                yield current
            current = LogRecord(float(match[1]), match[3], match[4])
        elif current:
            current.message += "\n" + line
    if current:
        yield current


@dataclass
class StudentWindow:
    """What one `nbgrader autograde` invocation spent on one student, and what went wrong."""

    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)


STUDENT_START = re.compile(r"Creating/updating student with ID '([^']+)'")
GENERIC_ERRORS = ("There was an error processing assignment", "Please see the")


def student_windows(run: Measured) -> tuple[float, dict[str, StudentWindow]]:
    """nbgrader's start-up time, then per student: the time from its first log record to the
    next student's, and the errors logged in between (by log order: timestamps can tie)."""
    records = list(log_records(run.log))
    starts = [(i, m[1]) for i, r in enumerate(records) if (m := STUDENT_START.search(r.message))]
    end_time = run.started_at + run.seconds
    windows: dict[str, StudentWindow] = {}
    for (first, student), (last, _) in zip(starts, [*starts[1:], (len(records), "")], strict=True):
        window = windows.setdefault(student, StudentWindow())
        until = records[last].time if last < len(records) else end_time
        window.seconds += until - records[first].time
        for record in records[first:last]:
            reason = _error_reason(record.message) if record.level == "ERROR" else ""
            if reason:
                window.errors.append(reason)
    startup = (records[starts[0][0]].time - run.started_at) if starts else run.seconds
    return startup, windows


def _error_reason(message: str) -> str:
    """One line per error: a traceback's last line, and nothing for nbgrader's generic notices."""
    if message.startswith(GENERIC_ERRORS):
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


# --- ours ----------------------------------------------------------------------------------------


def run_ours(submissions: Path, root: Path, jobs: int, sandboxed: bool) -> Measured:
    """`grader autograde` over the whole class; the gradebook is prepared first (not timed),
    as stock nbgrader's `generate_assignment` is."""
    register_all(Course(root))
    command = [str(BIN / "grader"), "autograde", str(submissions), "--course", str(root)]
    command += ["--jobs", str(jobs), "--seed", str(SEED), "--timeout", str(TIMEOUT_S)]
    if not sandboxed:
        command.append("--unsafe-no-sandbox")
    return measure(command, root, grading_env())


# --- scores --------------------------------------------------------------------------------------

Scores = dict[str, float | None]  # test cell -> autograded score (None: not autograded)


def recorded_scores(root: Path, students: list[str]) -> dict[tuple[str, str], Scores | None]:
    """Per student × notebook of the course at `root`, the autograded score of each test cell;
    None if not recorded."""
    course = Course(root)
    return {(s, a): cell_scores(course, s, a) for s in students for a in assignments()}


def total(scores: Scores | None) -> str:
    if scores is None or all(v is None for v in scores.values()):
        return "not graded"
    return f"{sum(v or 0.0 for v in scores.values()):g}"


def stock_cell_output(root: Path, student: str, assignment: str, exercise: str) -> str:
    """Why stock nbgrader scored a test cell as it did: the cell's error, as its kernel left it."""
    path = Course(root).autograded_notebook(student, assignment)
    if not path.is_file():
        return "no autograded notebook"
    notebook = nbformat.read(path, as_version=4)
    for cell in notebook.cells:
        if grade_id(cell) == grade_id_of_tests(exercise):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    return f"{output.ename}: {str(output.evalue)[:80]}".rstrip(": ")
            return "no error in the cell"
    return "test cell absent"


def score_differences(
    stock: dict[tuple[str, str], Scores | None],
    ours: dict[tuple[str, str], Scores | None],
    stock_root: Path,
    stock_errors: dict[tuple[str, str], list[str]],
) -> list[list[object]]:
    """Every student × notebook whose recorded scores differ, with the cause as seen in stock
    nbgrader's own log or in the test cell it executed."""
    rows = []
    for key in sorted(ours):
        student, assignment = key
        theirs, mine = stock.get(key), ours[key]
        if theirs == mine:
            continue
        if theirs is None or all(v is None for v in theirs.values()):
            errors = stock_errors.get(key)
            if errors is None:
                errors = ["no notebook submitted, so nbgrader skipped the student"]
            errors = errors or ["no error logged"]
            cause = "stock recorded nothing: " + "; ".join(dict.fromkeys(errors))
        else:
            cells = [c for c in mine or {} if (mine or {}).get(c) != theirs.get(c)]
            cause = "; ".join(
                f"`{c}` {theirs.get(c)} vs {(mine or {}).get(c)}: "
                f"{stock_cell_output(stock_root, student, assignment, c)}"
                for c in cells
            )
        description = PROFILES[profile_of(student)].description
        rows.append([student, description, assignment, total(theirs), total(mine), cause])
    return rows


# --- the student's own code ----------------------------------------------------------------------


def student_code_seconds(profile: Profile, assignment: str) -> float:
    """Time the student's own code takes in grading, measured here without any grading machinery:
    defining the answers, then calling them on every hidden check's inputs (seed 0)."""
    made = profile.build(assignment)
    if not isinstance(made, nbformat.NotebookNode):
        return 0.0
    source = source_notebook(assignment)
    setup = setup_code(source)
    exec(compile(setup, "<setup>", "exec"), {})  # imports warmed: the runner pays them once
    seconds = 0.0
    for name in exercises_of(source):
        answer_code = answer_source(made, name)
        if answer_code is None:
            continue
        exercise = EXERCISES[name]
        start = time.perf_counter()
        try:
            answer = load_answer(setup, answer_code, name)
            for _, inputs in plan(exercise, True, SEED):
                try:
                    outputs_of(exercise, answer, inputs)
                except Exception:  # a wrong answer may raise; its time still counts
                    pass
        except Exception:
            pass
        seconds += time.perf_counter() - start
    return seconds


def mean_student_code_seconds(profiles: dict[str, Profile]) -> float:
    """Per student × notebook, averaged over a class (each distinct profile timed once)."""
    per_profile = {
        name: statistics.mean(student_code_seconds(PROFILES[name], a) for a in assignments())
        for name in {profile_of(s) for s in profiles}
    }
    return statistics.mean(per_profile[profile_of(s)] for s in profiles)


# --- where our time goes ------------------------------------------------------------------------


def runner_startup_seconds() -> float:
    """What every runner pays before any student code: Python, torch and the checks imported."""
    start = time.perf_counter()
    command = [sys.executable, "-c", "import grader.grading.sandboxed.runner"]
    subprocess.run(command, check=True, env=grading_env(), capture_output=True)
    return time.perf_counter() - start


def one_student_seconds(work: Path, student: str) -> tuple[float, float]:
    """One correct student, unsandboxed, in this process: (grading only, grading + recording)."""
    submissions = write_class(work / "submissions", {student: PROFILES[student]})
    start = time.perf_counter()
    read = [Submission.read(notebook_path(submissions / student, a), a) for a in assignments()]
    grade_in_one_runner(read, SEED)
    graded = time.perf_counter() - start
    course = Course(work / "course")
    register_all(course)  # registering the assignments is not part of grading, as for both systems
    start = time.perf_counter()
    autograde(submissions, course, jobs=1, seed=SEED, progress=False)
    return graded, time.perf_counter() - start


def breakdown_rows(work: Path, repeats: int) -> list[list[object]]:
    """Per notebook of one correct student (ada), median of `repeats`: runner start-up, running
    and judging the exercises, recording through nbgrader. Unsandboxed, --jobs 1."""
    notebooks = len(assignments())
    startup, running, recording, loads = [], [], [], []
    for i in range(repeats):
        loads.append(load_1min())
        boot = runner_startup_seconds()
        graded, whole = one_student_seconds(work / f"breakdown-{i}", "ada")
        startup.append(boot / notebooks)
        running.append((graded - boot) / notebooks)
        recording.append((whole - graded) / notebooks)
    load = f"{min(loads):.1f}–{max(loads):.1f}"
    return [
        [
            "runner start-up (Python, torch, checks), shared by the notebooks",
            median_and_spread(startup),
            load,
        ],
        [
            "running and judging the exercises (forks, limits, arrays, judge)",
            median_and_spread(running),
            load,
        ],
        [
            "recording through nbgrader (InjectResults, SaveAutoGrades, gradebook)",
            median_and_spread(recording),
            load,
        ],
    ]


# --- one class, every system ---------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """One way of grading the class: stock nbgrader, or ours with its options."""

    stock: bool = False
    jobs: int = 0  # ours: --jobs
    sandboxed: bool = False  # ours: in bubblewrap, or --unsafe-no-sandbox

    @property
    def name(self) -> str:
        if self.stock:
            return "stock nbgrader autograde"
        isolation = "(bubblewrap sandbox)" if self.sandboxed else "--unsafe-no-sandbox"
        return f"ours --jobs {self.jobs} {isolation}"

    @property
    def folder(self) -> str:
        """The name of its course folders, one per run."""
        if self.stock:
            return "stock"
        return f"ours-j{self.jobs}-{'sandbox' if self.sandboxed else 'unsafe'}"


STOCK = System(stock=True)


@dataclass
class SystemRuns:
    system: System
    runs: list[list[Measured]] = field(default_factory=list)  # per run: one or more commands
    roots: list[Path] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.system.name

    def seconds(self) -> list[float]:
        return [sum(m.seconds for m in run) for run in self.runs]

    def failed(self) -> bool:
        return any(m.returncode != 0 for run in self.runs for m in run)


def ours_configs(sandbox: bool) -> list[System]:
    """Ours with one job and with two, sandboxed (when bubblewrap is there) and not."""
    isolations = (True, False) if sandbox else (False,)
    return [System(jobs=jobs, sandboxed=boxed) for jobs in (1, 2) for boxed in isolations]


def grade_class(
    label: str,
    submissions: Path,
    work: Path,
    runs: int,
    stock_runs: int,
    configs: list[System],
) -> list[SystemRuns]:
    """Every system on the class, interleaved (run 1 of each, then run 2 of each, ...) so that a
    change in the machine's load falls on all of them rather than on whichever ran last."""
    stock = SystemRuns(STOCK)
    ours = {system: SystemRuns(system) for system in configs}
    for i in range(max(runs, stock_runs)):
        if i < stock_runs:
            progress(f"{label}: stock nbgrader, run {i + 1}/{stock_runs}")
            root = work / f"{STOCK.folder}-{i}"
            stock.runs.append(run_stock(submissions, root))
            stock.roots.append(root)
        for system in configs if i < runs else []:
            progress(f"{label}: {system.name}, run {i + 1}/{runs}")
            root = work / f"{system.folder}-{i}"
            ours[system].runs.append([run_ours(submissions, root, system.jobs, system.sandboxed)])
            ours[system].roots.append(root)
    return ([stock] if stock_runs else []) + list(ours.values())


def throughput_rows(systems: list[SystemRuns], items: int) -> list[list[object]]:
    """One row per system: seconds per student × notebook, ratio to stock, memory, load."""
    stock = _stock(systems)
    stock_median = statistics.median(stock.seconds()) if stock else None
    rows = []
    for system in systems:
        seconds = system.seconds()
        median = statistics.median(seconds)
        ratio = f"{stock_median / median:.1f}×" if stock_median else "—"
        measured = [m for run in system.runs for m in run]
        rows.append(
            [
                system.name + (" (exit status ≠ 0, see below)" if system.failed() else ""),
                median_and_spread(seconds),
                median_and_spread([s / items for s in seconds]),
                ratio,
                f"{max(m.largest_rss_mb for m in measured):.0f}",
                f"{max(m.tree_rss_mb for m in measured):.0f}",
                _load_range(measured),
            ]
        )
    return rows


def _stock(systems: list[SystemRuns]) -> SystemRuns | None:
    return next((s for s in systems if s.system.stock), None)


def _all(system: SystemRuns) -> list[Measured]:
    return [m for run in system.runs for m in run]


def _problems(measured: Measured) -> list[str]:
    """Why a command's exit status was not 0, and any submission ours could not record (the
    lines under its summary's NOT RECORDED heading)."""
    _, _, after = measured.log.partition("NOT RECORDED")
    listed = itertools.takewhile(lambda line: line.startswith("  "), after.splitlines()[1:])
    lines = [line.strip() for line in listed]
    if measured.returncode != 0:
        lines.append(f"exit status {measured.returncode} (a notebook not recorded)")
    return lines


def _load_range(measured: list[Measured]) -> str:
    loads = [m.load_before for m in measured] + [m.load_after for m in measured]
    return f"{min(loads):.1f}–{max(loads):.1f}"


THROUGHPUT_HEADER = [
    "system",
    "class total s, median (min–max, n)",
    "s per student × notebook",
    "throughput vs stock",
    "peak RSS, largest process MB",
    "peak RSS, process tree MB",
    "load (1 min) during runs",
]


def stock_student_table(stock: SystemRuns, students: list[str]) -> tuple[list[list], float]:
    """Seconds stock nbgrader spent on each student (all notebooks, median over runs), and its
    start-up per `nbgrader autograde` invocation."""
    per_run: list[dict[str, float]] = []
    startups = []
    for run in stock.runs:
        seconds: dict[str, float] = {}
        for measured in run:
            startup, windows = student_windows(measured)
            startups.append(startup)
            for student, window in windows.items():
                seconds[student] = seconds.get(student, 0.0) + window.seconds
        per_run.append(seconds)
    rows = []
    for student in students:
        values = [run.get(student, 0.0) for run in per_run]
        rows.append([student, PROFILES[profile_of(student)].description, median_and_spread(values)])
    return rows, statistics.median(startups)


def stock_errors(stock: SystemRuns) -> dict[tuple[str, str], list[str]]:
    """The errors stock nbgrader logged per student × notebook, in its first run."""
    errors: dict[tuple[str, str], list[str]] = {}
    for assignment, measured in zip(assignments(), stock.runs[0], strict=True):
        for student, window in student_windows(measured)[1].items():
            errors[(student, assignment)] = window.errors
    return errors


def compare_scores(systems: list[SystemRuns], students: list[str]) -> list[str]:
    """Markdown: whether every system recorded the same per-cell scores as stock nbgrader."""
    out = []
    stock = _stock(systems)
    ours = [s for s in systems if not s.system.stock]
    reference_scores = recorded_scores(ours[0].roots[0], students)
    for system in ours:  # ours must agree with itself, run after run, sandboxed or not
        for root in system.roots:
            if recorded_scores(root, students) != reference_scores:
                out.append(f"- **{system.name} ({root.name}) differs from {ours[0].name}.**")
    if not out:
        out.append(
            f"- Every run of every configuration of ours ({len(ours)}) recorded the same per-cell "
            f"scores for all {len(reference_scores)} student × notebook pairs."
        )
    if stock is None:
        return out
    for root in stock.roots[1:]:
        if recorded_scores(root, students) != recorded_scores(stock.roots[0], students):
            out.append(f"- **stock nbgrader's runs disagree with each other ({root.name}).**")
    stock_scores = recorded_scores(stock.roots[0], students)
    rows = score_differences(stock_scores, reference_scores, stock.roots[0], stock_errors(stock))
    same = len(reference_scores) - len(rows)
    out.append(
        f"- Stock nbgrader and ours recorded identical per-cell scores for {same} of "
        f"{len(reference_scores)} student × notebook pairs. The differences:\n"
    )
    header = ["student", "profile", "notebook", "stock total", "ours total", "cause"]
    out.append(markdown_table(header, rows) if rows else "(none)")
    return out


# --- report --------------------------------------------------------------------------------------


def report_class(
    title: str, systems: list[SystemRuns], students: list[str], show_students: bool
) -> dict[System, float]:
    items = len(students) * len(assignments())
    print(f"### {title}: {len(students)} students × {len(assignments())} notebooks = {items}\n")
    print(markdown_table(THROUGHPUT_HEADER, throughput_rows(systems, items)))
    print()
    print("\n".join(compare_scores(systems, students)))
    print()
    for system in systems:
        for problem in sorted({line for m in _all(system) for line in _problems(m)}):
            print(f"- {system.name}: {problem}")
    print()
    medians = {s.system: statistics.median(s.seconds()) for s in systems}
    stock = _stock(systems)
    if stock and show_students:
        rows, startup = stock_student_table(stock, students)
        print(
            f"Stock nbgrader's time per student (all notebooks; from its log's timestamps; "
            f"plus {startup:.1f} s start-up per `nbgrader autograde` invocation):\n"
        )
        print(markdown_table(["student", "profile", "stock s, median (min–max, n)"], rows))
        print()
    return medians


def sandbox_overhead_rows(medians: dict[System, float], items: int) -> list[list[object]]:
    rows = []
    for jobs in (1, 2):
        boxed = medians.get(System(jobs=jobs, sandboxed=True))
        bare = medians.get(System(jobs=jobs, sandboxed=False))
        if boxed is None or bare is None:
            continue
        rows.append(
            [jobs, f"{boxed / items:.2f}", f"{bare / items:.2f}", f"{(boxed - bare) / items:+.2f}"]
        )
    return rows


@contextlib.contextmanager
def grading_workspace(keep: Path | None, prefix: str) -> Iterator[Path]:
    """Where a grading benchmark writes its classes and courses: `keep` (made if missing, left in
    place to be looked at) or, without it, a scratch folder removed at the end, whatever happens.
    Inside, kernels and nbgrader's commands are this environment's, and nbgrader's ORM chatter is
    silenced, as `grader` does."""
    use_this_environment()
    warnings.filterwarnings("ignore", module="nbgrader")
    if keep is not None:
        keep = keep.resolve()
        keep.mkdir(parents=True, exist_ok=True)
        yield keep
        return
    with tempfile.TemporaryDirectory(prefix=prefix, ignore_cleanup_errors=True) as scratch:
        yield Path(scratch).resolve()


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--runs", type=int, default=3, help="runs of each of our configurations")
    parser.add_argument("--stock-runs", type=int, default=2, help="runs of stock nbgrader (demo)")
    parser.add_argument("--students", type=int, default=50, help="size of the generated class")
    parser.add_argument(
        "--stock-students", type=int, default=9, help="generated students stock nbgrader grades"
    )
    parser.add_argument("--generated-runs", type=int, default=1, help="runs on the generated class")
    parser.add_argument("--skip-stock", action="store_true", help="do not run stock nbgrader")
    parser.add_argument("--skip-demo", action="store_true", help="skip the demo class")
    parser.add_argument("--skip-generated", action="store_true", help="skip the generated class")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep gradebooks and logs here (without it, a scratch folder, removed at the end)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    with grading_workspace(args.keep, prefix="grading-bench-") as work:
        sandbox = sandbox_available()
        print_header("Grading throughput: stock nbgrader vs ours")
        print(
            f"Notebooks graded: {', '.join(assignments())}. Seed {SEED} for both. bubblewrap: "
            f"{'available' if sandbox else 'NOT available (ours measured unsandboxed only)'}. "
            f"psutil: {'yes' if psutil else 'no (tree RSS not measured)'}.\n"
        )
        if not args.skip_demo:
            report_demo(args, work, sandbox)
        if not args.skip_generated:
            report_generated(args, work, sandbox)
    return 0


def report_demo(args: argparse.Namespace, work: Path, sandbox: bool) -> None:
    submissions = write_class(work / "demo" / "submissions", PROFILES)
    students = sorted(PROFILES)
    stock_runs = 0 if args.skip_stock else args.stock_runs
    configs = ours_configs(sandbox)
    systems = grade_class("demo", submissions, work / "demo", args.runs, stock_runs, configs)
    medians = report_class("Demo class (grader.release.demo.PROFILES)", systems, students, True)
    items = len(students) * len(assignments())
    print("Sandbox overhead (seconds per student × notebook, medians):\n")
    header = ["--jobs", "sandboxed", "--unsafe-no-sandbox", "sandbox overhead"]
    print(markdown_table(header, sandbox_overhead_rows(medians, items)))
    print()

    looping = [s for s in students if s == "gus"]
    if looping:
        report_without(args, work, sandbox, systems, students, looping)
    stock = medians.get(STOCK)
    boxed = medians.get(System(jobs=2, sandboxed=True)) or medians.get(System(jobs=2))
    if stock and boxed:
        ratio = stock / boxed
        verdict = "**met**" if ratio >= 4 else "**not met**"
        print(
            f"Target --jobs 2 ≥ 4× stock throughput on the demo class: {ratio:.1f}× — {verdict}\n"
        )


def report_without(
    args: argparse.Namespace,
    work: Path,
    sandbox: bool,
    systems: list[SystemRuns],
    students: list[str],
    excluded: list[str],
) -> None:
    """The demo class without the student whose every notebook loops until the time limit: ours
    measured on that smaller class; stock derived from its full runs' per-student log times."""
    kept = {s: p for s, p in PROFILES.items() if s not in excluded}
    submissions = write_class(work / "demo-no-loop" / "submissions", kept)
    configs = ours_configs(sandbox)
    ours = grade_class(
        "demo without the looping student",
        submissions,
        work / "demo-no-loop",
        args.runs,
        0,
        configs,
    )
    items = len(kept) * len(assignments())
    stock = _stock(systems)
    rows = []
    stock_median = None
    if stock:
        totals = []
        for run in stock.runs:
            seconds = 0.0
            for measured in run:
                startup, windows = student_windows(measured)
                seconds += startup + sum(w.seconds for s, w in windows.items() if s not in excluded)
            totals.append(seconds)
        stock_median = statistics.median(totals)
        rows.append(
            [
                "stock nbgrader autograde (derived: full runs minus the looping student's time)",
                median_and_spread(totals),
                median_and_spread([t / items for t in totals]),
                "1.0×",
                "",
                "",
                _load_range([m for run in stock.runs for m in run]),
            ]
        )
    ours_rows = throughput_rows(ours, items)
    for row, system in zip(ours_rows, ours, strict=True):
        if stock_median:
            row[3] = f"{stock_median / statistics.median(system.seconds()):.1f}×"
        rows.append(row)
    print(
        f"### Demo class without {', '.join(excluded)} (an infinite loop in every notebook "
        f"costs each system its {TIMEOUT_S} s limit per notebook): {len(kept)} students × "
        f"{len(assignments())} notebooks = {items}\n"
    )
    print(markdown_table(THROUGHPUT_HEADER, rows))
    print()


def report_generated(args: argparse.Namespace, work: Path, sandbox: bool) -> None:
    profiles = generated_profiles(args.students)
    submissions = write_class(work / "generated" / "submissions", profiles)
    students = sorted(profiles)
    configs = [c for c in ours_configs(sandbox) if c.sandboxed == sandbox]  # as an instructor runs
    systems = grade_class(
        "generated", submissions, work / "generated", args.generated_runs, 0, configs
    )
    items = len(students) * len(assignments())
    kinds = len(set(map(profile_of, students)))
    title = f"Generated class ({args.students} students, copies of {kinds} profiles)"
    report_class(title, systems, students, False)

    stock_seconds = None
    if not args.skip_stock and args.stock_students:
        subset = dict(list(profiles.items())[: args.stock_students])
        sub_submissions = write_class(work / "generated-subset" / "submissions", subset)
        stock = grade_class(
            "generated subset", sub_submissions, work / "generated-subset", 0, 1, []
        )[0]
        run = stock.runs[0]
        startup = sum(student_windows(m)[0] for m in run)
        measured = sum(m.seconds for m in run)
        per_item = (measured - startup) / (len(subset) * len(assignments()))
        stock_seconds = startup + per_item * items
        print(
            f"Stock nbgrader on the first {len(subset)} students of this class (one of each "
            f"profile when ≥ {len(set(map(profile_of, students)))}): {measured:.0f} s measured "
            f"(load {_load_range(run)}), of which {startup:.1f} s nbgrader start-up over "
            f"{len(run)} invocations; {per_item:.2f} s per student × notebook. "
            f"**Extrapolated** to {args.students} students: {stock_seconds:.0f} s "
            f"({stock_seconds / 60:.0f} min).\n"
        )
        theirs = recorded_scores(stock.roots[0], sorted(subset))
        mine = recorded_scores(systems[0].roots[0], sorted(subset))
        rows = score_differences(theirs, mine, stock.roots[0], stock_errors(stock))
        print(
            f"Per-cell scores on that subset, stock vs {systems[0].name}: identical for "
            f"{len(mine) - len(rows)} of {len(mine)} student × notebook pairs.\n"
        )
        if rows:
            header = ["student", "profile", "notebook", "stock total", "ours total", "cause"]
            print(markdown_table(header, rows) + "\n")
    rows, overheads = [], {}
    code = mean_student_code_seconds(profiles)
    for system in systems:
        median = statistics.median(system.seconds())
        overheads[system.system] = median / items - code
        ratio = f"{stock_seconds / median:.1f}× (vs extrapolated stock)" if stock_seconds else "—"
        rows.append(
            [
                system.name,
                f"{median / items:.2f}",
                f"{code:.3f}",
                f"{overheads[system.system]:.2f}",
                ratio,
            ]
        )
    print(
        "Our fixed cost per student × notebook: wall time per item minus the student's own code "
        "(answers defined and called on every hidden check's inputs, timed in-process without "
        "the grader's instrumentation; mean over this class):\n"
    )
    header = ["system", "s per item", "student code s", "grading overhead s", "throughput"]
    print(markdown_table(header, rows))
    progress("breakdown of our time for one student ...")
    print(
        "\nWhere the time goes, per notebook of one correct student (ada), unsandboxed, "
        "--jobs 1, in-process (seconds, median of 3):\n"
    )
    header = ["phase", "s per notebook", "load (1 min)"]
    print(markdown_table(header, breakdown_rows(work / "breakdown", 3)))
    jobs1 = next((s for s in overheads if s.jobs == 1), None)
    if jobs1:
        verdict = "**met**" if overheads[jobs1] < 1.5 else "**not met**"
        print(
            f"\nTarget overhead < 1.5 s per student × notebook (--jobs 1): "
            f"{overheads[jobs1]:.2f} s — {verdict}\n"
        )


if __name__ == "__main__":
    sys.exit(main())
