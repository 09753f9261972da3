"""Run All on the student release with exercises answered wrong or partly: every demo and
experiment runs.

After an exercise, a cell uses the student's function once it is written and the library's
until then, saying so in one line (`norm_utils.answers.yours_or`), so that a student can preview
a whole notebook before answering anything. Each released notebook is executed as a kernel runs
it (nbclient, every cell, errors recorded rather than stopping the run): no cell may fail, and
each check cell shows its exercise's failure. What a demo falls back on is the library's own
version, which the exercise forbids: as an answer it earns nothing, so the release hands out no
answer in a demo. (Run All with nothing answered, in JupyterLab: tests/test_browser.py; the
untouched release graded zero everywhere: the sample student ben in tests/test_grading.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from grader.checks import EXERCISES, run
from grader.course import answer_cell, is_test_cell, notebook_path
from grader.course.config import RELEASE, assignments
from grader.course.intake import exercises_of, setup_code, source_notebook


def _text(cell: nbformat.NotebookNode) -> str:
    """What a code cell showed: its streams, results and errors."""
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
        if out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def _run_all(assignment: str, answers: dict[str, str] | None = None) -> nbformat.NotebookNode:
    """The release notebook run top to bottom, with `answers` (exercise -> source) in place."""
    path = notebook_path(RELEASE, assignment)
    notebook = nbformat.read(path, as_version=4)
    for name, source in (answers or {}).items():
        answer_cell(notebook, name).source = source
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    return client.execute()


def _fallbacks(assignment: str) -> list[tuple[str, Any, str]]:
    """(exercise, what its demo falls back on, the source of the demo cell that defines it) for
    every `yours_or(answer, library, ...)` of the solution notebook, with the imports and
    functions of the demo cells up to it run after the imports cell."""
    notebook = source_notebook(assignment)
    namespace: dict[str, Any] = {"__name__": "__demo__"}
    exec(setup_code(notebook), namespace)
    found, defined_in = [], {}
    for cell in notebook.cells:
        if cell.cell_type != "code" or "nbgrader" in cell.metadata:
            continue
        tree = ast.parse(cell.source)
        defs = [
            n for n in tree.body if isinstance(n, ast.FunctionDef | ast.Import | ast.ImportFrom)
        ]
        exec(compile(ast.Module(defs, type_ignores=[]), "<demo>", "exec"), namespace)
        defined_in |= {n.name: cell.source for n in defs if isinstance(n, ast.FunctionDef)}
        if "yours_or(" not in cell.source:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "yours_or":
                answer, library = node.args[:2]
                fallback = eval(compile(ast.Expression(library), "<demo>", "eval"), namespace)
                source = defined_in.get(getattr(library, "id", ""), cell.source)
                found.append((answer.id, fallback, source))
    return found


@pytest.mark.parametrize("assignment", assignments())
def test_what_a_demo_falls_back_on_earns_nothing_as_an_answer(assignment):
    fallbacks = _fallbacks(assignment)
    assert fallbacks
    for name, library, source in fallbacks:
        verdict = run(EXERCISES[name], library, hidden=False, seed=0, source=source)
        assert verdict.integrity and verdict.score == 0, verdict.render()


def _wrong_answers(assignment: str) -> dict[str, str]:
    """The first hand-written wrong answer (tests/wrong_answers) of each exercise of
    `assignment` that has one."""
    folder = Path(__file__).parent / "wrong_answers"
    found = {}
    for name in exercises_of(source_notebook(assignment)):
        files = sorted(folder.glob(f"{name}__*.answer"))
        if files:
            found[name] = files[0].read_text()
    return found


def _errors(cells: list[nbformat.NotebookNode]) -> dict[int, str]:
    return {
        i: _text(c) for i, c in enumerate(cells) if any(o.output_type == "error" for o in c.outputs)
    }


def _failing(text: str) -> bool:
    return "✗" in text


@pytest.mark.parametrize("assignment", assignments())
def test_run_all_with_wrong_answers_stops_at_nothing_and_shows_their_failures(
    assignment, monkeypatch
):
    """Each exercise answered wrong, run as JupyterLab does: its check cell shows the failure
    without raising, and no cell after it fails (the demos fall back on the library's version,
    `yours_or`)."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    wrong = _wrong_answers(assignment)
    cells = [c for c in _run_all(assignment, wrong).cells if c.cell_type == "code"]
    assert _errors(cells) == {}, "a cell failed with the exercises answered wrong"
    checks = [_text(c) for c in cells if is_test_cell(c)]
    assert wrong and any(map(_failing, checks)), checks  # some fail only hidden checks
    fallbacks = [_text(c) for c in cells if "yours_or(" in c.source]
    assert any("visible checks: this cell uses" in t for t in fallbacks), fallbacks


def test_nbgrader_validate_still_reports_a_wrong_answers_check_cell(monkeypatch):
    """Under nbgrader's Validate (NBGRADER_EXECUTION=validate) a wrong answer's check cell
    raises, so Validate names it; the other cells still do not fail."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assignment = assignments()[0]
    wrong = _wrong_answers(assignment)
    cells = [c for c in _run_all(assignment, wrong).cells if c.cell_type == "code"]
    failed = _errors(cells)
    assert failed and all(is_test_cell(cells[i]) and _failing(t) for i, t in failed.items())


def _only_the_constructor(source: str) -> str:
    """A class answer partly written: its solution's constructor, every other method still the
    stub that raises NotImplementedError."""
    tree = ast.parse(source)
    stub = ast.parse("raise NotImplementedError()").body
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for method in node.body:
                if isinstance(method, ast.FunctionDef) and method.name != "__init__":
                    method.body = stub
    return ast.unparse(tree)


def test_run_all_with_classes_partly_written_stops_at_nothing(monkeypatch):
    """Each class of the placement notebook with only its constructor written: the demos that
    build it fall back on the library's version, and no cell fails."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    assignment = "04_placement"
    notebook = source_notebook(assignment)
    classes = {
        name: _only_the_constructor(answer_cell(notebook, name).source)
        for name in exercises_of(notebook)
        if "class " in answer_cell(notebook, name).source
    }
    cells = [c for c in _run_all(assignment, classes).cells if c.cell_type == "code"]
    assert classes and _errors(cells) == {}, "a cell failed with a class partly written"
    fallbacks = [_text(c) for c in cells if "yours_or(" in c.source]
    assert fallbacks and all("this cell uses" in t for t in fallbacks), fallbacks
