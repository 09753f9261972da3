"""Students get no answers: what a student's demos import and the outputs a student sees hold no
working implementation of a graded exercise.

`norm_utils` is what the released notebooks' demos import; the graded references live in
`grader.reference`, which an answer may not import (an import of the grader earns no points).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

import grader.reference
import norm_utils
from grader.checks import EXERCISES
from grader.config import assignments
from grader.notebook import source_notebook


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
                ("def ", "class ", "self, ", "from ", "import ")
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
