"""Students get no answers: what a student's demos import and the outputs a student sees hold no
working implementation of a graded exercise, and the student's own checks judge as the grader
does without one.

`norm_utils` is what the released notebooks' demos import; the graded references live in
`grader.reference`, which an answer may not import (an import of the grader earns no points).
The notebooks' `check` is `normcheck`'s: the grader's judge on outputs stored at release time
(tests/test_packaging.py installs the students' wheel alone and runs it).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
from types import ModuleType
from typing import Any

import nbformat
import pytest

import grader.reference
import norm_utils
from grader.checks import EXERCISES, run
from grader.course import notebook_path
from grader.course.config import RELEASE, assignments
from grader.course.intake import answer_source, setup_code, source_notebook
from grader.grading.grade import grade_notebook_file
from grader.grading.sandboxed.calling import load_answer
from normcheck import check, visible
from normcheck.integrity import forbidden_uses


def _modules(package: ModuleType) -> list[ModuleType]:
    names = pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    return [package, *(importlib.import_module(info.name) for info in names)]


REFERENCE_MODULES = _modules(grader.reference)


def graded_names() -> set[str]:
    """Every exercise's name, and every name the graded references go by."""
    references = {
        name
        for module in REFERENCE_MODULES
        for name in getattr(module, "__all__", [])
        if not inspect.ismodule(getattr(module, name))
    }
    return set(EXERCISES) | references


def defined_or_imported(module: ModuleType) -> set[str]:
    """Names a module's own source defines (def, class, assignment) or imports."""
    names = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[-1] for alias in node.names}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


@pytest.mark.parametrize("module", _modules(norm_utils), ids=lambda m: m.__name__)
def test_the_demo_package_neither_writes_nor_reexports_a_graded_exercise(module):
    assert sorted(defined_or_imported(module) & graded_names()) == []
    assert sorted(set(dir(module)) & graded_names()) == []


def reference_lines() -> set[str]:
    """The code lines of the graded references that say something (not docstrings, comments,
    signatures or one-word lines): the lines that would give an answer away."""
    lines = set()
    for module in REFERENCE_MODULES[1:]:
        source = inspect.getsource(module)
        docstrings = {
            ast.get_docstring(node, clean=False)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        }
        text = source
        for doc in filter(None, docstrings):
            text = text.replace(doc, "")
        for line in text.splitlines():
            code = line.split("#")[0].strip()
            if len(code) >= 30 and not code.startswith(
                ("def ", "class ", "self, ", ") -> ", "from ", "import ")
            ):
                lines.add(code)
    return lines


def stored_outputs(assignment: str) -> str:
    texts = []
    for cell in source_notebook(assignment).cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(texts)


def test_reference_lines_are_found_where_they_appear():
    """The scan below is not vacuous: it finds the references' lines in their own source."""
    lines = reference_lines()
    assert len(lines) > 50
    source = inspect.getsource(grader.reference.blocks.PreLNBlock.forward)
    assert any(line in source for line in lines)


@pytest.mark.parametrize("assignment", assignments())
def test_no_output_a_student_sees_prints_a_reference_implementation(assignment):
    """The solutions' stored outputs are what the released notebooks' demos print."""
    outputs = stored_outputs(assignment)
    assert sorted(line for line in reference_lines() if line in outputs) == []


# --- the student's check: the grader's judge on stored outputs, and nothing of the answers ------

IMPORTS_OF_THE_ANSWERS = """
import sys
import normcheck, normcheck.expected

def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    raise NotImplementedError()

normcheck.check("layer_norm", layer_norm)
print(sorted(m for m in sys.modules if m.startswith(("grader.checks", "grader.reference"))))
"""


def test_the_students_check_loads_no_reference_known_mistake_or_check_module():
    """normcheck judges with what it stores: running a check imports none of the checks'
    modules (which hold the known mistakes and the hidden checks) nor the references."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_OF_THE_ANSWERS], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines()[-1] == "[]", done.stdout


def _mistakes() -> list[tuple[str, Any]]:
    return [(e.name, m) for e in EXERCISES.values() for m in e.mistakes]


@pytest.mark.parametrize(("name", "mistake"), _mistakes(), ids=lambda c: getattr(c, "name", c))
def test_the_students_check_says_what_the_grader_says(name, mistake):
    """On the stored outputs, the student's check judges each known mistake word for word as
    the grader does computing them afresh (the data holds every mistake's outputs it needs)."""
    graders = run(EXERCISES[name], mistake.impl, hidden=False, seed=0, source="")
    assert visible(name, mistake.impl, source="").render() == graders.render()


def test_grader_check_and_the_notebooks_check_cell_say_the_same(capsys):
    """`grader check` on the untouched release, and each check cell run on its stubs."""
    assignment = assignments()[0]
    results = grade_notebook_file(
        notebook_path(RELEASE, assignment), assignment, seed=0, hidden=False
    )
    notebook = nbformat.read(notebook_path(RELEASE, assignment), as_version=4)
    for result in results:
        stub = load_answer(setup_code(notebook), answer_source(notebook, result.name), result.name)
        check(result.name, stub)  # not implemented yet: said, and the notebook goes on
        assert capsys.readouterr().out == result.feedback + "\n"
        assert f"`{result.name}` is not implemented yet" in result.feedback


def test_an_answer_may_not_import_the_students_checks():
    """normcheck holds the visible checks' expected outputs: an answer reading them earns
    nothing, like one importing the grader."""
    uses = forbidden_uses("from normcheck import expected\n", EXERCISES["layer_norm"])
    assert uses == ["from normcheck import expected (line 1)"]
