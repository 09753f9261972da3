"""Generate the student release from the solutions (solutions/): the notebooks (notebooks/), with
nbgrader, and their visible checks' inputs and expected outputs (normcheck/data/), which the
student's `check()` judges against."""

from __future__ import annotations

import filecmp
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from nbgrader.apps import NbGraderAPI

from grader.checks import EXERCISES, prepared
from grader.course.config import (
    RELEASE,
    REPO,
    SOLUTIONS,
    assignments,
    course_config,
    use_this_environment,
)
from grader.course.intake import exercises_of, source_notebook
from normcheck import expected


class ReleaseError(RuntimeError):
    pass


def _fresh_checks(target: Path, source: Path) -> None:
    for assignment in assignments(source):
        exercises = []
        for name in exercises_of(source_notebook(assignment, source)):
            ready = prepared(name, hidden=False, seed=0)
            cases = [(c, i, e) for (c, i), e in zip(ready.planned, ready.expected, strict=True)]
            exercises.append((EXERCISES[name], cases))
        expected.write(target, assignment, exercises)


def _stale_checks(fresh: Path, kept: Path) -> list[str]:
    """The stored checks' files of `kept` that are not those of `fresh` (up to rounding), both
    files of a notebook together."""
    names = {p.stem for p in fresh.glob("*.json")} | {p.stem for p in kept.glob("*.json")}
    stale = [n for n in names if not expected.same(kept / f"{n}.json", fresh / f"{n}.json")]
    return sorted(f"{kept.name}/{n}{suffix}" for n in stale for suffix in (".json", ".npz"))


def write_checks(target: Path = expected.DATA, source: Path = SOLUTIONS) -> None:
    """Write each assignment's visible checks as data under `target` (normcheck.expected): a
    notebook's files are rewritten only when their checks changed, not their rounding, so that
    a release on another machine changes nothing."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch)
        _fresh_checks(fresh, source)
        target.mkdir(parents=True, exist_ok=True)
        for stale in _stale_checks(fresh, target):
            name = Path(stale).name
            (target / name).unlink(missing_ok=True)
            if (fresh / name).is_file():
                shutil.copyfile(fresh / name, target / name)


def generate(
    target: Path = RELEASE,
    db: Path | None = None,
    source: Path = SOLUTIONS,
    checks: Path = expected.DATA,
) -> None:
    """Write every assignment's student version of `source` under `target`, and its visible
    checks under `checks`; record it in gradebook `db`.

    Without `db` the gradebook is a throwaway: the release itself needs none.
    """
    write_checks(checks, source)
    use_this_environment()
    with tempfile.TemporaryDirectory() as scratch:
        config = course_config(root=Path(scratch), db=db, release=target, source=source)
        api = NbGraderAPI(config=config)
        for assignment in assignments(source):
            result = api.generate_assignment(assignment, force=True, create=True)
            if not result["success"]:
                raise ReleaseError(f"{assignment}: {result.get('error') or result.get('log')}")


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file()}


def _differing(fresh: Path, kept: Path) -> list[str]:
    names = _files(fresh) | (_files(kept) if kept.exists() else set())
    return sorted(
        str(Path(kept.name) / n)
        for n in names
        if not ((fresh / n).is_file() and (kept / n).is_file())
        or not filecmp.cmp(fresh / n, kept / n, shallow=False)
    )


def stale_files(
    release: Path = RELEASE, source: Path = SOLUTIONS, checks: Path = expected.DATA
) -> list[str]:
    """Files of the release (notebooks and checks' data) that differ from a fresh generation,
    or exist on one side only."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh, fresh_checks = Path(scratch) / "notebooks", Path(scratch) / "data"
        generate(fresh, source=source, checks=fresh_checks)
        return _differing(fresh, release) + _stale_checks(fresh_checks, checks)


# --- the students' wheel: what the released notebooks import, and no answer ----------------------

STUDENT_DISTRIBUTION = "normalization_course_student"
# wheel path -> source path, relative to the checkout (or an installed course's site-packages):
# the student's check with its stored data, the probes it calls answers with (the grader's own,
# which import each other relatively), and the demos' package.
_STUDENT_FILES = {
    "normcheck": ("normcheck", ("*.py", "data/*.json", "data/*.npz")),
    "normcheck/sandboxed": ("grader/grading/sandboxed", ("__init__.py", "calling.py", "probes.py")),
    "norm_utils": ("norm_utils", ("*.py",)),
}
_REQUIREMENTS = ("torch", "numpy", "matplotlib", "scikit-learn")  # scikit-learn: 05's digits


# The students' project, built by the standard build backend: the demos' package and the
# visible checks, with the course's own pins of what the notebooks import.
_STUDENT_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "The normalization course's notebooks' imports for students: the demos' package \
and the visible checks, with no answer in them."
requires-python = ">=3.11"
dependencies = {dependencies}

[tool.setuptools]
packages = ["normcheck", "normcheck.sandboxed", "norm_utils"]
package-data = {{ normcheck = ["data/*.json", "data/*.npz"] }}
"""
# The wheel's timestamps (the zip format's earliest date): the same sources, the same bytes.
_SOURCE_DATE_EPOCH = "315532800"


def _student_project(project: Path, root: Path) -> None:
    """The students' sources, copied from `root`, and their pyproject, into `project`."""
    for target, (folder, patterns) in _STUDENT_FILES.items():
        for pattern in patterns:
            for path in sorted((root / folder).glob(pattern)):
                copy = project / target / path.relative_to(root / folder)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, copy)
                copy.chmod(0o644)  # the wheel records each file's mode: not the umask's
    requirements = [
        r
        for r in importlib.metadata.requires("normalization-course") or ()
        if re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] in _REQUIREMENTS
    ]
    (project / "pyproject.toml").write_text(
        _STUDENT_PYPROJECT.format(
            name=STUDENT_DISTRIBUTION.replace("_", "-"),
            version=importlib.metadata.version("normalization-course"),
            dependencies=json.dumps(requirements),
        )
    )


def student_wheel(folder: Path, root: Path = REPO) -> Path:
    """Build the students' wheel into `folder` (made if missing) and return its path: the
    packages the released notebooks import (`normcheck`, `norm_utils`), byte for byte the same
    from the same sources (pip installs it like any wheel: `pip install <wheel>`)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        project, built = Path(scratch) / "project", Path(scratch) / "wheel"
        _student_project(project, root)
        # The backend's PEP 517 hook, in a process of its own (it works in the current folder).
        hook = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
        env = {**os.environ, "SOURCE_DATE_EPOCH": _SOURCE_DATE_EPOCH}
        command = [sys.executable, "-c", hook, str(built)]
        done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise ReleaseError(f"could not build the students' wheel: {done.stderr.strip()}")
        (wheel,) = built.glob("*.whl")
        return Path(shutil.copy(wheel, folder / wheel.name))
