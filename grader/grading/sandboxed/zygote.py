"""A runner started once per worker: Python, torch and the notebooks' imports paid once, then a
fresh sandbox forked from it for every student.

Started by grader.grading.sandbox (`Sandbox.prestart_command`) as `python -P -m sandboxed.zygote
ROOT TMP_BYTES` in a bubblewrap sandbox like a runner's, except that it keeps root's capabilities
there (it runs no student code: only this module, the runner's imports and the source's imports
cells) and that its writable folder is ROOT, which holds the job folders of the students it
grades. Its stdin is a Unix socket to the grader: first the source's imports cells (a JSON list),
answered by `ready`; then one request per student, a JSON object {"job": the job folder's name
in ROOT, "uid": the student's uid, "env": the runner's whole environment} with four descriptors:
the runner's stdin, stdout and stderr, and a lifeline the grader closes to kill the student's
sandbox (a timeout, a stop).

For each request it forks a process that makes the student's sandbox fresh: new mount, PID,
network and IPC namespaces; ROOT covered by an empty tmpfs in which only the student's own job
folder is bound; a new tmpfs on /tmp and on /dev/shm; a new /proc. In it, an init (PID 1) reaps
and watches the lifeline, and the runner (PID 2, its parent the init, as under bubblewrap) drops
to the student's uid, without capabilities, groups or the means to regain them, and runs
`runner.main` on its own descriptors with the environment it was sent. When the runner exits or
the lifeline closes, the init exits, and the kernel kills every process of that PID namespace:
nothing a student starts, writes to /tmp or /dev/shm, or changes in its Python process reaches
the next student, whose sandbox is a new fork of this process, which never ran student code.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

from . import runner

CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 24, 38
CAPABILITY_VERSION_3 = 0x20080522
# What bubblewrap keeps read-only in the /proc it mounts; so does the student's new /proc.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus")
MAX_REQUEST_BYTES = 1 << 16
_LIBC = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encode = lambda text: text.encode() if text else None  # noqa: E731
    result = _LIBC.mount(encode(source), encode(target), encode(kind), flags, encode(data))
    _check(result, f"mount {target}")


def _drop_bounding_set() -> None:
    """No capability can be regained, by exec or otherwise (needs CAP_SETPCAP: done first)."""
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for cap in range(last + 1):
        _check(_LIBC.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), "drop the bounding set")


def _clear_capabilities() -> None:
    """No effective, permitted or inheritable capability, and no new privileges from exec."""
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    _check(_LIBC.capset(ctypes.byref(header), (_CapData * 2)()), "capset")
    _check(_LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def fresh_mounts(root: Path, job: str, tmp_bytes: int) -> None:
    """In a new mount namespace: a new /tmp and /dev/shm, and ROOT showing only the job folder
    `job` (ROOT may lie in /tmp, as the system's temporary folder does)."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing here reaches the worker's namespace
    folder = os.open(root / job, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for place in ("/tmp", "/dev/shm"):
            _mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=1777,size={tmp_bytes}")
        if root.exists():  # not hidden by the new /tmp: hide the other students' folders
            _mount("tmpfs", str(root), "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
        (root / job).mkdir(parents=True)
        _mount(f"/proc/self/fd/{folder}", str(root / job), None, MS_BIND)
    finally:
        os.close(folder)


def fresh_proc() -> None:
    """A /proc of the new PID namespace, its system parts read-only as bubblewrap makes them."""
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for name in PROC_READ_ONLY:
        path = f"/proc/{name}"
        if os.path.exists(path):
            _mount(path, path, None, MS_BIND)
            _mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)


def become(uid: int) -> None:
    """The student's uid and gid, no groups, no capabilities (as `setpriv --reuid --regid
    --clear-groups --inh-caps=-all --bounding-set=-all` does under bubblewrap)."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    _drop_bounding_set()
    os.setresuid(uid, uid, uid)  # clears the effective and permitted sets
    _clear_capabilities()


def init(runner_pid: int, lifeline: int) -> None:
    """PID 1 of the student's namespace: reap every process that ends up here, and return when
    the runner has exited or the lifeline closed (its exit then kills the whole namespace)."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        while True:  # reap what has ended, the runner's leftovers included
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == runner_pid:
                return
            if pid == 0:
                break
        ready, _, _ = select.select([wake_read, lifeline], [], [])
        if lifeline in ready:
            return
        os.read(wake_read, 512)


def run_student(request: dict, descriptors: list[int]) -> None:
    """The runner of one student: its descriptors as 0, 1, 2 and no other, its environment,
    its folder, its session and uid; then the runner's own protocol."""
    try:
        for target, fd in enumerate(descriptors):
            os.dup2(fd, target)
        os.closerange(3, max(int(fd) for fd in os.listdir("/proc/self/fd")) + 1)
        os.setsid()
        os.chdir(request["env"]["HOME"])
        os.environ.clear()
        os.environ.update(request["env"])
        become(request["uid"])
        status = runner.main()
    except BaseException as error:  # before `ready`: the grader's fault, said on stderr
        os.write(2, f"the pre-started runner failed: {error!r}\n".encode())
        status = 3
    os._exit(status)


def student_sandbox(request: dict, descriptors: list[int], root: Path, tmp_bytes: int) -> None:
    """In the fork for one student: its namespaces and mounts, its init and its runner."""
    stdio, lifeline = descriptors[:3], descriptors[3]
    runner._die_with_parent()
    _check(_LIBC.unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC), "unshare")
    fresh_mounts(root, request["job"], tmp_bytes)
    if os.fork():
        for fd in descriptors:
            os.close(fd)
        os.wait()  # for the init: its end is the student's end
        return
    runner._die_with_parent()
    fresh_proc()
    runner_pid = os.fork()
    if runner_pid == 0:
        os.close(lifeline)
        run_student(request, stdio)
    for fd in stdio:
        os.close(fd)
    _drop_bounding_set()
    _clear_capabilities()
    init(runner_pid, lifeline)


def serve(control: socket.socket, root: Path, tmp_bytes: int) -> None:
    """One student at a time, each in a new fork of this process, until the grader hangs up."""
    while True:
        message, descriptors, _, _ = socket.recv_fds(control, MAX_REQUEST_BYTES, 4)
        if not message:
            return
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                student_sandbox(json.loads(message), descriptors, root, tmp_bytes)
            except BaseException as error:  # said on the runner's stderr: a grader fault
                os.write(descriptors[2], f"the student's sandbox failed: {error!r}\n".encode())
            finally:
                os._exit(0)
        for fd in descriptors:
            os.close(fd)
        os.waitpid(pid, 0)


def main() -> int:
    runner._die_with_parent()
    runner._set_dumpable(False)
    root, tmp_bytes = Path(sys.argv[1]), int(sys.argv[2])
    control = socket.socket(fileno=0)
    setups = json.loads(control.recv(MAX_REQUEST_BYTES))
    runner.import_setups(setups)
    control.sendall(b"ready\n")
    serve(control, root, tmp_bytes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
