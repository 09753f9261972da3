"""The isolation layer around the runner: bubblewrap, an unprivileged uid, limits, no network.

Inside, the runner sees a read-only view of the system, a private /tmp, its own job directory
(the only writable place), no network (its own network namespace), its own PID namespace, and
empty folders where the answer key (solutions/, the git history), the grading working directory
(gradebook, results, staged submissions) and the submissions of the class would be.

Each concurrently running sandbox gets its own uid, so a per-uid limit such as RLIMIT_NPROC
(a fork bomb's ceiling) is one student's alone.
"""

from __future__ import annotations

import os
import queue
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from grader.config import REPO, course_source

FIRST_UID = 61000  # unused by the system; no passwd entry is needed
# Where the runner finds its job inside the sandbox, wherever the grader keeps it: a folder under
# a closed one (mkdtemp's mode 700, e.g. a TMPDIR inside /tmp) would be untraversable there.
JOB = Path("/tmp/job")
TMP_BYTES = 256 << 20


class SandboxUnavailable(RuntimeError):
    pass


def available() -> bool:
    return shutil.which("bwrap") is not None


class Sandbox:
    """Hands out one uid per concurrent job and builds the bubblewrap command line."""

    def __init__(self, hidden: Iterable[Path], slots: int):
        if not available():
            raise SandboxUnavailable(
                "bubblewrap is not installed (apt-get install bubblewrap); refusing to run "
                "student code without a sandbox unless given --unsafe-no-sandbox"
            )
        self.hidden = [p.resolve() for p in hidden if p.exists()]
        self.as_root = os.geteuid() == 0
        self.uids: queue.Queue[int] = queue.Queue()
        for i in range(slots):
            self.uids.put(FIRST_UID + i)
        self._check_runner_starts()

    def _check_runner_starts(self) -> None:
        """Start Python in the sandbox once and import what the runner needs. If it cannot,
        every student would get 0 for the grader's own fault: refuse, and say why."""
        probe = [sys.executable, "-c", "import torch, norm_utils, grader.runner"]
        with tempfile.TemporaryDirectory(prefix="grader-probe-") as job, self.slot() as uid:
            command = self.command(probe, Path(job), uid)
            done = subprocess.run(command, env=runner_env(JOB), capture_output=True, text=True)
        if done.returncode == 0:
            return
        lines = done.stderr.strip().splitlines()
        closed = [f"{p} (mode {p.stat().st_mode & 0o777:o})" for p in _closed_to_others()]
        hint = (
            f" The runner runs as an unprivileged user (uid {FIRST_UID} and up), who cannot read "
            f"{', '.join(closed)}: make it readable by others (chmod o+rX), or grade with "
            "--unsafe-no-sandbox on a machine you trust."
            if closed
            else " Grade with --unsafe-no-sandbox only on a machine you trust."
        )
        raise SandboxUnavailable(
            "the sandboxed runner cannot start, so every student would score 0 "
            f"({lines[-1] if lines else f'exit status {done.returncode}'}).{hint}"
        )

    @contextmanager
    def slot(self) -> Iterator[int]:
        uid = self.uids.get()
        try:
            yield uid
        finally:
            self.uids.put(uid)

    @staticmethod
    def _python_visible() -> list[str]:
        """What the runner needs, read-only, even where the private /tmp or a closed folder
        would hide it: the Python installation (pyenv may live under /root, mode 700), the
        virtualenv, and this course's code (a checkout may live under /tmp)."""
        needed = _needed()
        closed = dict.fromkeys(c for p in needed if (c := _untraversable_ancestor(p)) is not None)
        args = [arg for folder in closed for arg in ("--tmpfs", str(folder))]
        return args + [arg for path in needed for arg in ("--ro-bind", str(path), str(path))]

    def command(self, command: list[str], job: Path, uid: int) -> list[str]:
        """`command` run in the sandbox as `uid`, with the folder `job` as its working
        directory, seen inside as `JOB`."""
        drop = []
        if self.as_root:  # root ignores RLIMIT_NPROC: the runner gets an unprivileged uid
            os.chown(job, uid, uid)
            drop = [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ]
        bwrap = [
            "bwrap",
            "--ro-bind", "/", "/",
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", "/tmp",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--new-session",
            "--setenv", "GRADER_SANDBOX", "1",
        ]  # fmt: skip
        bwrap += self._python_visible()
        for path in self.hidden:  # a file (e.g. a git worktree's .git) is hidden by an empty one
            bwrap += (
                ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
            )
        bwrap += ["--bind", str(job), str(JOB), "--chdir", str(JOB)]
        # bubblewrap mounts as the caller; the uid is dropped inside, just before the runner.
        return [*bwrap, *drop, *command]


def runner_env(job: Path) -> dict[str, str]:
    """The whole environment the runner starts with, sandboxed or not: nothing else leaks in."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(job),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": str(job),
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _needed() -> dict[Path, None]:
    """The folders the runner reads: the Python installation, the virtualenv, the course code."""
    return dict.fromkeys(p.resolve() for p in (Path(sys.base_prefix), Path(sys.prefix), REPO))


def _closed_to_others(paths: Iterable[Path] | None = None) -> list[Path]:
    """Those of `paths` (default: the folders the runner reads) that others may not list and
    enter. A closed ancestor can be covered (see _python_visible); the folder itself cannot."""
    wanted = stat.S_IROTH | stat.S_IXOTH
    return [
        p for p in (_needed() if paths is None else paths) if p.stat().st_mode & wanted != wanted
    ]


def _untraversable_ancestor(path: Path) -> Path | None:
    """The outermost folder above `path` that others may not enter (e.g. /root, mode 700)."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


def secrets_of(course_root: Path, submissions: Path | None) -> list[Path]:
    """What student code must never see: the answer key, grading state, the rest of the class."""
    paths = [course_source(), REPO / "solutions", REPO / ".git", REPO / "build", course_root]
    return paths + ([submissions] if submissions is not None else [])
