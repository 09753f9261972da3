"""An exercise's record in a runner's job: `out/<exercise>.json` (errors, library calls) and
`out/<exercise>.npz` (the outputs as plain arrays), and the digest that seals them.

The job folder is writable by every answer the runner runs. So that one answer cannot write or
rewrite another exercise's record, the runner removes an exercise's record before the exercise
starts and, once it has finished, tells the grader the record's digest on a channel no answer
can write (see grader.runner); the grader believes only a record with that digest.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePath

from grader.untrusted import read_below

MAX_JSON_BYTES = 1 << 20
MAX_ARRAYS_BYTES = 64 << 20  # the runner cannot write more (Limits.file_mb)


def paths(name: str) -> tuple[PurePath, PurePath]:
    """The record's two files, relative to the job folder."""
    return PurePath("out", f"{name}.json"), PurePath("out", f"{name}.npz")


def read(job: Path, name: str) -> tuple[bytes, bytes]:
    """The record's JSON and arrays, each b"" when absent. Raises FileNotFoundError when there
    is no JSON, and untrusted.Refused for a link, a special file or an oversized one."""
    meta, arrays = paths(name)
    try:
        npz = read_below(job, arrays, MAX_ARRAYS_BYTES)
    except FileNotFoundError:
        npz = b""
    return read_below(job, meta, MAX_JSON_BYTES), npz


def digest(meta: bytes, npz: bytes) -> str:
    return hashlib.sha256(len(meta).to_bytes(8, "big") + meta + npz).hexdigest()
