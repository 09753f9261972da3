"""Under the runner's seccomp filter (grader/sandboxed/no_exec.py) no route of the standard library
starts a program, while a fork of the process still works; without it, every route does."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from grader.sandboxed import no_exec

FORK_THEN = """\
pid = os.fork()
if pid == 0:
    try:
        {}
    finally:
        os._exit(1)
os.waitpid(pid, 0)
"""
RAW = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
args = (ctypes.c_char_p * 4)(*[a.encode() for a in ARGV], None)
nr = {{"x86_64": {0}, "aarch64": {1}}}[os.uname().machine]
"""
MULTIPROCESSING = """\
import multiprocessing as mp
p = mp.get_context("{}").Process(target=exec, args=(ARGV[2],))
p.start()
p.join()
"""
# Each route to a new program: code that runs ARGV (a Python writing a marker file) by it.
ROUTES = {
    "subprocess": "import subprocess\nsubprocess.run(ARGV)",
    "os_system": "os.system(' '.join(map(repr, ARGV)))",
    "os_popen": "os.popen(' '.join(map(repr, ARGV))).read()",
    "posix_spawn": "os.waitpid(os.posix_spawn(ARGV[0], ARGV, os.environ), 0)",
    "spawnv": "os.spawnv(os.P_WAIT, ARGV[0], ARGV)",
    "fork_execv": FORK_THEN.format("os.execv(ARGV[0], ARGV)"),
    "pty_spawn": "import pty\npty.spawn(ARGV)",
    "multiprocessing_spawn": MULTIPROCESSING.format("spawn"),
    "multiprocessing_forkserver": MULTIPROCESSING.format("forkserver"),
    "syscall_execve": RAW.format(59, 221)
    + FORK_THEN.format("libc.syscall(nr, args[0], args, None)"),
    "syscall_execveat": RAW.format(322, 281)  # dirfd AT_FDCWD, a path, argv, envp, flags
    + FORK_THEN.format("libc.syscall(nr, -100, args[0], args, None, 0)"),
}


def _started_a_program(route: str, marker: Path, filtered: bool) -> bool:
    """Whether `route`, run in a fork of this process (under the filter if `filtered`), got its
    new program to write `marker`."""
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    code = f"import os\nARGV = {argv!r}\n" + ROUTES[route]
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # the refusals' tracebacks
            if filtered:
                no_exec.install()
            exec(compile(code, route, "exec"), {"__name__": "__route__"})
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return marker.exists()


@pytest.mark.parametrize("route", ROUTES)
def test_no_route_starts_a_program_under_the_filter(tmp_path, route):
    assert not _started_a_program(route, tmp_path / "ran", filtered=True)


@pytest.mark.parametrize("route", ROUTES)
def test_every_route_starts_a_program_without_it(tmp_path, route):
    """The routes are real: the filter is what stops them."""
    assert _started_a_program(route, tmp_path / "ran", filtered=False)


def test_a_fork_still_works_under_the_filter(tmp_path):
    marker = tmp_path / "forked"
    code = textwrap.dedent(FORK_THEN.format(f"open({str(marker)!r}, 'w').close()"))
    pid = os.fork()
    if pid == 0:
        try:
            no_exec.install()
            exec(compile(code, "fork", "exec"), {"os": os})
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert marker.exists()
