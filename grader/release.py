"""Generate the student release (notebooks/) from the solutions (solutions/) with nbgrader."""

from __future__ import annotations

import filecmp
import tempfile
from pathlib import Path

from nbgrader.apps import NbGraderAPI

from grader.config import RELEASE, SOLUTIONS, assignments, course_config, use_this_environment


class ReleaseError(RuntimeError):
    pass


def generate(target: Path = RELEASE, db: Path | None = None, source: Path = SOLUTIONS) -> None:
    """Write every assignment's student version of `source` under `target`; record it in
    gradebook `db`.

    Without `db` the gradebook is a throwaway: the release itself needs none.
    """
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


def stale_files(release: Path = RELEASE, source: Path = SOLUTIONS) -> list[str]:
    """Files of the release that differ from a fresh generation, or exist on one side only."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = Path(scratch) / "notebooks"
        generate(fresh, source=source)
        names = _files(fresh) | (_files(release) if release.exists() else set())
        return sorted(
            str(Path(release.name) / n)
            for n in names
            if not ((fresh / n).is_file() and (release / n).is_file())
            or not filecmp.cmp(fresh / n, release / n, shallow=False)
        )
