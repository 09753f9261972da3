"""Grade one submitted notebook: plan the checks here, run the answers in the runner, judge here.

The runner gets its job on its stdin and sends each exercise's result on its stdout (see
grader.grading.sandboxed.runner); nothing is read back from a file. Only plain arrays cross back (an
.npz read with allow_pickle=False, and a small JSON object); the comparison with the reference and
the score happen in this process.

A runner that fails for a reason of the grader's (it cannot start or read its job, fork, the
grader is stopping) raises `GraderFault`: never a score. Only what happened after the runner
said an exercise had started can cost that exercise points.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

from grader.checks import EXERCISES, prepared
from grader.checks.core import Exercise, Outputs, StudentError, Verdict, judge
from grader.course import Diagnosis, ExerciseResult
from grader.course.config import (
    EXERCISE_CPU_SECONDS,
    EXERCISE_FILE_MB,
    EXERCISE_MEMORY_MB,
    EXERCISE_SECONDS,
    RELEASE,
    RUNNER_GRACE_SECONDS,
    SOLUTIONS,
)
from grader.course.intake import Submission
from grader.grading.prestarted import Prestarted, PrestartFailed
from grader.grading.sandbox import RUNNER_MODULE, Sandbox, runner_env, runner_setup
from grader.grading.sandboxed import record
from grader.grading.watch import Clock, exchange, protocol
from normcheck.integrity import forbidden_uses, integrity_message

TAIL_CHARS = 300  # of a failed runner's stderr, to name the cause


class GraderFault(RuntimeError):
    """The grader, not the student, failed: nothing may be recorded as a grade."""


class Stopped(GraderFault):
    """The grader was asked to stop (a signal) while this was being graded."""


class Runners:
    """The runners alive, each by the function that kills it (with everything it started), so
    that a stop can kill them all at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: set[Callable[[], None]] = set()
        self.stopping = threading.Event()

    @contextmanager
    def track(self, kill: Callable[[], None]) -> Iterator[None]:
        with self._lock:
            self._alive.add(kill)
            if self.stopping.is_set():  # raced with stop(): it did not see this one
                kill()
        try:
            yield
        finally:
            with self._lock:
                self._alive.discard(kill)

    def stop(self) -> None:
        """Kill every runner and refuse to start new ones."""
        with self._lock:
            self.stopping.set()
            for kill in self._alive:
                kill()

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
# An answer's code, as the runner's job frame holds it (JSON): a solution takes 2 to 5 KB, and
# sixteen answers at the limit fit the frame's 1 MB (record.MAX_JSON_BYTES) with their setup.
MAX_ANSWER_CHARACTERS = 48 << 10


def _verdict_for_all(name: str, error: StudentError, ready) -> Verdict:
    return judge(EXERCISES[name], ready.planned, [error] * len(ready.planned), "", ready.expected)


def _job_frames(specs: list[dict], plans: dict, limits: Limits) -> bytes:
    """The runner's stdin: what to run, then each exercise's inputs, one frame each."""
    frames = [record.encode({"exercises": specs, "limits": asdict(limits)}, {})]
    for spec in specs:
        inputs = plans[spec["name"]]
        arrays = {f"{i}/{k}": v for i, (_, case) in enumerate(inputs) for k, v in case.items()}
        frames.append(record.encode({}, arrays))
    return b"".join(len(f).to_bytes(record.HEADER_BYTES, "big") + f for f in frames)


def _outputs(name: str, cases: int, frame: bytes | None) -> tuple[list[Outputs], set[str]]:
    """One exercise's result as the runner sent it (None: it took the runner down with it),
    trusting nothing but its shape: it was written by the answer's own process."""
    if frame is None:
        return _crashed(name, cases)
    try:
        fields, arrays = record.decode(frame)
        record.check_result(fields, arrays)
    except record.BadFrame as error:
        return [StudentError("crash", f"`{name}` sent a result that is {error}.")] * cases, set()
    if "load_error" in fields:
        kind, message = fields["load_error"]
        return [StudentError(str(kind), str(message))] * cases, set()
    errors = fields.get("errors", {})
    outputs: list[Outputs] = []
    for i in range(cases):
        if str(i) in errors:
            kind, message = errors[str(i)]
            outputs.append(StudentError(str(kind), str(message)))
        else:
            prefix = f"{i}/"
            outputs.append({k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)})
    return outputs, {str(c) for c in fields.get("calls", [])}


def run_job(
    job: Path,
    frames: bytes,
    limits: Limits,
    sandbox: Sandbox | None,
    cases: int,
    prestarted: Prestarted | None = None,
) -> list[tuple[str, bytes | None]]:
    """Start the runner in the folder `job` (in the sandbox, if any; forked from `prestarted`,
    if given, `job` in its folder), send it `frames` and wait, killing it if it overruns;
    returns the exercises it started, in order, each with the frame of its result (None: it
    took the runner down, so it has none). Raises GraderFault when the runner failed before
    any student code ran, or said it could not do its part."""
    if RUNNERS.stopping.is_set():
        raise Stopped("the grader was stopped")
    clock = Clock(limits.wall_seconds * max(cases, 1) + RUNNER_GRACE_SECONDS, limits.wall_seconds)
    module = "grader.grading.sandboxed.runner" if sandbox is None else RUNNER_MODULE
    command = [sys.executable, "-P", "-m", module]
    if prestarted is not None:
        try:
            out, err = prestarted.run(job, frames, clock, RUNNERS.track)
        except PrestartFailed as error:
            raise GraderFault(str(error)) from None
    else:
        out, err = _run(
            command if sandbox is None else sandbox.command(command, job), job, frames, clock
        )
    if RUNNERS.stopping.is_set():
        raise Stopped("the grader was stopped")
    started, results, fault = protocol(out)
    if fault:
        raise GraderFault(fault)
    if not started:  # no student code ran: whatever stopped it was not the student's doing
        last = err.decode(errors="replace").strip().splitlines()[-1:] or ["no message"]
        raise GraderFault(f"the runner did not start its job ({last[0][:TAIL_CHARS]})")
    return [(name, results.get(name)) for name in started]


def _run(command: list[str], job: Path, frames: bytes, clock: Clock) -> tuple[bytes, bytes]:
    """Run the runner in its own process group (a terminal's Ctrl-C is the grader's to handle,
    not the runner's to die of), killed when `clock` says its time is up or on a stop; `frames`
    is its stdin; returns its stdout and stderr."""
    stdin, stdout, stderr = os.pipe(), os.pipe(), os.pipe()
    try:
        process = subprocess.Popen(
            command,
            cwd=job,
            env=runner_env(job),
            stdin=stdin[0],
            stdout=stdout[1],
            stderr=stderr[1],
            start_new_session=True,
        )
    except OSError:
        for fd in (*stdin, *stdout, *stderr):
            os.close(fd)
        raise
    for fd in (stdin[0], stdout[1], stderr[1]):
        os.close(fd)
    kill = functools.partial(_kill_group, process)
    with RUNNERS.track(kill):
        try:
            return exchange(stdin[1], stdout[0], stderr[0], frames, clock, kill)
        finally:
            process.wait()


def grade_notebook_file(
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
    return grade_in_one_runner([submission], seed, limits, sandbox, hidden)[0]


def grade_in_one_runner(
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
    ready = {n: prepared(n, hidden, seed) for s in submissions for n in s.exercises}  # per run
    plans, specs = {name: r.planned for name, r in ready.items()}, []
    for submission in submissions:
        for name in submission.exercises:
            answer = submission.answers[name]
            if submission.problem:
                reason = StudentError("missing", f"Not graded: {submission.problem}.")
            elif answer is None:
                missing = f"No answer cell defines `{name}` (was it renamed or deleted?)."
                reason = StudentError("missing", missing)
            elif len(json.dumps(answer)) > MAX_ANSWER_CHARACTERS:
                size = f"{len(answer.encode(errors='replace')) // 1024} KB"
                limit = f"{MAX_ANSWER_CHARACTERS // 1024} KB"
                too_large = f"Not graded: `{name}`'s code is {size}, over {limit}."
                reason = StudentError("too_large", too_large)
            else:
                specs.append(_spec(EXERCISES[name], runner_setup(submission.setup), answer, plans))
                continue
            verdicts[name] = _verdict_for_all(name, reason, ready[name])
            causes[name] = reason.kind
    answers = {name: a for s in submissions for name, a in s.answers.items()}
    for name, outputs, calls in _run_all(specs, plans, limits, sandbox, scratch):
        static = forbidden_uses(answers[name], EXERCISES[name])
        integrity = integrity_message(EXERCISES[name], static, calls)
        expected = ready[name].expected
        try:
            verdicts[name] = judge(EXERCISES[name], plans[name], outputs, integrity, expected)
        except Exception as error:  # outputs the answer's process shaped: its exercise's crash
            unjudged = StudentError(
                "crash", f"`{name}`'s outputs could not be judged ({str(error)[:200]})."
            )
            verdicts[name] = _verdict_for_all(name, unjudged, ready[name])
            outputs = [unjudged]
        causes[name] = _cause(outputs)
    return [[_result(verdicts[n], causes[n]) for n in s.exercises] for s in submissions]


def _spec(exercise: Exercise, setup: str, source: str, plans: dict) -> dict:
    """What the runner is told of one exercise: the code to run, how to call the answer and
    what it must not call (nothing of the checks themselves)."""
    return {
        "name": exercise.name,
        "setup": setup,
        "source": source,
        "probe": exercise.probe.__name__,
        "forbidden": list(exercise.forbidden),
        "operators": list(exercise.forbidden.operators),
        "python": list(exercise.forbidden.python),
        "cases": len(plans[exercise.name]),
    }


def _cause(outputs: list[Outputs]) -> str:
    """Why no output of an exercise could be judged: the runner's reason (crash, timeout), or
    "unanswered" when every call raised the stub's NotImplementedError."""
    kinds = {o.kind if isinstance(o, StudentError) else "" for o in outputs}
    if kinds == {"NotImplementedError"}:
        return "unanswered"
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
    """One runner on `specs` in a new job folder (its working directory, which it may write),
    forked from a pre-started runner when the sandbox has a pool of them: the (name, outputs,
    calls) of every exercise it started, in order."""
    pool = sandbox.pool if isinstance(sandbox, Sandbox) else None
    with pool.runner() if pool else nullcontext() as prestarted:
        where = prestarted.root if prestarted else scratch
        try:
            folder = tempfile.TemporaryDirectory(prefix="grade-", dir=where)
        except OSError as error:
            raise GraderFault(f"could not make a job folder in {where} ({error})") from None
        with folder:
            frames = _job_frames(specs, plans, limits)
            started = run_job(Path(folder.name), frames, limits, sandbox, len(specs), prestarted)
    cases = {s["name"]: s["cases"] for s in specs}
    return [(name, *_outputs(name, cases[name], frame)) for name, frame in started]


def _crashed(name: str, cases: int) -> tuple[list[Outputs], set[str]]:
    return [
        StudentError("crash", f"`{name}` crashed the grading process (no result).")
    ] * cases, set()


def _result(verdict: Verdict, cause: str) -> ExerciseResult:
    diagnoses = tuple(Diagnosis(m.name, m.message) for m in verdict.diagnoses)
    return ExerciseResult(
        verdict.exercise.name,
        verdict.score,
        verdict.max_score,
        verdict.render(),
        cause,
        diagnoses,
        verdict.visible().render(),
    )
