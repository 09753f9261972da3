"""The layers docs/architecture.md draws hold where import-linter cannot see: what a command
loads at run time. `grader export`, `grader feedback` and `grader report` read the gradebook and
the stored results, and load no torch (a second or more of each command's time), nor the
parsers jsonschema would build for a format no notebook uses (pyproject.toml's jsonschema pin)."""

import subprocess
import sys

import pytest

from grader.cli import main

# What each command imports: cli.py's command and the modules its body imports.
COMMANDS = {
    "export": ["grader.publish.feedback"],
    "feedback": ["grader.publish.feedback"],
    "report": ["grader.publish.class_report"],
}
SHARED = ["grader.cli", "grader.course", "grader.course.discovery", "grader.gradebook.records"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_reading_the_gradebook_loads_neither_torch_nor_grammar_parsers(command):
    modules = [*SHARED, *COMMANDS[command]]
    code = f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
    heavy = ("torch", "rfc3987_syntax", "lark")
    loaded = "sorted(m for m in sys.modules if sys.modules[m] and m.split('.')[0] in heavy)"
    code += f"heavy = {heavy!r}\nprint({loaded}[:3])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"grader {command} imports {done.stdout}"


def test_nothing_that_reads_a_notebook_builds_grammar_parsers():
    """nbformat (so every nbgrader command, JupyterLab and each test worker) validates with
    jsonschema; it must not load rfc3987_syntax's parsers, built at import in 1 to 2.6 s."""
    code = "import sys, nbformat, nbgrader.apps, jupyter_events.validators\n"
    code += "print(sorted(m for m in ('rfc3987_syntax', 'lark') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"reading a notebook imports {done.stdout}"


@pytest.mark.parametrize("command", ["export", "feedback", "report"])
def test_a_course_made_before_the_layout_is_refused_in_one_line(command, tmp_path, capsys):
    older = "from grader.config import use_this_environment\nfrom grader.course import Course\n"
    (tmp_path / "nbgrader_config.py").write_text(older)
    (tmp_path / "gradebook.db").write_bytes(b"not empty")
    assert main([command, "--course", str(tmp_path)]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "written by an older grader" in error
