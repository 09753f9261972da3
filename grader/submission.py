"""Grade one submitted notebook: plan the checks here, run the answers in the runner, judge here.

Only plain arrays cross back from the runner (.npz read with allow_pickle=False, and a small
JSON record); the comparison with the reference and the score happen in this process.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath

import numpy as np

from grader.checks import EXERCISES
from grader.checks.core import Outputs, StudentError, Verdict, judge, plan
from grader.checks.integrity import forbidden_uses, integrity_message
from grader.config import RELEASE
from grader.notebook import (
    answer_source,
    exercises_of,
    read_notebook,
    setup_code,
    source_notebook,
)
from grader.sandbox import Sandbox, runner_env
from grader.untrusted import read_below, write_replacing

MAX_RECORD_BYTES = 1 << 20
MAX_ARRAYS_BYTES = 64 << 20  # the runner cannot write more (Limits.file_mb)


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 3000  # torch needs ~1 GB of address space to import
    cpu_seconds: int = 60
    file_mb: int = 64
    processes: int = 0  # 0: not limited (RLIMIT_NPROC only binds for the sandbox's own uid)
    wall_seconds: float = 60


@dataclass(frozen=True)
class ExerciseResult:
    """What the gradebook and the feedback need of one exercise: plain numbers and text."""

    name: str
    score: float
    max_score: float
    feedback: str


DEFAULT_LIMITS = Limits()


def _verdict_for_all(name: str, error: StudentError, planned) -> Verdict:
    return judge(EXERCISES[name], planned, [error] * len(planned))


def _write_inputs(job: Path, name: str, planned) -> None:
    folder = job / "in" / name
    folder.mkdir(parents=True)
    for i, (_, inputs) in enumerate(planned):
        np.savez(folder / f"{i}.npz", **inputs)


def _read_outputs(job: Path, name: str, cases: int) -> tuple[list[Outputs], set[str]]:
    """The runner's record for one exercise, trusting nothing but its shape (the job folder is
    the student's: no link, FIFO or oversized file in it is followed, waited on or loaded)."""
    try:
        record = json.loads(read_below(job, PurePath("out", f"{name}.json"), MAX_RECORD_BYTES))
        assert isinstance(record, dict)
    except FileNotFoundError:
        error = StudentError("crash", f"`{name}` crashed the grading process (no result).")
        return [error] * cases, set()
    except (OSError, ValueError, AssertionError):  # Refused, bad JSON or UTF-8
        error = StudentError("crash", f"`{name}` left a result that is not the runner's.")
        return [error] * cases, set()
    if "load_error" in record:
        kind, message = record["load_error"]
        return [StudentError(str(kind), str(message))] * cases, set()
    errors = record.get("errors", {})
    try:
        arrays = _plain_arrays(read_below(job, PurePath("out", f"{name}.npz"), MAX_ARRAYS_BYTES))
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
    return outputs, {str(c) for c in record.get("calls", [])}


def _plain_arrays(npz: bytes) -> dict[str, np.ndarray]:
    """The arrays of an .npz as the runner writes it (np.savez: stored, not compressed, so they
    take no more memory than the file). Never unpickled: an object array is refused, not loaded;
    a compressed member (a zip bomb) is refused unread."""
    with zipfile.ZipFile(io.BytesIO(npz)) as archive:
        if any(m.compress_type != zipfile.ZIP_STORED for m in archive.infolist()):
            raise ValueError("compressed")
    with np.load(io.BytesIO(npz), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}


def run_job(job: Path, limits: Limits, sandbox: Sandbox | None, cases: int) -> None:
    """Start the runner on `job` (in the sandbox, if any) and wait, killing it if it overruns."""
    command = [sys.executable, "-m", "grader.runner", str(job)]
    env = runner_env(job)
    timeout = limits.wall_seconds * max(cases, 1) + 60
    if sandbox is None:
        subprocess.run(command, cwd=job, env=env, timeout=timeout, capture_output=True)
        return
    subprocess.run(sandbox.command(command, job), env=env, timeout=timeout, capture_output=True)


def grade_notebook(
    path: Path,
    assignment: str,
    seed: int,
    limits: Limits = DEFAULT_LIMITS,
    sandbox: Sandbox | None = None,
    hidden: bool = True,
) -> list[ExerciseResult]:
    """Every exercise of `assignment` in the notebook at `path`, in the notebook's order."""
    return grade_notebooks([(path, assignment)], seed, limits, sandbox, hidden)[0]


def grade_notebooks(
    notebooks: list[tuple[Path, str]],
    seed: int,
    limits: Limits = DEFAULT_LIMITS,
    sandbox: Sandbox | None = None,
    hidden: bool = True,
) -> list[list[ExerciseResult]]:
    """One student's notebooks (path, assignment) graded by one runner, which pays Python's and
    torch's start-up once; each exercise still runs in its own forked, limited process.

    The visible checks alone (`grader check`) take the exercises and the imports cell from the
    student release, so they run where the course source (the answer key) is not installed.
    """
    verdicts: dict[str, Verdict] = {}
    names_by_notebook, plans, answers, specs = [], {}, {}, []
    for path, assignment in notebooks:
        source = source_notebook(assignment, None if hidden else RELEASE)
        names = exercises_of(source)
        names_by_notebook.append(names)
        plans.update({n: plan(EXERCISES[n], hidden, seed) for n in names})
        try:
            notebook = read_notebook(path)
        except ValueError as error:
            reason = StudentError("missing", f"Not graded: {error}.")
            verdicts.update({n: _verdict_for_all(n, reason, plans[n]) for n in names})
            continue
        for name in names:
            answers[name] = answer_source(notebook, name)
            if answers[name] is None:
                missing = f"No answer cell defines `{name}` (was it renamed or deleted?)."
                reason = StudentError("missing", missing)
                verdicts[name] = _verdict_for_all(name, reason, plans[name])
                continue
            specs.append(
                {
                    "name": name,
                    "setup": setup_code(source),
                    "source": answers[name],
                    "cases": len(plans[name]),
                }
            )
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        job = Path(scratch)
        for spec in specs:
            _write_inputs(job, spec["name"], plans[spec["name"]])
        for name, outputs, calls in _run_all(job, specs, limits, sandbox):
            static = forbidden_uses(answers[name], EXERCISES[name])
            integrity = integrity_message(EXERCISES[name], static, calls)
            verdicts[name] = judge(EXERCISES[name], plans[name], outputs, integrity)
    return [[_result(verdicts[n]) for n in names] for names in names_by_notebook]


def _run_all(job: Path, specs: list[dict], limits: Limits, sandbox: Sandbox | None):
    """Run every exercise, yielding (name, outputs, calls). When an answer takes the runner
    down with it, the exercise that was running is reported as crashed and the ones not yet
    started run again in a fresh runner, so the honest answers keep their points."""
    remaining = list(specs)
    while remaining:
        spec = {"exercises": remaining, "limits": asdict(limits)}
        write_replacing(job, "job.json", json.dumps(spec).encode())
        try:
            run_job(job, limits, sandbox, len(remaining))
        except subprocess.TimeoutExpired:
            pass
        started = [s for s in remaining if (job / "out" / f"{s['name']}.started").exists()]
        if not started:  # the runner never ran: nothing can be graded, nothing is retried
            started = remaining
        for s in started:  # an absent record reads as a crash
            yield (s["name"], *_read_outputs(job, s["name"], s["cases"]))
        remaining = [s for s in remaining if s not in started]


def _result(verdict: Verdict) -> ExerciseResult:
    return ExerciseResult(verdict.exercise.name, verdict.score, verdict.max_score, verdict.render())
