"""No new program from the runner: a seccomp filter under which `execve` and `execveat` fail with
EPERM, in this process and in everything it forks, by every route at once.

The forbidden-API block (`blocking`) and the tripwires live in the answer's process; a fresh
Python started from it would have neither, and the sandbox shows the interpreter and torch. Every
way the standard library has to start a program (`subprocess`, `os.system`, `os.popen`,
`os.posix_spawn`, `os.spawn*`, `os.exec*` after a fork, `multiprocessing`'s spawn and forkserver,
`pty.spawn`) and the raw system call through `ctypes` end in one of these two calls; the kernel
refuses them all. A fork of the answer's process stays possible: it is the same process, block
and tripwires included. The filter cannot be removed once installed, and no_new_privs (which it
needs) also keeps a set-uid program from giving privileges back.

It imports only the standard library: it runs in the student's process.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
# The audit architecture each syscall table belongs to, and its (execve, execveat) numbers.
SYSCALLS = {
    "x86_64": (0xC000003E, (59, 322)),
    "aarch64": (0xC00000B7, (221, 281)),
}
X32_BIT = 0x40000000  # x86_64's x32 table (and nothing on aarch64): refused whole

_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _KILL_PROCESS = 0x7FFF0000, 0x80000000
_REFUSE = 0x00050000 | errno.EPERM  # SECCOMP_RET_ERRNO: the call returns -1, errno EPERM
_NR, _ARCH = 0, 4  # offsets in struct seccomp_data


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def program(machine: str) -> bytes:
    """The filter for `machine` (as os.uname() names it), as struct sock_filter instructions."""
    arch, (execve, execveat) = SYSCALLS[machine]
    steps = [  # (code, jump if true, jump if false, k); jumps skip that many instructions
        (_LD_ABS_W, 0, 0, _ARCH),
        (_JEQ_K, 0, 6, arch),  # another table (e.g. i386's int 0x80): kill
        (_LD_ABS_W, 0, 0, _NR),
        (_JGE_K, 3, 0, X32_BIT),
        (_JEQ_K, 2, 0, execve),
        (_JEQ_K, 1, 0, execveat),
        (_RET_K, 0, 0, _ALLOW),
        (_RET_K, 0, 0, _REFUSE),
        (_RET_K, 0, 0, _KILL_PROCESS),
    ]
    return b"".join(struct.pack("=HBBI", *step) for step in steps)


def install() -> None:
    """Refuse every new program from now on; raises OSError if the kernel would not have it."""
    machine = os.uname().machine
    if machine not in SYSCALLS:
        raise OSError(f"no execve filter for a {machine} CPU")
    libc = ctypes.CDLL(None, use_errno=True)
    instructions = program(machine)
    code = (ctypes.c_char * len(instructions)).from_buffer_copy(instructions)
    filters = _Program(len(instructions) // 8, ctypes.addressof(code))
    for option, args in (
        (PR_SET_NO_NEW_PRIVS, (1, 0, 0, 0)),
        (PR_SET_SECCOMP, (SECCOMP_MODE_FILTER, ctypes.addressof(filters), 0, 0)),
    ):
        if libc.prctl(option, *(ctypes.c_ulong(a) for a in args)) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"prctl({option}) failed: {os.strerror(number)}")
