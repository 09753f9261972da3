"""The grader's side of a runner's time: each exercise's deadline, kept outside the answer's reach.

The runner kills an exercise that overruns (grader.grading.sandboxed.runner.supervise), but it
shares the answer's uid, so an answer can stop it (SIGSTOP) and then run unwatched. Here the
grader reads the runner's protocol as it arrives: from `started <exercise>` the exercise has its
own time plus a grace for the runner's clean-up, and when it has not said `done <exercise>` by
then the runner is killed and that exercise alone is timed out (the ones not yet started run
again in a fresh runner, as after a crash).
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable

from grader.course.config import EXERCISE_GRACE_SECONDS, PRESTART_KILLED_SECONDS
from grader.grading.sandboxed import record


def protocol(out: bytes) -> tuple[list[str], dict[str, bytes], str]:
    """The runner's stdout read as its protocol (see grader.grading.sandboxed.runner): the
    exercises started, the result frame of each one done, and the fault it reported ('' if
    none). A result cut short (the runner was killed while sending it) is no result."""
    started, results, at = [], {}, 0
    while (end := out.find(b"\n", at)) >= 0:
        word, _, rest = out[at:end].decode(errors="replace").partition(" ")
        at = end + 1
        if word == "fault":
            return started, results, rest
        if word == "started":
            started.append(rest)
        elif word == "done":
            name, _, size = rest.partition(" ")
            if len(out) - at < int(size):
                break
            results[name] = out[at : at + int(size)]
            at += int(size)
    return started, results, ""


class Clock:
    """The runner's deadline as its stdout tells it: the whole job's, or sooner the running
    exercise's (`exercise_seconds` after it started, plus the grace)."""

    def __init__(self, job_seconds: float, exercise_seconds: float) -> None:
        self.job_deadline = time.monotonic() + job_seconds
        self.exercise_seconds = exercise_seconds
        self.allowed = exercise_seconds + EXERCISE_GRACE_SECONDS
        self.running: str | None = None
        self._since = 0.0
        self._seen = 0  # messages of `started` already counted

    def heard(self, out: bytes) -> None:
        started, results, _ = protocol(out)
        if len(started) > self._seen:
            self._seen, self.running, self._since = len(started), started[-1], time.monotonic()
        if self.running in results:
            self.running = None

    def deadline(self) -> float:
        if self.running is None:
            return self.job_deadline
        return min(self.job_deadline, self._since + self.allowed)

    def overran(self) -> str | None:
        """The exercise that was running past its own deadline, if that is why time is up."""
        if self.running is not None and time.monotonic() >= self._since + self.allowed:
            return self.running
        return None


def timed_out(out: bytes, exercise: str, seconds: float) -> bytes:
    """`out` followed by the result the runner would have sent for an exercise that overran."""
    reason = f"`{exercise}` did not finish within {seconds:g} s (timeout)."
    frame = record.encode({"load_error": ["timeout", reason]}, {})
    return out + f"done {exercise} {len(frame)}\n".encode() + frame


def exchange(
    stdin: int,
    stdout: int,
    stderr: int,
    frames: bytes,
    clock: Clock,
    kill: Callable[[], None],
) -> tuple[bytes, bytes]:
    """Write `frames` to `stdin` while reading `stdout` and `stderr` to their ends; `kill` when
    the clock's deadline passes, then read what is left. An exercise that overran its own
    deadline gets the timeout result the runner could not send. Every descriptor is closed on
    return."""
    out, err = bytearray(), bytearray()
    sinks = {stdout: out, stderr: err}
    pending = memoryview(frames)
    for fd in (stdin, stdout, stderr):
        os.set_blocking(fd, False)
    overran, killed = None, False
    try:
        while sinks:
            deadline = clock.deadline()
            if time.monotonic() >= deadline:
                if killed:
                    break  # killed and still not closed: give up on what is left
                overran = clock.overran()
                kill()
                killed, clock.job_deadline, clock.running = True, time.monotonic(), None
                clock.job_deadline += PRESTART_KILLED_SECONDS
                continue
            writing = [stdin] if pending else []
            left = deadline - time.monotonic()
            readable, writable, _ = select.select(list(sinks), writing, [], max(left, 0))
            if writable:
                try:
                    pending = pending[os.write(stdin, pending) :]
                except BrokenPipeError:
                    pending = pending[:0]
                if not pending:
                    os.close(stdin)
                    stdin = -1
            for fd in readable:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    sinks[fd] += chunk
                else:
                    del sinks[fd]
            if stdout in readable and not killed:
                clock.heard(bytes(out))
    finally:
        kill()
        for fd in (stdin, stdout, stderr):
            if fd >= 0:
                os.close(fd)
    if overran is not None and overran not in protocol(bytes(out))[1]:
        return timed_out(bytes(out), overran, clock.exercise_seconds), bytes(err)
    return bytes(out), bytes(err)
