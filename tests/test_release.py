"""The student release: generated from solutions/, in sync, graded cells consistent, stubs fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from grader.checks import EXERCISES
from grader.course import grade_id, grade_id_of_tests, nbgrader_metadata, notebook_path
from grader.course.config import REPO, SOLUTIONS, assignments
from grader.course.intake import exercises_of, source_notebook
from grader.release.notebooks import stale_files
from normcheck import expected
from normcheck.expected import DATA

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


def test_a_stored_check_that_drifts_from_the_checks_is_named(tmp_path):
    """normcheck/data is generated: a stored expected output that is not the checks' is stale."""
    checks = shutil.copytree(DATA, tmp_path / "data")
    text = (checks / f"{ASSIGNMENTS[0]}.json").read_text()
    (checks / f"{ASSIGNMENTS[0]}.json").write_text(text.replace('"rtol": ', '"rtol": 2 * ', 1))
    assert stale_files(checks=checks) == [f"data/{ASSIGNMENTS[0]}.{s}" for s in ("json", "npz")]


def _nudged(folder: Path, by: float) -> Path:
    """A copy of the first notebook's stored checks whose first float array moved `by` times
    its largest value."""
    copy = shutil.copytree(DATA, folder)
    npz = copy / f"{ASSIGNMENTS[0]}.npz"
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    key = next(k for k, v in arrays.items() if v.dtype == np.float32 and v.size > 1)
    arrays[key] = arrays[key] + np.float32(by) * np.abs(arrays[key]).max()
    np.savez(npz, **arrays)
    return copy / f"{ASSIGNMENTS[0]}.json"


def test_stored_checks_are_compared_up_to_the_rounding_of_another_machine(tmp_path):
    """The arrays' last bits depend on the CPU and thread count: those never make them stale;
    a change the checks' tolerance could see always does."""
    stored = DATA / f"{ASSIGNMENTS[0]}.json"
    assert expected.same(stored, _nudged(tmp_path / "rounded", 4e-7))
    assert not expected.same(stored, _nudged(tmp_path / "changed", 1e-4))


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
