"""The runner's package stands alone: it imports only the standard library, numpy and torch, and
grades with the rest of `grader` unimportable, as in the sandbox."""

from __future__ import annotations

import ast
import io
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from grader.course import notebook_path
from grader.course.config import SOLUTIONS
from grader.grading.grade import grade_notebook_file
from grader.grading.sandbox import RUNNER_MODULE, SANDBOXED
from grader.grading.sandboxed import record

ALLOWED = set(sys.stdlib_module_names) | {"numpy", "torch"}
ASSIGNMENT = "01_layer_norm"


def absolute_imports(path: Path) -> set[str]:
    """The top-level names of the modules `path` imports, relative imports left out."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add((node.module or "").split(".")[0])
    return names


@pytest.mark.parametrize("module", sorted(p.name for p in SANDBOXED.glob("*.py")))
def test_the_runner_package_imports_only_the_standard_library_numpy_and_torch(module):
    assert absolute_imports(SANDBOXED / module) <= ALLOWED


class GraderHidden:
    """Stands for the sandbox: the runner started as `sandboxed.runner`, `grader` unimportable."""

    def __init__(self, folder: Path):
        (folder / "sandboxed").symlink_to(SANDBOXED)
        self.folder = folder

    def command(self, command: list[str], job: Path) -> list[str]:
        assert command[-2:] == ["-m", RUNNER_MODULE]
        start = (
            "import runpy, sys\n"
            "sys.modules['grader'] = None  # import grader, and grader.anything, now fail\n"
            f"sys.path.insert(0, {str(self.folder)!r})\n"
            f"runpy.run_module({RUNNER_MODULE!r}, run_name='__main__', alter_sys=True)\n"
        )
        return [sys.executable, "-P", "-c", start]


def test_the_runner_grades_with_the_grader_unimportable(tmp_path):
    notebook = notebook_path(SOLUTIONS, ASSIGNMENT)
    results = grade_notebook_file(notebook, ASSIGNMENT, seed=0, sandbox=GraderHidden(tmp_path))
    assert [(r.name, r.score) for r in results] == [(r.name, r.max_score) for r in results]


def test_a_frame_holds_only_plain_arrays_and_a_json_object():
    frame = record.encode({"errors": {}}, {"0/y": [1.0, 2.0]})
    assert record.decode(frame)[0] == {"errors": {}}
    with pytest.raises(record.BadFrame, match="not plain arrays"):
        record.decode(record.encode({}, {"0/y": [object()]}))
    with pytest.raises(record.BadFrame, match="not a JSON object"):
        record.decode(record.encode([], {}))  # type: ignore[arg-type]
    with pytest.raises(record.BadFrame, match="truncated"):
        record.decode(frame[:4])


def test_a_compressed_frame_is_refused_without_being_decompressed():
    """A zip bomb where an exercise's arrays belong: 512 MB of float64 zeros deflated to half a
    MB. Reading it costs the grader no more than the frame's cap, not the member's size."""
    count = 64 << 20
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as npz:
        with npz.open("0/y.npy", "w", force_zip64=True) as member:
            header = {"descr": "<f8", "fortran_order": False, "shape": (count,)}
            np.lib.format.write_array_header_2_0(member, header)
            for _ in range(count // (1 << 20)):
                member.write(bytes(8 << 20))
    meta = b'{"errors": {}, "calls": []}'
    frame = len(meta).to_bytes(record.HEADER_BYTES, "big") + meta + bomb.getvalue()
    tracemalloc.start()
    try:
        with pytest.raises(record.BadFrame, match="not plain arrays"):
            record.decode(frame)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < record.MAX_ARRAYS_BYTES + (16 << 20)
