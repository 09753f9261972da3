"""An assignment's cells, read by nbgrader's metadata (`cell.metadata.nbgrader`) and by two
conventions of this course: the locked setup cell (`SETUP_ID`: the imports every answer may rely
on) and each exercise's test cell, tagged with the exercise's name and `TEST_SUFFIX`. An
exercise's answer is found by `answer_cell` alone, for grading as for recording.
"""

from __future__ import annotations

import ast
import re

from nbformat import NotebookNode

SETUP_ID = "imports"
TEST_SUFFIX = "_tests"


def nbgrader_metadata(cell: NotebookNode) -> dict:
    """The cell's nbgrader metadata, which nbgrader.utils's helpers read (empty, and not the
    cell's, for a cell nbgrader does not know)."""
    return cell.metadata.get("nbgrader", {})


def set_nbgrader_metadata(cell: NotebookNode, metadata: dict | None) -> None:
    """Tag `cell` with a copy of `metadata`, or (None) take its nbgrader tag away."""
    if metadata is None:
        cell.metadata.pop("nbgrader", None)
    else:
        cell.metadata["nbgrader"] = dict(metadata)


def grade_id(cell: NotebookNode) -> str:
    """The cell's nbgrader name ('' for a cell nbgrader does not know)."""
    return nbgrader_metadata(cell).get("grade_id", "")


def is_solution(cell: NotebookNode) -> bool:
    """A cell the student writes (nbgrader's `solution` flag)."""
    return bool(nbgrader_metadata(cell).get("solution", False))


def is_test_cell(cell: NotebookNode) -> bool:
    """An autograded test cell: code that nbgrader grades and the student does not write."""
    grades = bool(nbgrader_metadata(cell).get("grade", False))
    return cell.cell_type == "code" and grades and not is_solution(cell)


def grade_id_of_tests(exercise: str) -> str:
    """The grade_id of `exercise`'s test cell (nbgrader's name for its score)."""
    return exercise + TEST_SUFFIX


def exercise_of_test(test_id: str) -> str:
    """The exercise a test cell's grade_id belongs to ('' when it is not a test cell's)."""
    return test_id.removesuffix(TEST_SUFFIX) if test_id.endswith(TEST_SUFFIX) else ""


def defines(source: str, name: str) -> bool:
    """Whether the cell's top level defines a function or class `name` (by its text, should the
    student's code not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # what a source can make it
        return bool(re.search(rf"^(def|class)\s+{re.escape(name)}\b", source, re.M))
    return any(isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name for n in tree.body)


def answer_cell(notebook: NotebookNode, name: str) -> NotebookNode | None:
    """Exercise `name`'s answer cell, or None: the code cell tagged `name`, else (an editor
    stripped the tags) a code cell defining `name`. Of several, the last: in Jupyter the cell
    run last defines the name."""
    code = [c for c in notebook.cells if c.cell_type == "code"]
    found = [c for c in code if grade_id(c) == name] or [c for c in code if defines(c.source, name)]
    return found[-1] if found else None
