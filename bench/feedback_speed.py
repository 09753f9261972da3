"""Feedback per notebook: nbgrader's generate_feedback, one call per student × notebook (what
`grader feedback` ran before), against `grader feedback`'s rendering from the recorded grades in
parallel, and its re-run when nothing changed.

The class is the sample class (the student who loops forever left out) copied to --students
students, graded once by `grader autograde` without the sandbox (its speed is not measured here).

    .venv/bin/python bench/feedback_speed.py [options]

"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, markdown_table, print_header, progress

from grader.autograde import autograde
from grader.course import Course
from grader.course.config import assignments
from grader.gradebook.config import recording_api
from grader.grading.grade import Limits
from grader.publish.feedback import feedback_pages, write_feedback
from grader.release.demo import PROFILES, write_class

LOOPS_FOREVER = "gus"


def graded_class(root: Path, students: int) -> tuple[Course, list[str]]:
    profiles = {name: p for name, p in PROFILES.items() if name != LOOPS_FOREVER}
    submissions = write_class(root / "submissions", profiles)
    names = sorted(profiles)
    for k in range(students - len(names)):
        copy = f"{names[k % len(names)]}-{k}"
        shutil.copytree(submissions / names[k % len(names)], submissions / copy)
    course = Course(root / "course")
    progress(f"grading {students} students × {len(assignments())} notebooks (not timed) ...")
    autograde(submissions, course, jobs=2, seed=0, limits=Limits(wall_seconds=10), progress=False)
    return course, sorted(p.name for p in submissions.iterdir())


def time_nbgraders(course: Course, students: list[str], notebooks: int) -> float:
    """Seconds per notebook of nbgrader's generate_feedback, over the first `notebooks`."""
    api = recording_api(course)
    pairs = [(s, a) for a in assignments() for s in students][:notebooks]
    start = time.perf_counter()
    for student, assignment in pairs:
        assert api.generate_feedback(assignment, student, force=True)["success"]
    return (time.perf_counter() - start) / len(pairs)


def time_ours(course: Course, students: list[str], jobs: int) -> tuple[float, float, int]:
    """Seconds per notebook of `grader feedback` from scratch, and of its unchanged re-run."""
    for page in feedback_pages(course, students):
        page.stamp.unlink(missing_ok=True)
    count = len(feedback_pages(course, students))
    start = time.perf_counter()
    assert write_feedback(course, students, jobs)[1] == []
    fresh = time.perf_counter() - start
    start = time.perf_counter()
    assert write_feedback(course, students, jobs)[1] == []
    return fresh / count, (time.perf_counter() - start) / count, count


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--students", type=int, default=24, help="size of the generated class")
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs of `grader feedback`")
    parser.add_argument(
        "--stock-notebooks",
        type=int,
        default=12,
        help="notebooks nbgrader's generate_feedback renders, timed",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = arguments().parse_args(argv)
    print_header("Feedback: nbgrader's generate_feedback vs `grader feedback`")
    with tempfile.TemporaryDirectory() as scratch:
        course, students = graded_class(Path(scratch), args.students)
        progress("nbgrader's generate_feedback ...")
        stock = time_nbgraders(course, students, args.stock_notebooks)
        progress("grader feedback ...")
        fresh, unchanged, count = time_ours(course, students, args.jobs)
    rows = [
        ["nbgrader generate_feedback, one call per notebook", args.stock_notebooks, f"{stock:.3f}"],
        [f"grader feedback --jobs {args.jobs}, every page", count, f"{fresh:.3f}"],
        [f"grader feedback --jobs {args.jobs}, nothing changed", count, f"{unchanged:.4f}"],
    ]
    print(markdown_table(["feedback", "notebooks", "s per notebook"], rows))
    print(f"\nSpeed-up, every page rendered: {stock / fresh:.1f}×")


if __name__ == "__main__":
    main()
