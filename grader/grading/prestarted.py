"""Pre-started runners: Python, torch and the notebooks' imports started once per worker, and a
fresh sandbox forked from it for every student (the sandbox side: grader.grading.sandboxed.zygote).

Only when grading as root: the pre-started runner keeps root's capabilities in its bubblewrap
sandbox to make each student's namespaces, mounts and uid. As an ordinary user every student's
runner is started by bubblewrap as before.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.course.config import PRESTART_KILLED_SECONDS, PRESTART_SECONDS
from grader.grading.sandbox import SANDBOX_ENV, Sandbox, runner_env, setup_cells
from grader.grading.watch import Clock, exchange

TAIL_CHARS = 300


class PrestartFailed(RuntimeError):
    """A pre-started runner could not start, or died: the grader's fault, never the student's."""


class Prestarted:
    """One pre-started runner, serving one student at a time, whose job folders are made in
    `root` (the folder it is shown)."""

    def __init__(self, sandbox: Sandbox, scratch: Path | None) -> None:
        self.sandbox = sandbox
        self.root = Path(tempfile.mkdtemp(prefix="runners-", dir=scratch))
        self.control, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._log = tempfile.TemporaryFile()
        with theirs:
            self.process = subprocess.Popen(
                sandbox.prestart_command(self.root),
                stdin=theirs,
                stdout=subprocess.DEVNULL,
                stderr=self._log,
                env=runner_env(self.root),
                start_new_session=True,
            )
        try:
            self.control.sendall(json.dumps(setup_cells(sandbox.source)).encode())
            ready, _, _ = select.select([self.control], [], [], PRESTART_SECONDS)
            said = self.control.recv(64) if ready else b""
        except OSError:
            said = b""
        if said != b"ready\n":
            self.close()
            raise PrestartFailed(f"the pre-started runner did not start ({self._tail()})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def run(self, job: Path, frames: bytes, clock: Clock, track) -> tuple[bytes, bytes]:
        """A runner for the job folder `job` (in `root`), in a sandbox of its own, fed `frames`
        on its stdin and killed when `clock` says its time is up; its stdout and stderr.
        `track`: the context manager that registers its kill for a stop
        (grader.grading.grade.RUNNERS.track)."""
        env = runner_env(job) | SANDBOX_ENV
        request = {"job": job.name, "uid": self.sandbox.uid_for(job), "env": env}
        stdin, stdout, stderr, lifeline = os.pipe(), os.pipe(), os.pipe(), os.pipe()
        theirs = [stdin[0], stdout[1], stderr[1], lifeline[0]]
        try:
            socket.send_fds(self.control, [json.dumps(request).encode()], theirs)
        except OSError as error:
            for fd in (stdin[1], stdout[0], stderr[0], lifeline[1]):
                os.close(fd)
            raise PrestartFailed(f"the pre-started runner is gone ({error})") from None
        finally:
            for fd in theirs:
                os.close(fd)
        student = _Student(lifeline[1])
        with track(student.kill):
            return exchange(stdin[1], stdout[0], stderr[0], frames, clock, student.kill)

    def close(self) -> None:
        """Hang up (the runner exits), kill what is left, remove its folder."""
        self.control.close()
        try:
            self.process.wait(timeout=PRESTART_KILLED_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def _tail(self) -> str:
        self._log.seek(0)
        lines = self._log.read().decode(errors="replace").strip().splitlines()
        return lines[-1][:TAIL_CHARS] if lines else f"exit status {self.process.poll()}"


class _Student:
    """The grader's end of one student's lifeline: closing it kills that student's sandbox."""

    def __init__(self, lifeline: int) -> None:
        self._lifeline: int | None = lifeline
        self._lock = threading.Lock()

    def kill(self) -> None:
        with self._lock:
            if self._lifeline is not None:
                os.close(self._lifeline)
                self._lifeline = None


class RunnerPool:
    """The pre-started runners of one grading run, one per worker at most, started on demand."""

    def __init__(self, sandbox: Sandbox, scratch: Path | None) -> None:
        self.sandbox, self.scratch = sandbox, scratch
        self._idle: list[Prestarted] = []
        self.started: list[Prestarted] = []  # every one started, idle or not
        self._lock = threading.Lock()

    @contextmanager
    def runner(self) -> Iterator[Prestarted]:
        """An idle pre-started runner that is alive, or a new one; raises PrestartFailed."""
        with self._lock:
            found = self._idle.pop() if self._idle else None
        if found is None or not found.alive():
            found = Prestarted(self.sandbox, self.scratch)
            with self._lock:
                self.started.append(found)
        try:
            yield found
        finally:
            with self._lock:
                self._idle.append(found)

    def close(self) -> None:
        with self._lock:
            for runner in self.started:
                runner.close()
            self.started, self._idle = [], []


@contextmanager
def prestarted(sandbox: Sandbox | None, scratch: Path | None) -> Iterator[RunnerPool | None]:
    """A pool of pre-started runners for `sandbox` while grading, or None where there can be
    none: no sandbox, not root (see Sandbox.prestart), or a first runner that cannot start
    (said on stderr; every student is then graded by a runner of its own, as without a pool)."""
    if not isinstance(sandbox, Sandbox) or not sandbox.prestart:
        yield None
        return
    pool = RunnerPool(sandbox, scratch)
    try:
        with pool.runner():
            pass
    except PrestartFailed as error:
        print(f"grader: {error}; starting a runner per student instead", file=sys.stderr)
        pool.close()
        yield None
        return
    sandbox.pool = pool
    try:
        yield pool
    finally:
        sandbox.pool = None
        pool.close()
