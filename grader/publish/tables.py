"""The score table the instructor sees in the terminal: student × assignment, points, and what
lost its points unjudged or was not recorded (rich)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from grader.course import Course
from grader.publish.feedback import max_scores, scores


def score_table(course: Course, students: list[str], failures: dict[str, str]) -> Table:
    """One row per student: their points on each assignment of the gradebook out of its
    points, the total, and `failures[student]` (what failed to grade, '' when nothing)."""
    maxima, table = max_scores(course), scores(course, students)
    grid = Table(title="Scores recorded in the gradebook", title_justify="left")
    grid.add_column("student", no_wrap=True)
    for name, points in maxima.items():
        grid.add_column(f"{name}\n({points:g} pts)", justify="right")
    grid.add_column(f"total\n({sum(maxima.values()):g} pts)", justify="right")
    grid.add_column("failed to grade")
    for student, row in table.items():
        cells = [f"{row[a]:g}" for a in maxima] + [f"{sum(row.values()):g}"]
        # Text, not markup: a reason may hold brackets rich would read as styles.
        grid.add_row(Text(student), *cells, Text(failures.get(student, "")))
    return grid


def show(table: Table) -> None:
    """Print `table` to stdout, wide enough for its columns even when it is not a terminal."""
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200).print(table)
