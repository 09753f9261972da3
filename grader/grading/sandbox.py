"""The isolation layer around the runner: bubblewrap, a fresh unprivileged uid, limits, no network.

Inside, the runner's file system is an allow-list, read-only except its job folder: the system's
programs and libraries (/usr, and /bin, /lib... as the distribution lays them out), the dynamic
loader's few files in /etc, the Python installation, every folder on the runner's `sys.path` and
every package student code may import (norm_utils, torch, numpy, matplotlib), wherever they
really are (a virtualenv in a private home, a symlinked interpreter, an editable install), the
runner's own package `grader.grading.sandboxed` (as the top-level package `sandboxed`, at
RUNNER_ROOT), plus a private /dev, /proc and /tmp. Nothing else of the host exists there: not the
rest of `grader` (its checks, their references and known mistakes; where `grader` lies in a folder
that is shown, such as an installed wheel's site-packages, an empty folder covers it), not the homes
around those folders, not the course folder (even one created after the sandbox), not the other
submissions, not the checkout around the course's packages (which holds the answer key; should
the answer key lie inside a folder the runner needs, the sandbox refuses to start). It also has
no network, its own PID and IPC namespaces.

Graded as root, every student's runner gets a uid no other runner had in this run, from a range
wide enough that another run very likely never gives it either: per-uid kernel state (the
keyring, RLIMIT_NPROC's count of processes) is one student's alone and carries nothing to the
next. (Run by an ordinary user, bubblewrap gives each runner a user namespace, and with it a
keyring, of its own.)
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from grader.course.config import REPO, SANDBOX_TMP_BYTES, SOLUTIONS, assignments

# Above every range that distributions, systemd, container tools and directory services (sssd,
# FreeIPA) hand out, so no real user's files or keyring are shared; no passwd entry is needed.
UIDS = range(1 << 31, (1 << 32) - (1 << 16))
# The system as the dynamic loader and the interpreter need it; each is a folder, a file or a
# link (/lib -> usr/lib on merged-/usr distributions), bound or mirrored where it exists.
SYSTEM = (
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
)
RUNNER_PACKAGES = ("norm_utils", "torch", "numpy", "matplotlib")
# Where the runner's package is shown, and the runner as the sandbox names it.
RUNNER_ROOT = Path("/run/grader-runner")
RUNNER_MODULE = "sandboxed.runner"
PRESTARTED_MODULE = "sandboxed.zygote"
# What the sandbox adds to the runner's environment (see runner_env).
SANDBOX_ENV = {"GRADER_SANDBOX": "1", "PYTHONPATH": str(RUNNER_ROOT)}
SANDBOXED = Path(__file__).parent / "sandboxed"
# Where the runner finds things, asked of this interpreter with the runner's own environment.
WHERE_PROBE = """
import importlib.util, json, sys
specs = [importlib.util.find_spec(name) for name in NAMES]
folders = [f for s in specs if s for f in s.submodule_search_locations or []]
hidden = importlib.util.find_spec("grader").submodule_search_locations
print(json.dumps({"path": sys.path[1:], "packages": folders, "grader": list(hidden)}))
"""


class SandboxUnavailable(RuntimeError):
    pass


def available() -> bool:
    return shutil.which("bwrap") is not None


class Sandbox:
    """Builds the bubblewrap command line for a job, each job with a uid of its own."""

    def __init__(self, source: Path = SOLUTIONS, wait: bool = True) -> None:
        """`source`: the course source graded against, an answer key the runner never sees.
        `wait=False` lets the check that the runner starts (`check_runner_starts`) run while the
        caller goes on; it must then call that before any student code runs."""
        if not available():
            raise SandboxUnavailable(
                "bubblewrap is not installed (apt-get install bubblewrap); refusing to run "
                "student code without a sandbox unless given --unsafe-no-sandbox"
            )
        self.source = source
        self.as_root = os.geteuid() == 0
        # Graded as root, a batch's runners are forked from pre-started ones
        # (grader.grading.prestarted), kept in `pool` while it is graded.
        self.prestart = self.as_root
        self.pool = None
        # Seeded from the clock and the pid, so two runs start far apart in the range.
        start = (time.time_ns() ^ os.getpid() << 32) % len(UIDS)
        self._counter = itertools.count(start)  # next() on it is atomic: threads share it
        self._given: set[int] = set()
        self.answer_keys = answer_keys(source)
        self.visible, self.masked = visible_paths(self.answer_keys)
        self._check_answer_key_hidden()
        self._runner_check: tuple[subprocess.Popen, tempfile.TemporaryDirectory] | None
        self._runner_check, self._runner_problem = self._start_runner_check(source), ""
        if wait:
            self.check_runner_starts()

    def _check_answer_key_hidden(self) -> None:
        """Refuse when the answer key lies inside a folder the runner must see (a checkout that
        pip's `install -e git+...` placed in the virtualenv's src/, say)."""
        shown = _outermost(p.resolve() for p in self.visible)
        for secret in self.answer_keys:
            around = [f for f in shown if secret.is_relative_to(f)]
            if around:
                raise SandboxUnavailable(
                    f"the answer key {secret} lies inside {around[0]}, which the sandboxed "
                    "runner must see: move it (or the course's checkout) out of there"
                )

    def _start_runner_check(
        self, source: Path
    ) -> tuple[subprocess.Popen, tempfile.TemporaryDirectory]:
        """Start Python in the sandbox once, running what the runner runs before any student
        code (its imports and every notebook's imports cell)."""
        runner = f"import {RUNNER_MODULE}"
        probe = [sys.executable, "-P", "-c", "\n".join([runner, *setup_cells(source)])]
        job = tempfile.TemporaryDirectory(prefix="grader-probe-")
        process = subprocess.Popen(
            self.command(probe, Path(job.name)),
            env=runner_env(Path(job.name)),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        return process, job

    def check_runner_starts(self) -> None:
        """Wait for the check `__init__` started: if the runner could not start, every student
        would get 0 for the grader's own fault, so raise SandboxUnavailable saying why."""
        if self._runner_check is not None:
            process, job = self._runner_check
            with job:
                stderr = process.communicate()[1]
            self._runner_check = None
            if process.returncode != 0:
                lines = stderr.strip().splitlines()
                reason = lines[-1] if lines else f"exit status {process.returncode}"
                self._runner_problem = self._why_not(reason)
        if self._runner_problem:
            raise SandboxUnavailable(self._runner_problem)

    def _why_not(self, reason: str) -> str:
        closed = _closed_to_others(self.visible) if self.as_root else []
        if closed:
            named = ", ".join(f"{p} (mode {p.stat().st_mode & 0o777:o})" for p in closed)
            hint = (
                f"The runner runs as an unprivileged user (uid {UIDS.start} and up), who cannot "
                f"read {named}: make it readable by others (chmod -R o+rX), or grade with "
                "--unsafe-no-sandbox on a machine you trust."
            )
        else:
            shown = ", ".join(str(p) for p in self.visible)
            hint = (
                f"It sees only {shown}: install what is missing into this environment "
                f"({sys.prefix}), or grade with --unsafe-no-sandbox on a machine you trust."
            )
        return (
            f"the sandboxed runner cannot start, so every student would score 0 ({reason}). {hint}"
        )

    def uid_for(self, job: Path) -> int:
        """The job's own uid when the runner is started again on it (what the previous one
        left belongs to that uid), otherwise a uid no runner had yet; `job` is given to it."""
        owner = job.stat().st_uid
        if owner in self._given:
            return owner
        uid = UIDS.start + next(self._counter) % len(UIDS)
        self._given.add(uid)
        os.chown(job, uid, uid)
        return uid

    def command(self, command: list[str], job: Path) -> list[str]:
        """The command line that runs `command` in the sandbox, with `job` as its writable
        working directory."""
        drop = []
        if self.as_root:  # root ignores RLIMIT_NPROC: the runner gets an unprivileged uid
            uid = self.uid_for(job)
            drop = [
                "setpriv",
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
            ]
        # bubblewrap mounts as the caller; the uid is dropped inside, just before the runner.
        return [*self._bwrap(job), "--chdir", str(job), *drop, *command]

    def prestart_command(self, root: Path) -> list[str]:
        """The command line of a pre-started runner (see grader.grading.sandboxed.zygote) whose
        students' job folders are made in `root`: the sandbox of `command`, keeping root's
        capabilities there to make each student's sandbox afresh. Only as root."""
        zygote = [sys.executable, "-P", "-m", PRESTARTED_MODULE, str(root), str(SANDBOX_TMP_BYTES)]
        return [*self._bwrap(root), "--cap-add", "ALL", "--chdir", "/", *zygote]

    def _bwrap(self, writable: Path) -> list[str]:
        bwrap = [
            "bwrap",
            "--dev", "/dev",
            "--proc", "/proc",
            "--perms", "1777", "--size", str(SANDBOX_TMP_BYTES), "--tmpfs", "/tmp",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--die-with-parent",
            "--new-session",
        ]  # fmt: skip
        bwrap += [a for name, value in SANDBOX_ENV.items() for a in ("--setenv", name, value)]
        bwrap += mounts(self.visible, writable=writable)
        bwrap += runner_package()
        return bwrap + [a for folder in self.masked for a in ("--tmpfs", str(folder))]


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


def runner_package() -> list[str]:
    """bubblewrap arguments showing `grader.grading.sandboxed`, read-only, as the package
    `sandboxed` in RUNNER_ROOT (the folders on the way made 0755, as bubblewrap would make them
    0700)."""
    folders = [*reversed(RUNNER_ROOT.parents[:-1]), RUNNER_ROOT]
    args = [a for f in folders for a in ("--perms", "0755", "--dir", str(f))]
    return [*args, "--ro-bind", str(SANDBOXED.resolve()), str(RUNNER_ROOT / "sandboxed")]


def runner_setup(setup: str) -> str:
    """A notebook's imports cell as the runner runs it before each answer: without its imports
    of `normcheck` or `grader` (the student's own `check` and `grade`), which answers do not use
    and which the runner could not import."""
    tree = ast.parse(setup)
    tree.body = [node for node in tree.body if not _imports_grader(node)]
    return ast.unparse(tree)


def _imports_grader(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        modules = [node.module or ""]
    else:
        modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
    return any(m.split(".")[0] in ("grader", "normcheck") for m in modules)


def setup_cells(source: Path) -> list[str]:
    from grader.course.intake import setup_code, source_notebook  # it needs the checks: import late

    return [runner_setup(setup_code(source_notebook(a, source))) for a in assignments()]


def visible_paths(keys: list[Path]) -> tuple[list[Path], list[Path]]:
    """What the runner reads, as this machine names it: the system, the interpreter, every
    folder on the runner's sys.path (.pth files included) and every package student code may
    import (an editable install's finder maps them anywhere). A folder that holds the answer
    key (a checkout on sys.path) is never shown whole: the course's packages in it are. Also
    returns where `grader` lies inside what is shown (an installed wheel's site-packages), to
    be covered. `keys`: the answer keys (see answer_keys)."""
    with tempfile.TemporaryDirectory(prefix="grader-where-") as scratch:
        code = f"NAMES = {RUNNER_PACKAGES!r}\n{WHERE_PROBE}"
        where = subprocess.run(
            [sys.executable, "-c", code],
            env=runner_env(Path(scratch)),
            cwd=scratch,
            capture_output=True,
            text=True,
            check=True,
        )
    found = json.loads(where.stdout)
    on_path = [p for p in found["path"] if not _is_inside_any(keys, Path(p).resolve())]
    paths = [*SYSTEM, sys.executable, sys.prefix, sys.base_prefix, *on_path, *found["packages"]]
    visible = [p for p in dict.fromkeys(Path(os.path.abspath(p)) for p in paths) if p.exists()]
    shown = _outermost(p.resolve() for p in visible)
    grader = [Path(g).resolve() for g in found["grader"]]
    return visible, [g for g in grader if _is_inside(g, shown)]


def mounts(paths: Iterable[Path], writable: Path) -> list[str]:
    """bubblewrap arguments showing `paths` read-only and `writable` read-write at the names
    they have here, symbolic links on the way mirrored, and nothing else of the host. The
    folders around them are made 0755 (bubblewrap would make them 0700, closed to the runner)."""
    links: dict[Path, str] = {}
    for path in [*paths, writable]:
        links |= symlinks_met(path)
    binds = _outermost([p.resolve() for p in paths])
    job = writable.resolve()
    inside_binds = [*binds, job]
    links = {k: v for k, v in links.items() if not _is_inside(k, inside_binds)}
    folders = {
        parent
        for p in [*binds, job, *links]
        for parent in p.parents
        if parent != Path("/") and not _is_inside(parent, binds)
    }
    args = [a for f in sorted(folders) for a in ("--perms", "0755", "--dir", str(f))]
    args += [a for b in binds for a in ("--ro-bind", str(b), str(b))]
    args += [a for link, target in links.items() for a in ("--symlink", target, str(link))]
    return [*args, "--bind", str(job), str(job)]


def symlinks_met(path: Path) -> dict[Path, str]:
    """Every symbolic link crossed on the way to `path` (absolute), with its target, in order:
    the sandbox mirrors them, so each path is reached there by the name it has here."""
    links: dict[Path, str] = {}
    here, todo = Path("/"), list(path.parts[1:])
    while todo:
        part = todo.pop(0)
        step = here.parent if part == ".." else here / part
        if step.is_symlink():  # `path` exists, so this ends: no loop on the way
            target = os.readlink(step)
            links[step] = target
            here = Path("/") if os.path.isabs(target) else here
            todo[:0] = Path(target).parts[1:] if os.path.isabs(target) else Path(target).parts
        else:
            here = step
    return links


def answer_keys(source: Path) -> list[Path]:
    """What holds the answers, resolved: the source graded against (a checkout's solutions/
    or --source), the checkout's solutions/ and its git history."""
    keys = (source, SOLUTIONS, REPO / ".git")
    return [k.resolve() for k in dict.fromkeys(keys) if k.exists()]


def _is_inside_any(paths: Iterable[Path], folder: Path) -> bool:
    return any(p.is_relative_to(folder) for p in paths)


def _is_inside(path: Path, folders: Iterable[Path]) -> bool:
    return any(path.is_relative_to(f) for f in folders)


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """`paths` without those inside another one, sorted."""
    kept: list[Path] = []
    for path in sorted(set(paths)):
        if not _is_inside(path, kept):
            kept.append(path)
    return kept


def _closed_to_others(paths: Iterable[Path]) -> list[Path]:
    """Those of `paths` that others may not read (and, for a folder, enter): a runner with an
    unprivileged uid cannot use them, even though the sandbox shows them."""
    closed = []
    for path in _outermost(p.resolve() for p in paths):
        mode = path.stat().st_mode
        wanted = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
        if mode & wanted != wanted:
            closed.append(path)
    return closed
