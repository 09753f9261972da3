"""The only process in which a student's code runs while grading.

Started as `python -P -m sandboxed.runner` in the sandbox, where this package is all there is of
`grader`, and as `python -P -m grader.grading.sandboxed.runner` without one (`-P`: the job's folder,
its working directory, is not on `sys.path`).

The job comes on stdin as frames (see `record`): first what to run (each exercise's name, the
imports cell, the answer cell, the probe that calls it, the library implementations it forbids
and their names; the limits),
then, one frame per exercise, its inputs. An exercise's inputs are read only when it starts, so
no earlier answer has them (to compute their outputs ahead, without that exercise's limits on
library calls), and nothing of the job is ever a file.

Each exercise runs in its own forked child, under resource limits. Before the fork the runner
makes a new pipe, which only that child and what it starts hold: the child writes its result
there (errors, forbidden library calls seen, outputs as plain arrays, in one frame) and exits;
the runner reads at most one frame's size, while it waits. A crash, hang or memory bomb costs
only that exercise. After each exercise the runner kills what the answer left running (inside
the sandbox: every process of its PID namespace but its init), so no earlier answer is alive
while a later one runs. Nothing here decides a score: the grader judges the arrays in its own
process.

What the grader must know for sure travels on this process's stdout, which no student code can
write: the children's stdout is /dev/null, the pipe belongs to the grader's uid (a child cannot
reopen it through /proc/<runner>/fd/1), and this process is not dumpable (a child of the same uid
can neither ptrace it nor write its memory to make it speak):
- `ready`: the job was read and the warm-up done, before any student code ran. A runner that
  never says it failed for the grader's reasons (it could not start or read its job);
- `started <exercise>`: student code is about to run, so a death from here on is the answer's;
- `done <exercise> <size>` and then `size` bytes: the exercise's result, one frame, as its
  child wrote it on its own pipe, or as the runner wrote it when the child crashed, overran or
  sent too much. An exercise started without `done` took the runner down: it crashed;
- `fault <reason>`: the runner could not do its part (read the job, make a pipe, fork), which is
  not the answer's doing either.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import sys
import time
from typing import Any

import numpy as np
import torch

from . import blocking, no_exec, record
from .calling import StudentError, Task, call, load_answer, tripwires
from .probes import PROBES

MB = 1 << 20
# Read once, before any student code runs: set by grader.grading.sandbox's bubblewrap command line.
IN_SANDBOX = os.environ.get("GRADER_SANDBOX") == "1"
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
_LIBC = ctypes.CDLL(None, use_errno=True)
MAX_RESULT_BYTES = record.HEADER_BYTES + record.MAX_FRAME_BYTES


class RunnerFault(Exception):
    """The runner cannot do its part; the grader must not blame the answer."""


def tell(*words: str, payload: bytes = b"") -> None:
    """One message of the protocol to the grader (see the module's docstring)."""
    sys.stdout.buffer.write(" ".join(words).encode() + b"\n" + payload)
    sys.stdout.buffer.flush()


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
    """The answer reads nothing and what it prints goes nowhere: it can neither read the job
    nor flood the grader nor speak for it."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)


def read_exactly(fd: int, size: int) -> bytes:
    """`size` bytes from `fd`, read unbuffered: nothing beyond them stays in this process."""
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise RunnerFault(f"the job ended early ({len(data)} of {size} bytes)")
        data += chunk
    return bytes(data)


def receive(fd: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The next frame of the job on `fd`: its JSON object and its arrays."""
    size = int.from_bytes(read_exactly(fd, record.HEADER_BYTES), "big")
    if size > record.MAX_FRAME_BYTES:
        raise RunnerFault(f"a frame of the job is too large ({size} bytes)")
    try:
        return record.decode(read_exactly(fd, size))
    except record.BadFrame as error:
        raise RunnerFault(f"the job is not readable ({error})") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _kill_leftovers(pid: int) -> None:
    """Kill what the answer left running: its process group and, inside the sandbox's own PID
    namespace, every process but this runner and the namespace's init (a process that left the
    group). kill(-1) signals every process of the namespace at once, so none escapes by forking
    while the others are killed; it is repeated until none is left to signal."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    # Outside a PID namespace of our own, kill(-1) would reach every process of this uid.
    if not (IN_SANDBOX and os.getppid() == 1):
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.001)  # the namespace's init reaps them


def run_exercise(exercise: dict, cases: list[dict[str, np.ndarray]]) -> bytes:
    """In the forked child: block the library implementations the exercise forbids, load the
    answer, run the probe on every case; the result's frame."""
    task = Task(exercise["name"], PROBES[exercise["probe"]], tuple(exercise["forbidden"]))
    arrays, fields = {}, {"errors": {}, "calls": []}
    blocking.block(exercise["operators"], exercise["python"])
    try:
        with tripwires(task) as seen:
            answer = load_answer(exercise["setup"], exercise["source"], task.name)
        calls = set(seen)
        for i, inputs in enumerate(cases):
            got, seen = call(task, answer, inputs)
            calls |= seen
            if isinstance(got, StudentError):
                fields["errors"][str(i)] = [got.kind, got.message]
            else:
                arrays.update({f"{i}/{k}": v for k, v in got.items()})
        fields["calls"] = sorted(calls | blocking.attempted())
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: the answer's, not ours
        fields = {"load_error": [type(error).__name__, str(error)[:300]]}
        arrays = {}
    return record.encode(fields, arrays)


def failure(kind: str, reason: str) -> bytes:
    """The frame the runner sends for an answer that left no result of its own."""
    return record.encode({"load_error": [kind, reason]}, {})


def supervise(exercise: dict, cases: list[dict[str, np.ndarray]], limits: dict) -> bytes:
    """Fork, limit, read the child's result from its own pipe; the frame to send the grader."""
    name = exercise["name"]
    try:
        result_pipe, child_end = os.pipe()
    except OSError as error:
        raise RunnerFault(f"could not make a pipe for `{name}` ({error})") from None
    tell("started", name)  # so the grader knows who ran last
    try:
        pid = os.fork()
    except OSError as error:
        raise RunnerFault(f"could not start a process for `{name}` ({error})") from None
    if pid == 0:
        try:
            os.close(result_pipe)
            _die_with_parent()
            _set_dumpable(True)  # its own /proc entries stay readable to the answer
            os.setsid()  # its own process group, so a timeout kills everything it started
            apply_limits(limits)
            _silence()
            _write_all(child_end, _framed(run_exercise(exercise, cases)))
        finally:
            os._exit(0)
    os.close(child_end)
    try:
        received, status = _collect(result_pipe, pid, time.monotonic() + limits["wall_seconds"])
    finally:
        os.close(result_pipe)
        _kill_leftovers(pid)
    if status is None:  # it overran its time or its size, and was killed with the rest
        os.waitpid(pid, 0)
        if len(received) > MAX_RESULT_BYTES:
            return failure("returned", f"`{name}` returned more than {MAX_RESULT_BYTES // MB} MB.")
        reason = f"`{name}` did not finish within {limits['wall_seconds']} s (timeout)."
        return failure("timeout", reason)
    frame = _unframed(received)
    if frame is None:
        how = f"signal {-status}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        reason = f"`{name}` crashed the Python process ({how}), e.g. os._exit or memory."
        return failure("crash", reason)
    return frame


def _framed(frame: bytes) -> bytes:
    return len(frame).to_bytes(record.HEADER_BYTES, "big") + frame


def _unframed(received: bytes) -> bytes | None:
    """The frame at the start of what the child sent, or None if it did not send a whole one."""
    end = record.HEADER_BYTES + int.from_bytes(received[: record.HEADER_BYTES], "big")
    return received[record.HEADER_BYTES : end] if len(received) >= end else None


def _collect(pipe: int, pid: int, deadline: float) -> tuple[bytes, int | None]:
    """What the child writes on `pipe`, read while it runs, and its wait status once it has
    exited; None if it had not at `deadline`, or had sent more than MAX_RESULT_BYTES (what is
    read stops there). A process the child started may hold the pipe open after the child
    exited: then only what the pipe already holds is read."""
    received = bytearray()
    os.set_blocking(pipe, False)
    exited = os.pidfd_open(pid)
    try:
        watched = [pipe, exited]
        while (left := deadline - time.monotonic()) > 0 and len(received) <= MAX_RESULT_BYTES:
            ready, _, _ = select.select(watched, [], [], left)
            if pipe in ready and _read_some(pipe, received) == 0:
                watched = [exited]  # every writer closed it: wait for the exit alone
            if exited in ready:
                status = os.waitpid(pid, 0)[1]
                while len(received) <= MAX_RESULT_BYTES and _read_some(pipe, received) > 0:
                    pass
                return bytes(received), status
        return bytes(received), None
    finally:
        os.close(exited)


def _read_some(pipe: int, received: bytearray) -> int:
    """Append what `pipe` holds now: how many bytes, 0 at its end, -1 when it holds none yet."""
    try:
        chunk = os.read(pipe, 1 << 20)
    except BlockingIOError:
        return -1
    received += chunk
    return len(chunk)


def warm_up(exercises: list[dict]) -> None:
    """Pay the one-time costs once, before forking: the setup cell's imports (trusted code from
    the source notebook) and torch's first entry into the tripwire mode."""
    import_setups([e["setup"] for e in exercises])
    if exercises:
        first = exercises[0]
        with tripwires(Task(first["name"], PROBES[first["probe"]], tuple(first["forbidden"]))):
            torch.ones(2).add(1)


def import_setups(setups: list[str]) -> None:
    """Run each distinct imports cell once (trusted code from the source notebook)."""
    for setup in dict.fromkeys(setups):
        exec(compile(setup, "<setup>", "exec"), {"__name__": "__setup__"})


def _cases(inputs: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]]:
    """The frame's arrays `<case>/<name>` as one dict of inputs per case."""
    cases: list[dict[str, np.ndarray]] = [{} for _ in range(count)]
    for key, value in inputs.items():
        case, _, name = key.partition("/")
        cases[int(case)][name] = value
    return cases


def refuse_new_programs() -> None:
    """From here on, neither the runner nor an answer starts a program (sandboxed.no_exec)."""
    try:
        no_exec.install()
    except OSError as error:
        raise RunnerFault(f"could not refuse new programs ({error})") from None


def main() -> int:
    _die_with_parent()
    _set_dumpable(False)
    try:
        spec, _ = receive(0)
        warm_up(spec["exercises"])
        refuse_new_programs()
        tell("ready")
        for exercise in spec["exercises"]:
            _, inputs = receive(0)  # this exercise's, and only now
            cases = _cases(inputs, exercise["cases"])
            del inputs
            result = supervise(exercise, cases, spec["limits"])
            tell("done", exercise["name"], str(len(result)), payload=result)
    except RunnerFault as fault:
        tell("fault", str(fault))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
