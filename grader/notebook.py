"""Reading exercises out of notebooks: which exercises a notebook holds, and a student's answers.

Answer cells are found by their nbgrader `grade_id` (the exercise's name); when a student's
editor stripped the metadata, by the cell that defines the function or class of that name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePath

import nbformat

from grader.checks import EXERCISES
from grader.config import course_source
from grader.untrusted import read_below

SETUP_ID = "imports"
MAX_NOTEBOOK_BYTES = 20 << 20  # a course notebook with its plots is well under 1 MB


def _grade_id(cell) -> str:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")


def _defines(source: str, name: str) -> bool:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return bool(re.search(rf"^(def|class)\s+{re.escape(name)}\b", source, re.M))
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name for n in tree.body)


def source_notebook(assignment: str, folder: Path | None = None) -> nbformat.NotebookNode:
    """`assignment`'s notebook in `folder` (default: the course source graded against)."""
    folder = folder or course_source()
    return nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)


def exercises_of(notebook: nbformat.NotebookNode) -> list[str]:
    """The graded exercises of a (source) notebook, in order."""
    return [_grade_id(c) for c in notebook.cells if _grade_id(c) in EXERCISES]


def setup_code(notebook: nbformat.NotebookNode) -> str:
    """The locked imports cell every answer may rely on (taken from the source, not the student)."""
    return "\n".join(c.source for c in notebook.cells if _grade_id(c) == SETUP_ID)


def answer_source(notebook: nbformat.NotebookNode, name: str) -> str | None:
    """The student's answer cell for exercise `name`, or None if there is none."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    tagged = [c for c in code if _grade_id(c) == name]
    found = tagged or [c for c in code if _defines(c.source, name)]
    return (
        found[-1].source if found else None
    )  # a duplicated cell: the last one wins, as in Jupyter


def submitted_bytes(path: Path) -> bytes:
    """The bytes of a notebook at <submissions>/<student>/<assignment>/<notebook>, nbgrader's
    layout. Those three steps are the student's: a link in any of them, a FIFO, a device or a
    file over MAX_NOTEBOOK_BYTES is refused (untrusted.Refused, a ValueError)."""
    return read_below(path.parents[2], PurePath(*path.parts[-3:]), MAX_NOTEBOOK_BYTES)


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """A submitted notebook (see submitted_bytes); raises ValueError with a plain reason when it
    cannot be read."""
    try:
        data = submitted_bytes(path)
    except FileNotFoundError:
        raise ValueError(f"{path.name} is missing") from None
    except OSError as error:  # a folder that is a file, no permission
        raise ValueError(f"{path.name} cannot be opened ({error.strerror})") from None
    try:
        return nbformat.reads(data.decode(), as_version=4)
    except Exception as error:  # invalid JSON or UTF-8, wrong schema, binary junk
        raise ValueError(
            f"{path.name} is not a readable notebook ({type(error).__name__})"
        ) from None


def restore_metadata(submitted: nbformat.NotebookNode, source: nbformat.NotebookNode) -> int:
    """Re-tag cells whose nbgrader metadata an editor stripped; returns how many were re-tagged.

    An answer cell is recognized by the function or class it defines, a locked cell by its
    unchanged text. Cells that cannot be recognized are left for nbgrader to add back.
    """
    present = {_grade_id(c) for c in submitted.cells} - {""}
    restored = 0
    for cell in source.cells:
        grade_id = _grade_id(cell)
        if not grade_id or grade_id in present:
            continue
        meta = cell.metadata["nbgrader"]
        for candidate in submitted.cells:
            if _grade_id(candidate) or candidate.cell_type != cell.cell_type:
                continue
            by_name = meta.get("solution") and _defines(candidate.source, grade_id)
            if by_name or candidate.source.strip() == _visible_part(cell.source):
                candidate.metadata["nbgrader"] = dict(meta)
                restored += 1
                break
    return restored


def untag_earlier_copies(notebook: nbformat.NotebookNode) -> int:
    """A cell copied in Jupyter keeps its nbgrader metadata, so a grade_id can appear twice,
    which nbgrader refuses to record. The last copy is the one graded (see answer_source), so
    the earlier ones lose their tag; returns how many did."""
    last = {_grade_id(c): c for c in notebook.cells if _grade_id(c)}
    untagged = 0
    for cell in notebook.cells:
        if _grade_id(cell) and last[_grade_id(cell)] is not cell:
            del cell.metadata["nbgrader"]
            untagged += 1
    return untagged


def _visible_part(source: str) -> str:
    """A test cell as the student sees it: without its hidden region."""
    kept, hidden = [], False
    for line in source.splitlines():
        if "BEGIN HIDDEN TESTS" in line:
            hidden = True
        elif "END HIDDEN TESTS" in line:
            hidden = False
        elif not hidden:
            kept.append(line)
    return "\n".join(kept).strip()
