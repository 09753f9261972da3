"""The one format that crosses between the grader and the runner, both ways: a frame of a small
JSON object and plain arrays.

A frame is `len(JSON)` (8 bytes, big-endian), the JSON, then an `.npz` of the arrays, stored
uncompressed. It carries a job to the runner (its specification and one exercise's inputs) and
an exercise's result back (errors, forbidden calls, outputs). Reading one trusts nothing but its
shape: sizes are capped, the JSON must be an object, the archive must hold only stored members
(a compressed one could be a zip bomb) and no object array (that would need pickle).
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

HEADER_BYTES = 8
MAX_JSON_BYTES = 1 << 20
MAX_ARRAYS_BYTES = 16 << 20  # 16 times the largest output of any check
MAX_FRAME_BYTES = HEADER_BYTES + MAX_JSON_BYTES + MAX_ARRAYS_BYTES


class BadFrame(ValueError):
    """Not a frame this module wrote: too large, truncated, not JSON, not plain arrays."""


def encode(fields: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    meta = json.dumps(fields).encode()
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return len(meta).to_bytes(HEADER_BYTES, "big") + meta + buffer.getvalue()


def decode(
    frame: bytes, max_arrays: int = MAX_ARRAYS_BYTES
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The JSON object and the arrays of `frame`; raises BadFrame for anything else."""
    size = int.from_bytes(frame[:HEADER_BYTES], "big")
    meta, npz = frame[HEADER_BYTES : HEADER_BYTES + size], frame[HEADER_BYTES + size :]
    if len(frame) < HEADER_BYTES or size > MAX_JSON_BYTES or len(meta) < size:
        raise BadFrame("a truncated or oversized header")
    if len(npz) > max_arrays:
        raise BadFrame(f"more than {max_arrays >> 20} MB of arrays")
    try:
        fields = json.loads(meta)
    except (ValueError, RecursionError):  # bad JSON or UTF-8; nested deeper than Python's stack
        raise BadFrame("not JSON") from None
    if not isinstance(fields, dict):
        raise BadFrame("not a JSON object")
    try:
        return fields, _plain_arrays(npz)
    except (OSError, ValueError, MemoryError, zipfile.BadZipFile):  # MemoryError: a forged shape
        raise BadFrame("not plain arrays") from None


def _is_pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def check_result(fields: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Raise BadFrame unless `fields` and `arrays` are a result as the runner writes it:
    `load_error` a [kind, message] pair, or `errors` {case: [kind, message]} and `calls` a list
    of names; arrays of numbers or booleans only, keyed `<case>/<name>`."""
    if set(fields) - {"load_error", "errors", "calls"}:
        raise BadFrame("a result with fields the runner does not write")
    if "load_error" in fields and not _is_pair(fields["load_error"]):
        raise BadFrame("a result whose error is not a kind and a message")
    errors = fields.get("errors", {})
    if not isinstance(errors, dict) or not all(_is_pair(e) for e in errors.values()):
        raise BadFrame("a result whose errors are not kinds and messages")
    calls = fields.get("calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        raise BadFrame("a result whose calls are not names")
    for key, array in arrays.items():
        if "/" not in key or array.dtype.kind not in "biufc":
            raise BadFrame(f"a result holding {array.dtype} data (only numbers are outputs)")


def _plain_arrays(npz: bytes) -> dict[str, np.ndarray]:
    """The arrays of an .npz as `encode` writes it (stored, not compressed, so they take no more
    memory than the bytes). Never unpickled: an object array is refused, not loaded."""
    with zipfile.ZipFile(io.BytesIO(npz)) as archive:
        if any(m.compress_type != zipfile.ZIP_STORED for m in archive.infolist()):
            raise ValueError("compressed")
    with np.load(io.BytesIO(npz), allow_pickle=False) as data:
        return {key: data[key] for key in data.files}
