"""Grade one submitted notebook: plan the checks here, run the answers in the runner, judge here.

Only plain arrays cross back from the runner (.npz read with allow_pickle=False, and a small
JSON record); the comparison with the reference and the score happen in this process.

A runner that fails for a reason of the grader's (it cannot start or read its job, the disk is
full, the grader is stopping) raises `GraderFault`: never a score. Only what happened after the
runner said an exercise had started (see grader.runner) can cost that exercise points.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from grader import record
from grader.checks import EXERCISES
from grader.checks.core import Outputs, StudentError, Verdict, judge, plan
from grader.checks.integrity import forbidden_uses, integrity_message
from grader.config import (
    EXERCISE_CPU_SECONDS,
    EXERCISE_FILE_MB,
    EXERCISE_MEMORY_MB,
    EXERCISE_SECONDS,
    RELEASE,
    RUNNER_GRACE_SECONDS,
    SOLUTIONS,
)
from grader.course import ExerciseResult
from grader.notebook import Submission
from grader.sandbox import Sandbox, runner_env
from grader.untrusted import write_replacing

TAIL_CHARS = 300  # of a failed runner's stderr, to name the cause


class GraderFault(RuntimeError):
    """The grader, not the student, failed: nothing may be recorded as a grade."""


class Stopped(GraderFault):
    """The grader was asked to stop (a signal) while this was being graded."""


class Runners:
    """The runner processes alive, so that a stop can kill them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: set[subprocess.Popen] = set()
        self.stopping = threading.Event()

    @contextmanager
    def track(self, process: subprocess.Popen) -> Iterator[None]:
        with self._lock:
            self._alive.add(process)
            if self.stopping.is_set():  # raced with stop(): it did not see this one
                _kill_group(process)
        try:
            yield
        finally:
            with self._lock:
                self._alive.discard(process)

    def stop(self) -> None:
        """Kill every runner (each in its own process group) and refuse to start new ones."""
        with self._lock:
            self.stopping.set()
            for process in self._alive:
                _kill_group(process)

    def reset(self) -> None:
        self.stopping.clear()


RUNNERS = Runners()


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass(frozen=True)
class Limits:
    memory_mb: int = EXERCISE_MEMORY_MB
    cpu_seconds: int = EXERCISE_CPU_SECONDS
    file_mb: int = EXERCISE_FILE_MB
    processes: int = 0  # 0: not limited (RLIMIT_NPROC only binds for the sandbox's own uid)
    wall_seconds: float = EXERCISE_SECONDS


DEFAULT_LIMITS = Limits()


def _verdict_for_all(name: str, error: StudentError, planned) -> Verdict:
    return judge(EXERCISES[name], planned, [error] * len(planned))


def _write_inputs(job: Path, name: str, planned) -> None:
    folder = job / "in" / name
    folder.mkdir(parents=True)
    for i, (_, inputs) in enumerate(planned):
        np.savez(folder / f"{i}.npz", **inputs)


def _read_outputs(job: Path, name: str, cases: int, seal: str) -> tuple[list[Outputs], set[str]]:
    """The runner's record for one exercise, trusting nothing but its shape (the job folder is
    the student's: no link, FIFO or oversized file in it is followed, waited on or loaded), and
    only if it is the record the runner sealed when the exercise finished."""
    try:
        meta, npz = record.read(job, name)
    except FileNotFoundError:
        return _crashed(name, cases)
    except (OSError, ValueError):  # Refused: a link, a special or oversized file
        error = StudentError(
            "crash", f"`{name}` left a result that is not plain arrays (a link, a special file)."
        )
        return [error] * cases, set()
    if record.digest(meta, npz) != seal:
        error = StudentError("crash", f"`{name}`'s result was written by other code than its own.")
        return [error] * cases, set()
    try:
        fields = json.loads(meta)
        assert isinstance(fields, dict)
    except (ValueError, AssertionError):  # bad JSON or UTF-8
        error = StudentError("crash", f"`{name}` left a result that is not the runner's.")
        return [error] * cases, set()
    if "load_error" in fields:
        kind, message = fields["load_error"]
        return [StudentError(str(kind), str(message))] * cases, set()
    errors = fields.get("errors", {})
    try:
        arrays = _plain_arrays(npz)
    except (OSError, ValueError, MemoryError, zipfile.BadZipFile):  # MemoryError: a forged shape
        error = StudentError("crash", f"`{name}` left a result that is not plain arrays.")
        return [error] * cases, set()
    outputs: list[Outputs] = []
    for i in range(cases):
        if str(i) in errors:
            kind, message = errors[str(i)]
            outputs.append(StudentError(str(kind), str(message)))
        else:
            prefix = f"{i}/"
            outputs.append({k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)})
    return outputs, {str(c) for c in fields.get("calls", [])}


def _plain_arrays(npz: bytes) -> dict[str, np.ndarray]:
    """The arrays of an .npz as the runner writes it (np.savez: stored, not compressed, so they
    take no more memory than the file). Never unpickled: an object array is refused, not loaded;
    a compressed member (a zip bomb) is refused unread."""
    with zipfile.ZipFile(io.BytesIO(npz)) as archive:
        if any(m.compress_type != zipfile.ZIP_STORED for m in archive.infolist()):
            raise ValueError("compressed")
    with np.load(io.BytesIO(npz), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def run_job(
    job: Path, limits: Limits, sandbox: Sandbox | None, cases: int
) -> list[tuple[str, str | None]]:
    """Start the runner on `job` (in the sandbox, if any) and wait, killing it if it overruns;
    returns the exercises it started, in order, each with the seal of its record when it
    finished (None: it took the runner down, so its record is not believed). Raises GraderFault
    when it failed before any student code ran, or said it could not keep its records."""
    if RUNNERS.stopping.is_set():
        raise Stopped("the grader was stopped")
    timeout = limits.wall_seconds * max(cases, 1) + RUNNER_GRACE_SECONDS
    command = [sys.executable, "-m", "grader.runner", str(job)]
    out, err = _run(command if sandbox is None else sandbox.command(command, job), job, timeout)
    if RUNNERS.stopping.is_set():
        raise Stopped("the grader was stopped")
    lines = [line.partition(" ") for line in out.splitlines()]
    faults = [rest for word, _, rest in lines if word == "fault"]
    started = [rest for word, _, rest in lines if word == "started"]
    seals = dict(rest.partition(" ")[::2] for word, _, rest in lines if word == "done")
    if faults:
        raise GraderFault(faults[0])
    if not started:  # no student code ran: whatever stopped it was not the student's doing
        last = err.strip().splitlines()[-1:] or ["no message"]
        raise GraderFault(f"the runner did not start its job ({last[0][:TAIL_CHARS]})")
    return [(name, seals.get(name)) for name in started]


def _run(command: list[str], job: Path, timeout: float) -> tuple[str, str]:
    """Run the runner in its own process group (a terminal's Ctrl-C is the grader's to handle,
    not the runner's to die of), killed on overrun or stop; returns its stdout and stderr."""
    process = subprocess.Popen(
        command,
        cwd=job,
        env=runner_env(job),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    with RUNNERS.track(process):
        try:
            return process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return process.communicate()


def grade_notebook(
    path: Path,
    assignment: str,
    seed: int,
    limits: Limits = DEFAULT_LIMITS,
    sandbox: Sandbox | None = None,
    hidden: bool = True,
) -> list[ExerciseResult]:
    """Every exercise of `assignment` in the notebook at `path`, in the notebook's order, graded
    against the checkout's course source.

    The visible checks alone (`grader check`) take the exercises and the imports cell from the
    student release, so they run where the course source (the answer key) is not installed.
    """
    submission = Submission.read(path, assignment, SOLUTIONS if hidden else RELEASE)
    return grade_submissions([submission], seed, limits, sandbox, hidden)[0]


def grade_submissions(
    submissions: list[Submission],
    seed: int,
    limits: Limits = DEFAULT_LIMITS,
    sandbox: Sandbox | None = None,
    hidden: bool = True,
    scratch: Path | None = None,
) -> list[list[ExerciseResult]]:
    """One student's notebooks graded by one runner, which pays Python's and torch's start-up
    once; each exercise still runs in its own forked, limited process.

    Args:
        scratch: the folder to hold the runners' job folders (default: the system's temporary
            folder). Raises GraderFault when a runner fails for the grader's reasons.
    """
    verdicts: dict[str, Verdict] = {}
    causes: dict[str, str] = {}
    plans, specs = {}, []
    for submission in submissions:
        for name in submission.exercises:
            plans[name] = plan(EXERCISES[name], hidden, seed)
            answer = submission.answers[name]
            if submission.problem:
                reason = StudentError("missing", f"Not graded: {submission.problem}.")
            elif answer is None:
                missing = f"No answer cell defines `{name}` (was it renamed or deleted?)."
                reason = StudentError("missing", missing)
            else:
                setup, cases = submission.setup, len(plans[name])
                specs.append({"name": name, "setup": setup, "source": answer, "cases": cases})
                continue
            verdicts[name] = _verdict_for_all(name, reason, plans[name])
            causes[name] = reason.kind
    answers = {name: a for s in submissions for name, a in s.answers.items()}
    for name, outputs, calls in _run_all(specs, plans, limits, sandbox, scratch):
        static = forbidden_uses(answers[name], EXERCISES[name])
        integrity = integrity_message(EXERCISES[name], static, calls)
        verdicts[name] = judge(EXERCISES[name], plans[name], outputs, integrity)
        causes[name] = _cause(outputs)
    return [[_result(verdicts[n], causes[n]) for n in s.exercises] for s in submissions]


def _cause(outputs: list[Outputs]) -> str:
    """The runner's reason when no output of an exercise could be judged (crash, timeout)."""
    kinds = {o.kind if isinstance(o, StudentError) else "" for o in outputs}
    return kinds.pop() if len(kinds) == 1 and kinds <= {"crash", "timeout"} else ""


def _run_all(specs: list[dict], plans: dict, limits: Limits, sandbox, scratch: Path | None):
    """Run every exercise, yielding (name, outputs, calls). When an answer takes the runner
    down with it, the exercise that was running is reported as crashed and the ones not yet
    started run again in a fresh runner, so the honest answers keep their points. Each runner
    gets a fresh job folder; a grader fault is tried once more, then raised."""
    remaining, faults = list(specs), 0
    while remaining:
        try:
            done = _run_in_fresh_job(remaining, plans, limits, sandbox, scratch)
        except Stopped:
            raise
        except GraderFault:
            faults += 1
            if faults > 1:
                raise
            continue
        yield from done
        finished = {name for name, *_ in done}
        remaining = [s for s in remaining if s["name"] not in finished]


def _run_in_fresh_job(specs: list[dict], plans: dict, limits: Limits, sandbox, scratch):
    """One runner on `specs` in a new job folder: the (name, outputs, calls) of every exercise
    it started, in order (an absent record reads as a crash)."""
    try:
        folder = tempfile.TemporaryDirectory(prefix="grade-", dir=scratch)
    except OSError as error:
        raise GraderFault(f"could not make a job folder in {scratch} ({error})") from None
    with folder:
        job = Path(folder.name)
        try:
            for spec in specs:
                _write_inputs(job, spec["name"], plans[spec["name"]])
            job_file = {"exercises": specs, "limits": asdict(limits)}
            write_replacing(job, "job.json", json.dumps(job_file).encode())
        except OSError as error:
            raise GraderFault(f"could not write the runner's job in {job} ({error})") from None
        started = run_job(job, limits, sandbox, len(specs))
        cases = {s["name"]: s["cases"] for s in specs}
        return [
            (n, *(_read_outputs(job, n, cases[n], seal) if seal else _crashed(n, cases[n])))
            for n, seal in started
        ]


def _crashed(name: str, cases: int) -> tuple[list[Outputs], set[str]]:
    return [
        StudentError("crash", f"`{name}` crashed the grading process (no result).")
    ] * cases, set()


def _result(verdict: Verdict, cause: str) -> ExerciseResult:
    return ExerciseResult(
        verdict.exercise.name, verdict.score, verdict.max_score, verdict.render(), cause
    )
