"""`grader check NOTEBOOK`: the student's side. Runs the visible checks of each exercise (in a
separate process, as grading does) and says, per exercise, passed or what is wrong."""

from __future__ import annotations

from pathlib import Path

from grader.course.config import assignments
from grader.grading.grade import grade_notebook_file


def assignment_of(path: Path) -> str:
    if path.stem in assignments():
        return path.stem
    raise SystemExit(
        f"{path.name}: not one of this course's notebooks ({', '.join(assignments())})."
    )


def check_notebook(path: Path) -> int:
    results = grade_notebook_file(path, assignment_of(path), seed=0, hidden=False)
    for result in results:
        print(result.feedback)
    failing = [r.name for r in results if r.score < r.max_score]
    print("\nAll visible checks pass." if not failing else f"\nStill to fix: {', '.join(failing)}.")
    return 1 if failing else 0
