"""The only process in which a student's code runs while grading: `python -m grader.runner JOB`.

The grader writes a job directory (the answer cells, and the inputs of every check as .npz);
this runner executes each exercise in its own forked child, under resource limits, and the child
writes back plain arrays (`out/<exercise>.npz`) and a small JSON record of errors and of the
forbidden library calls it saw. A crash, hang or memory bomb in one exercise costs only that
exercise. Nothing here decides a score: the grader compares the arrays in its own process.

What the grader must know for sure travels as lines on this process's stdout, which no student
code can write: the children's stdout is /dev/null, the pipe belongs to the grader's uid (a child
cannot reopen it through /proc/<runner>/fd/1), and this process is not dumpable (a child of the
same uid can neither ptrace it nor write its memory to make it speak):
- `ready`: the job was read and the warm-up done, before any student code ran. A runner that
  never says it failed for the grader's reasons (it could not start or read its job);
- `started <exercise>`: student code is about to run, so a death from here on is the answer's;
- `done <exercise> <digest>`: its record is complete, and sealed by its digest (grader.record):
  a record without `done`, or whose digest differs, is not believed (the runner died while the
  answer ran, or another answer wrote it);
- `fault <reason>`: the runner could not keep its own records (e.g. the disk is full), which
  is not the answer's doing either.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import resource
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

from grader import record
from grader.checks import EXERCISES
from grader.checks.core import StudentError
from grader.checks.probe import call, load_answer, tripwires
from grader.sandboxed import blocking

MB = 1 << 20
# Read once, before any student code runs: set by grader.sandbox's bubblewrap command line.
IN_SANDBOX = os.environ.get("GRADER_SANDBOX") == "1"
# Below this much free space on the job's disk, a missing record is the full disk's fault.
MIN_FREE_BYTES = 64 * MB
# Errors of the runner's own writes that say nothing about the answer.
DISK_FAULTS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS}
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
_LIBC = ctypes.CDLL(None, use_errno=True)


class RunnerFault(Exception):
    """The runner cannot do its part; the grader must not blame the answer."""


def tell(*words: str) -> None:
    """One line of the protocol to the grader (see the module's docstring)."""
    print(*words, flush=True)


def _die_with_parent() -> None:
    """Be killed when the parent dies, so that a stopped grader leaves no process behind."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _set_dumpable(on: bool) -> None:
    _LIBC.prctl(PR_SET_DUMPABLE, int(on), 0, 0, 0)


def _limit(kind: int, value: int) -> None:
    resource.setrlimit(kind, (value, value))


def apply_limits(limits: dict) -> None:
    """Per-exercise limits; RLIMIT_NPROC only binds for a non-root uid (the sandbox's)."""
    _limit(resource.RLIMIT_AS, limits["memory_mb"] * MB)
    _limit(resource.RLIMIT_CPU, limits["cpu_seconds"])
    _limit(resource.RLIMIT_FSIZE, limits["file_mb"] * MB)
    if limits.get("processes"):
        _limit(resource.RLIMIT_NPROC, limits["processes"])
    _limit(resource.RLIMIT_CORE, 0)


def _silence() -> None:
    """What the student prints goes nowhere: it can neither flood the grader nor speak for it."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _record(job: Path, name: str, arrays: dict, meta: dict) -> None:
    meta_path, arrays_path = record.paths(name)
    np.savez(job / arrays_path, **arrays)
    (job / meta_path).write_text(json.dumps(meta))


def _kill_leftovers(pid: int) -> None:
    """Kill what the answer left running: its process group, and inside the sandbox's own PID
    namespace every process but this runner and the namespace's init (a fork bomb's children
    may have left the group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not IN_SANDBOX:
        return
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in {1, os.getpid()}:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def run_exercise(spec: dict, job: Path) -> None:
    """In the forked child: load the answer, run every check's probe, record, exit."""
    name = spec["name"]
    exercise = EXERCISES[name]
    arrays, meta = {}, {"errors": {}, "calls": []}
    blocking.block(exercise.forbidden.operators, exercise.forbidden.python)
    try:
        with tripwires(exercise) as seen:
            answer = load_answer(spec["setup"], spec["source"], name)
        calls = set(seen)
        for i in range(spec["cases"]):
            with np.load(job / "in" / name / f"{i}.npz", allow_pickle=False) as data:
                inputs = dict(data)
            got, seen = call(exercise, answer, inputs)
            calls |= seen
            if isinstance(got, StudentError):
                meta["errors"][str(i)] = [got.kind, got.message]
            else:
                arrays.update({f"{i}/{k}": v for k, v in got.items()})
        meta["calls"] = sorted(calls | blocking.attempted())
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: the answer's, not ours
        meta["load_error"] = [type(error).__name__, str(error)[:300]]
    _record(job, name, arrays, meta)


def supervise(spec: dict, job: Path, limits: dict, ours: set[Path]) -> None:
    """Fork, limit, wait; a child that dies or overruns leaves a 'crash' or 'timeout' record.
    `ours`: the files in `job` that are the runner's, not the answers' (see _record_failure)."""
    tell("started", spec["name"])  # so the grader knows who ran last
    pid = os.fork()
    if pid == 0:
        try:
            _die_with_parent()
            _set_dumpable(True)  # its own /proc entries stay readable to the answer
            os.setsid()  # its own process group, so a timeout kills everything it started
            apply_limits(limits)
            _silence()
            run_exercise(spec, job)
        finally:
            os._exit(0)
    deadline = time.monotonic() + limits["wall_seconds"]
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.02)
    else:
        _kill_leftovers(pid)
        os.waitpid(pid, 0)
        reason = f"`{spec['name']}` did not finish within {limits['wall_seconds']} s (timeout)."
        return _record_failure(job, spec["name"], "timeout", reason, ours)
    _kill_leftovers(pid)
    if not (job / record.paths(spec["name"])[0]).exists():
        how = f"signal {-status}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        reason = f"`{spec['name']}` crashed the Python process ({how}), e.g. os._exit or memory."
        _record_failure(job, spec["name"], "crash", reason, ours)


def _record_failure(job: Path, name: str, kind: str, reason: str, ours: set[Path]) -> None:
    """Record that the answer crashed or overran, unless the disk is too full to tell: a child
    that could not write its arrays on a full disk did not crash of its own doing. What the
    answers left in the job goes first, so an answer cannot fill the disk to pass for that."""
    _remove_all_but(job, ours)
    free = os.statvfs(job)
    if free.f_bavail * free.f_frsize < MIN_FREE_BYTES:
        raise RunnerFault(
            f"the disk holding the job is full ({free.f_bavail * free.f_frsize // MB} MB free)"
        )
    try:
        _record(job, name, {}, {"load_error": [kind, reason]})
    except OSError as error:
        if error.errno in DISK_FAULTS:
            raise RunnerFault(f"the runner could not write its record ({error})") from None
        raise


def _remove_all_but(job: Path, ours: set[Path]) -> None:
    for folder, dirs, files in os.walk(job):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            path = Path(folder, name)
            if path not in ours:
                path.unlink(missing_ok=True)


def warm_up(spec: dict) -> None:
    """Pay the one-time costs once, before forking: the setup cell's imports (trusted code from
    the source notebook) and torch's first entry into the tripwire mode."""
    exercises = spec["exercises"]
    for setup in dict.fromkeys(e["setup"] for e in exercises):  # each notebook's, once
        exec(compile(setup, "<setup>", "exec"), {"__name__": "__setup__"})
    if exercises:
        with tripwires(EXERCISES[exercises[0]["name"]]):
            torch.ones(2).add(1)


def _seal(job: Path, name: str) -> str:
    """The digest of the exercise's record as it stands now that the exercise has finished."""
    try:
        return record.digest(*record.read(job, name))
    except (OSError, ValueError):  # absent, a link, a FIFO, oversized: nothing to believe
        return "unreadable"


def main(job: str) -> int:
    _die_with_parent()
    _set_dumpable(False)
    job_dir = Path(job)
    spec = json.loads((job_dir / "job.json").read_text())
    (job_dir / "out").mkdir(exist_ok=True)
    warm_up(spec)
    tell("ready")
    ours = {job_dir / "job.json"} | {
        job_dir / "in" / e["name"] / f"{i}.npz"
        for e in spec["exercises"]
        for i in range(e["cases"])
    }
    try:
        for exercise in spec["exercises"]:
            name = exercise["name"]
            for planted in record.paths(name):  # what an earlier answer wrote in its place
                (job_dir / planted).unlink(missing_ok=True)
            supervise(exercise, job_dir, spec["limits"], ours)
            tell("done", name, _seal(job_dir, name))
            ours |= {job_dir / path for path in record.paths(name)}
    except RunnerFault as fault:
        tell("fault", str(fault))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
