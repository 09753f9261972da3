"""The student release: generated from solutions/, in sync, graded cells consistent, stubs fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.checks import EXERCISES
from grader.config import REPO, SOLUTIONS, assignments
from grader.course import grade_id, grade_id_of_tests, nbgrader_metadata, notebook_path
from grader.notebook import exercises_of, source_notebook
from grader.release import stale_files

ASSIGNMENTS = assignments()


def nbgrader(*args: str) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(
        [str(bin_dir / "nbgrader"), *args],
        cwd=REPO / "grader",
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_committed_release_matches_a_fresh_generation():
    assert stale_files() == []


def test_a_hand_edit_to_the_release_is_named(tmp_path):
    release = shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    edited = notebook_path(release, ASSIGNMENTS[0])
    edited.write_text(edited.read_text().replace("YOUR CODE HERE", "YOUR CODE THERE", 1))
    assert stale_files(release) == [f"notebooks/{ASSIGNMENTS[0]}/{ASSIGNMENTS[0]}.ipynb"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_test_cell_points_equal_the_checks_points(assignment):
    notebook = source_notebook(assignment)
    cells = {grade_id(c): c for c in notebook.cells}
    for name in exercises_of(notebook):
        points = nbgrader_metadata(cells[grade_id_of_tests(name)])["points"]
        assert points == EXERCISES[name].points, name


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_solution_passes_nbgrader_validate(assignment):
    result = nbgrader("validate", str(notebook_path(SOLUTIONS, assignment)))
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_test_passes_on_the_untouched_student_version(assignment):
    path = notebook_path(REPO / "notebooks", assignment)
    result = nbgrader("validate", "--invert", str(path))
    assert "Success! The notebook does not pass any tests." in result.stdout, result.stdout
    hidden = [c.source for c in nbformat.read(path, 4).cells if "HIDDEN TESTS" in c.source]
    assert hidden == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_carry_no_execution_timestamps(assignment):
    """Executed with record_timing off: stored outputs change only when results do."""
    cells = source_notebook(assignment).cells
    assert [c.get("id") for c in cells if "execution" in c.metadata] == []
