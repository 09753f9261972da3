"""The student release: generated from solutions/, in sync, graded cells consistent, stubs fail."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

import normcheck
from grader.checks import EXERCISES
from grader.course import grade_id, grade_id_of_tests, nbgrader_metadata, notebook_path
from grader.course.config import REPO, SOLUTIONS, assignments
from grader.course.intake import exercises_of, source_notebook
from grader.release.notebooks import stale_files
from normcheck import expected
from normcheck.expected import DATA

ASSIGNMENTS = assignments()
# Another CPU, as far as one machine can show it (the Makefile's test-portable uses the same).
PORTABLE_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE", "OMP_NUM_THREADS": "1"}


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


# --- stored numbers on another CPU: equal at their rounding, stale at what the judge can see

ULP_STEPS = 4  # "a few units in the last place", of each array's own dtype
TERMS_ROUNDING = 1e-13  # float64: 10x what an Intel CPU moved AMD's outputs of cancelling terms


def _moved(folder: Path, move) -> Path:
    """A copy of the stored checks whose float arrays went through `move(key, array, rule)`."""
    copy = shutil.copytree(DATA, folder)
    for js in copy.glob("*.json"):
        meta = json.loads(js.read_text(encoding="utf-8"))
        with np.load(js.with_suffix(".npz")) as data:
            arrays = {k: data[k] for k in data.files}
        for key, value in arrays.items():
            if np.issubdtype(value.dtype, np.floating):
                arrays[key] = move(key, value, expected.rule_of(meta, key)).astype(value.dtype)
        np.savez(js.with_suffix(".npz"), **arrays)
    return copy


def _signs(value: np.ndarray) -> np.ndarray:
    return np.random.default_rng(value.size).choice([-1.0, 1.0], size=value.shape)


def _few_ulps(key, value, rule):
    """Each value moved by ULP_STEPS units in the last place of its dtype."""
    return value + _signs(value) * ULP_STEPS * np.spacing(value)


def _terms_rounding(key, value, rule):
    """float64 outputs moved as a difference of near equal terms is on another CPU (the inputs
    are drawn values, rounded at their own magnitude)."""
    output = json.loads(key)[2] != "in" and value.dtype == np.float64
    return value + _signs(value) * (TERMS_ROUNDING if output else 0.0)


def _judge_could_see(key, value, rule):
    """Each value moved by the judge's whole allowance, atol + rtol·|want|."""
    rtol, atol = rule
    return value + _signs(value) * (atol + rtol * np.abs(value))


ROUNDINGS = {"few_ulps": _few_ulps, "terms_rounding": _terms_rounding}


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_another_cpus_rounding_leaves_the_stored_checks_the_same(tmp_path, rounding):
    moved = _moved(tmp_path / "data", ROUNDINGS[rounding])
    assert [js.name for js in DATA.glob("*.json") if not expected.same(js, moved / js.name)] == []


def test_a_change_the_judge_could_see_is_stale(tmp_path):
    """Each float array alone moved by the judge's allowance makes its notebook's data stale."""
    moved = _moved(tmp_path / "data", _judge_could_see)
    for js in sorted(DATA.glob("*.json")):
        meta = json.loads(js.read_text(encoding="utf-8"))
        with np.load(js.with_suffix(".npz")) as data:
            arrays = {k: data[k] for k in data.files}
        with np.load(moved / js.with_suffix(".npz").name) as data:
            shifted = {k: data[k] for k in data.files}
        assert not expected.same(js, moved / js.name)
        for key, value in arrays.items():
            if np.issubdtype(value.dtype, np.floating) and np.isfinite(value).any():
                assert not expected.same_arrays(meta, arrays, {**arrays, key: shifted[key]}), key


def test_the_checks_generated_as_on_another_cpu_are_the_same(tmp_path):
    """The visible checks computed with PyTorch's kernels without SIMD, MKL's compatible path and
    one thread (04_placement's float64 outputs then move by ~1e-14, as on an Intel CPU) are the
    stored ones: `grader release` there rewrites nothing."""
    script = "import sys; from pathlib import Path; "
    script += "from grader.release.notebooks import write_checks; write_checks(Path(sys.argv[1]))"
    checks = shutil.copytree(DATA, tmp_path / "data")
    before = {p.name: p.read_bytes() for p in checks.iterdir()}
    env = {**os.environ, **PORTABLE_ENV}
    subprocess.run([sys.executable, "-c", script, str(checks)], env=env, check=True, timeout=300)
    assert [n for n, b in before.items() if (checks / n).read_bytes() != b] == []


@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_the_visible_checks_pass_the_solution_on_another_cpus_rounding(
    tmp_path, monkeypatch, rounding
):
    moved = _moved(tmp_path / "data", ROUNDINGS[rounding])
    monkeypatch.setattr(normcheck, "_stored", lambda: expected.stored(moved))
    failing = [
        name
        for name in expected.stored(moved)
        if not all(
            o.passed for o in normcheck.visible(name, EXERCISES[name].reference, "").outcomes
        )
    ]
    assert failing == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_test_cell_points_equal_the_checks_points(assignment):
    notebook = source_notebook(assignment)
    cells = {grade_id(c): c for c in notebook.cells}
    for name in exercises_of(notebook):
        points = nbgrader_metadata(cells[grade_id_of_tests(name)])["points"]
        assert points == EXERCISES[name].points, name


def test_a_solution_passes_nbgrader_validate():
    """nbgrader's own command on one solution. Every solution is executed by nbval
    (`solutions/` in make test), which fails on any cell that raises and on any check's verdict
    other than the stored one (a full pass): what validate would say of each, without executing
    all six a second time (55 s of the suite)."""
    result = nbgrader("validate", str(notebook_path(SOLUTIONS, ASSIGNMENTS[0])))
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout


def test_nbgraders_validate_passes_no_test_of_the_untouched_student_version():
    """nbgrader's own command on one notebook; tests/test_run_all_unanswered.py runs every
    notebook as it does and asserts the same of each."""
    path = notebook_path(REPO / "notebooks", ASSIGNMENTS[0])
    result = nbgrader("validate", "--invert", str(path))
    assert "Success! The notebook does not pass any tests." in result.stdout, result.stdout


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_the_student_version_holds_no_hidden_test(assignment):
    cells = nbformat.read(notebook_path(REPO / "notebooks", assignment), 4).cells
    assert [c.source for c in cells if "HIDDEN TESTS" in c.source] == []


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_solutions_carry_no_execution_timestamps(assignment):
    """Executed with record_timing off: stored outputs change only when results do."""
    cells = source_notebook(assignment).cells
    assert [c.get("id") for c in cells if "execution" in c.metadata] == []
