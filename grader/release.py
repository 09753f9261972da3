"""Generate the student release from the solutions (solutions/): the notebooks (notebooks/), with
nbgrader, and their visible checks' inputs and expected outputs (normcheck/data/), which the
student's `check()` judges against."""

from __future__ import annotations

import filecmp
import tempfile
from pathlib import Path

from nbgrader.apps import NbGraderAPI

from grader.checks import EXERCISES, prepared
from grader.config import RELEASE, SOLUTIONS, assignments, course_config, use_this_environment
from grader.notebook import exercises_of, source_notebook
from normcheck import expected


class ReleaseError(RuntimeError):
    pass


def write_checks(target: Path = expected.DATA, source: Path = SOLUTIONS) -> None:
    """Write each assignment's visible checks as data under `target` (normcheck.expected), in
    place of whatever was there."""
    for stale in (*target.glob("*.json"), *target.glob("*.npz")):
        stale.unlink()
    for assignment in assignments(source):
        exercises = []
        for name in exercises_of(source_notebook(assignment, source)):
            ready = prepared(name, hidden=False, seed=0)
            cases = [(c, i, e) for (c, i), e in zip(ready.planned, ready.expected, strict=True)]
            exercises.append((EXERCISES[name], cases))
        expected.write(target, assignment, exercises)


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
        return _differing(fresh, release) + _differing(fresh_checks, checks)
