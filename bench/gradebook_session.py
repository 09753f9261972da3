"""What recording a graded class costs with one gradebook session for the batch (the patch of
nbgrader's `Gradebook` in five of its modules, `grader.gradebook.records.one_gradebook_session`)
and without it (nbgrader's own: a new engine, schema check and session nine times a notebook).

The class is graded once, untimed; then each mode records every notebook into a new gradebook
(nbgrader's autograde with the stored results injected, as `grader autograde` does), timed, in
alternation for `--runs` rounds. Reported: seconds per notebook, median of the rounds.

    .venv/bin/python bench/gradebook_session.py [options]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, load_1min, markdown_table, print_header, progress
from feedback_speed import graded_class

from grader.autograde import discover, register_all
from grader.course import Course
from grader.course.intake import Submission
from grader.gradebook import records
from grader.gradebook.config import recording_api


def record_all(graded: Course, root: Path, shared: bool) -> tuple[float, int]:
    """Seconds to record every graded notebook of a copy of `graded` into a new gradebook."""
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(graded.root, root)
    course = Course(root)
    records.start_new_gradebook(course)
    register_all(course)
    api = recording_api(course)
    tasks = discover(graded.root.parent / "submissions")
    read = [Submission.read(t.submission, t.assignment, course.source) for t in tasks]
    session = records.one_gradebook_session() if shared else nullcontext()
    start = time.perf_counter()
    with session:
        for task, submission in zip(tasks, read, strict=True):
            assert records.record(course, api, submission, task.student) == ""
    return time.perf_counter() - start, len(tasks)


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--students", type=int, default=8, help="size of the generated class")
    parser.add_argument("--runs", type=int, default=3, help="rounds of both modes")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    print_header("Recording: one gradebook session per batch vs nbgrader's own")
    with tempfile.TemporaryDirectory() as scratch:
        graded, _ = graded_class(Path(scratch), args.students)
        seconds: dict[bool, list[float]] = {True: [], False: []}
        loads = []
        for run in range(args.runs):
            for shared in (True, False):
                progress(f"run {run + 1}/{args.runs}, shared session: {shared} ...")
                loads.append(load_1min())
                spent, count = record_all(graded, Path(scratch) / "recorded", shared)
                seconds[shared].append(spent / count)
        rows = [
            [label, count, f"{statistics.median(seconds[shared]):.3f}"]
            for label, shared in (("one session per batch", True), ("nbgrader's own", False))
        ]
        print(markdown_table(["recording", "notebooks", "s per notebook (median)"], rows))
        print(f"\nLoad (1 min) before each timed run: {min(loads):.1f}–{max(loads):.1f}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
