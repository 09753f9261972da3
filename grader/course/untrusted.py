"""Files someone else controls: a student's submission.

The grader may run as root, and the parts of such a path below a trusted folder are chosen by
the student: a symbolic link there would make the grader read a classmate's notebook or the
answer key as the student's, a FIFO would block it forever, a sparse or huge file would fill its
memory. So every step below the trusted folder is opened without following links, the last one
must be a regular file (checked on the open file, so it cannot be swapped in between), and no
more than a cap is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path, PurePath


class UnsafeFile(ValueError):
    """A path that is a link, not a regular file, or too large; its message says which."""


def read_below(root: Path, relative: PurePath, limit: int) -> bytes:
    """The bytes of `root / relative`, where `root` is trusted and nothing below it is: refuses
    a link at any step, anything but a regular file at the end, and more than `limit` bytes.
    Raises FileNotFoundError when a step does not exist, UnsafeFile otherwise."""
    *folders, name = relative.parts
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for depth, part in enumerate(folders, 1):
            inner = _enter(fd, part, PurePath(*relative.parts[:depth]))
            os.close(fd)
            fd = inner
        return _read_regular(fd, name, relative, limit)
    finally:
        os.close(fd)


def _refuse_link(folder: int, name: str, shown: PurePath) -> os.stat_result:
    found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    if stat.S_ISLNK(found.st_mode):
        raise UnsafeFile(f"{shown} is a symbolic link, not a file of its own (refused)")
    return found


def _enter(folder: int, name: str, shown: PurePath) -> int:
    """The folder `name` in `folder`, opened without following a link."""
    _refuse_link(folder, name, shown)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(name, flags, dir_fd=folder)


def _read_regular(folder: int, name: str, shown: PurePath, limit: int) -> bytes:
    found = _refuse_link(folder, name, shown)
    if not stat.S_ISREG(found.st_mode):
        raise UnsafeFile(f"{shown} is not a regular file (refused)")
    # O_NONBLOCK: should a FIFO be swapped in since the check, opening it must not wait.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    fd = os.open(name, flags, dir_fd=folder)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise UnsafeFile(f"{shown} is not a regular file (refused)")
        if opened.st_size > limit:
            raise UnsafeFile(f"{shown} is larger than {limit >> 20} MB (refused)")
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(limit + 1)
        if len(data) > limit:  # grew since fstat
            raise UnsafeFile(f"{shown} is larger than {limit >> 20} MB (refused)")
        return data
    finally:
        os.close(fd)
