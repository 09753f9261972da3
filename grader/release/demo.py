"""The bundled sample class: synthetic students built from the solution and release notebooks.

Every student has one profile; each profile says how to write that student's notebook for an
assignment, and which score each exercise should then earn. Generic profiles (correct, untouched,
broken in one way or another) apply to every notebook; mistake profiles rewrite one answer cell
the way a student making that classic mistake would, and declare the points it keeps.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.utils import is_grade, is_solution

from grader.checks import EXERCISES
from grader.course import (
    SETUP_ID,
    answer_cell,
    grade_id,
    is_test_cell,
    nbgrader_metadata,
    notebook_path,
)
from grader.course.config import RELEASE, SOLUTIONS, assignments
from grader.course.intake import exercises_of, source_notebook

Notebook = nbformat.NotebookNode


def _solution(a: str) -> Notebook:
    """What a student who solved everything hands in: the release, with every answer cell
    holding the solution's answer (never the hidden tests, which a student never sees)."""
    notebook = _release(a)
    source = source_notebook(a)
    answers = {grade_id(c): c.source for c in source.cells if is_solution(c)}
    for cell in notebook.cells:
        if grade_id(cell) in answers:
            cell.source = answers[grade_id(cell)]
    return notebook


def _release(a: str) -> Notebook:
    return nbformat.read(notebook_path(RELEASE, a), as_version=4)


def _first(a: str) -> str:
    return exercises_of(source_notebook(a))[0]


def _edit_first_answer(edit: Callable[[str, str], str]) -> Callable[[str], Notebook]:
    def build(a: str) -> Notebook:
        nb = _solution(a)
        cell = answer_cell(nb, _first(a))
        cell.source = edit(cell.source, _first(a))
        return nb

    return build


def _in_first_notebook(build: Callable[[str], Notebook]) -> Callable[[str], Notebook]:
    """`build` for the first assignment, the solution for the others."""
    return lambda a: build(a) if a == assignments()[0] else _solution(a)


def _strip_metadata(a: str) -> Notebook:
    """What some editors do: every nbgrader tag gone, kernelspec changed, outputs cleared."""
    nb = _solution(a)
    nb.metadata["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    for cell in nb.cells:
        cell.metadata = {}
    return nb


def _delete_tests_and_imports(a: str) -> Notebook:
    nb = _solution(a)
    nb.cells = [c for c in nb.cells if not is_test_cell(c) and grade_id(c) != SETUP_ID]
    return nb


def _reorder_and_duplicate(a: str) -> Notebook:
    """Cells reversed; the first answer duplicated, a wrong copy above the right one (in Jupyter
    the cell run last wins, and so it does when grading)."""
    nb = _solution(a)
    answer = answer_cell(nb, _first(a))
    wrong = copy.deepcopy(answer)
    wrong.source = f"def {_first(a)}(*args, **kwargs):\n    return None\n"
    wrong.metadata = {}
    nb.cells = [*reversed(nb.cells)]
    nb.cells.insert(nb.cells.index(answer), wrong)
    return nb


def _edit_locked_tests(a: str) -> Notebook:
    nb = _solution(a)
    for cell in nb.cells:
        if is_test_cell(cell):
            cell.source = "print('all tests passed')\n10.0"
    return nb


def _full(a: str) -> dict[str, float]:
    return {n: EXERCISES[n].points for n in exercises_of(source_notebook(a))}


def _zero(a: str) -> dict[str, float]:
    return dict.fromkeys(_full(a), 0.0)


def _all_but_first(a: str) -> dict[str, float]:
    return {**_full(a), _first(a): 0.0}


@dataclass(frozen=True)
class Profile:
    """How a student's notebook is written, and the per-exercise scores it must earn."""

    description: str
    build: Callable[[str], Notebook | str | None]  # a notebook, raw text, or None (missing)
    expected: Callable[[str], dict[str, float]]


def _mistake(
    description: str, assignment: str, exercise: str, old: str, new: str, keeps: float
) -> Profile:
    """One answer cell rewritten with a classic mistake; the rest of the notebook correct."""

    def build(a: str) -> Notebook:
        nb = _solution(a)
        if a == assignment:
            cell = answer_cell(nb, exercise)
            assert old in cell.source, f"{exercise}: the mutation no longer applies"
            cell.source = cell.source.replace(old, new)
        return nb

    def expected(a: str) -> dict[str, float]:
        return {**_full(a), exercise: keeps} if a == assignment else _full(a)

    return Profile(description, build, expected)


PROFILES: dict[str, Profile] = {
    "ada": Profile("correct everywhere", _solution, _full),
    "ben": Profile("hands in the untouched release", _release, _zero),
    "cyd": Profile("hands in empty folders (missing notebooks)", lambda a: None, _zero),
    "dee": Profile("a file that is not JSON", lambda a: '{"cells": [', _zero),
    "eli": Profile(
        "renamed the first graded function",
        _edit_first_answer(
            lambda src, name: re.sub(rf"\b(def|class) {name}\b", rf"\1 my_{name}", src)
        ),
        _all_but_first,
    ),
    "fay": Profile(
        "kills the kernel in the first answer (os._exit)",
        _edit_first_answer(lambda src, name: "import os\n\nos._exit(3)\n" + src),
        _all_but_first,
    ),
    # One loop is enough to show the timeout, and each costs a grading run the whole limit.
    "gus": Profile(
        "loops forever in the first answer of the first notebook",
        _in_first_notebook(_edit_first_answer(lambda src, name: "while True:\n    pass\n" + src)),
        lambda a: _all_but_first(a) if a == assignments()[0] else _full(a),
    ),
    "hal": Profile("editor stripped all metadata, changed kernel", _strip_metadata, _full),
    "mia": Profile(
        "deleted every test cell and the imports cell", _delete_tests_and_imports, _full
    ),
    "ned": Profile(
        "cells reversed, a wrong copy of the first answer above the right one",
        _reorder_and_duplicate,
        _full,
    ),
    "oli": Profile("rewrote the locked test cells to print a pass", _edit_locked_tests, _full),
    "ivy": _mistake(
        "layer_norm with the unbiased variance",
        "01_layer_norm",
        "layer_norm",
        "var = ((x - mean) ** 2).mean(dims, keepdim=True)",
        "var = x.var(dims, keepdim=True)",
        keeps=8.0,  # a slip, not a wrong structure: loses the seed's example and rows of 4 (2)
    ),
    "jon": _mistake(
        "layer_norm with ε outside the square root",
        "01_layer_norm",
        "layer_norm",
        "x_hat = (x - mean) / torch.sqrt(var + eps)",
        "x_hat = (x - mean) / (torch.sqrt(var) + eps)",
        keeps=8.5,  # all but "variance close to ε" (its visible and hidden checks, 1.5)
    ),
    "kim": _mistake(
        "stable_var as E[x²]−E[x]²",
        "01_layer_norm",
        "stable_var",
        "return ((x - mean) ** 2).mean(dim)",
        "return (x * x).mean(dim) - x.mean(dim) ** 2",
        # Fails only "mean 1e4". Constant rows pass: identical float32 values make E[x²] and
        # E[x]² round identically, so their difference is exactly 0.
        keeps=2.0,
    ),
    "lou": _mistake(
        "layer_norm without γ and β",
        "01_layer_norm",
        "layer_norm",
        "x_hat = (x - mean) / torch.sqrt(var + eps)",
        "x_hat = (x - mean) / torch.sqrt(var + eps)\n    return x_hat",
        keeps=8.0,  # affine ignored: loses "weight and bias" (1.5) and "constant rows" (0.5)
    ),
    "max": _mistake(
        "layer_norm by calling F.layer_norm",
        "01_layer_norm",
        "layer_norm",
        "### BEGIN SOLUTION",
        "return F.layer_norm(x, normalized_shape, weight, bias, eps)",
        keeps=0.0,  # the library's own layer_norm: no credit
    ),
}


def write_class(target: Path, profiles: dict[str, Profile] = PROFILES) -> Path:
    """Write every student's notebooks under target/<student>/<assignment>/<assignment>.ipynb."""
    for student, profile in profiles.items():
        for a in assignments():
            made = profile.build(a)
            path = notebook_path(target / student, a)
            path.parent.mkdir(parents=True, exist_ok=True)  # handed in, notebook or not
            if made is None:
                continue
            if isinstance(made, str):
                path.write_text(made)
            else:
                nbformat.write(copy.deepcopy(made), path)
    return target


def expected_scores(
    profiles: dict[str, Profile] = PROFILES,
) -> dict[tuple[str, str], dict[str, float]]:
    return {(s, a): p.expected(a) for s, p in profiles.items() for a in assignments()}


def written_points(source: Path = SOLUTIONS) -> dict[str, float]:
    """Each assignment's points for written answers: a person grades them (in formgrader),
    never the checks, so a correct notebook is short of them until then."""
    return {
        a: sum(
            float(nbgrader_metadata(c)["points"])
            for c in source_notebook(a, source).cells
            if c.cell_type == "markdown" and is_grade(c)
        )
        for a in assignments()
    }


def written_answers_note(source: Path = SOLUTIONS) -> str:
    """What the demo says of ada's missing points."""
    points = {a: p for a, p in written_points(source).items() if p}
    each = ", ".join(f"{p:g} in {a}" for a, p in points.items())
    return (
        f"  ada's missing points ({sum(points.values()):g}: {each}) are the written answers: "
        "a TA grades them in formgrader, the checks never do."
    )
