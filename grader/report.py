"""From the gradebook out: the grades CSV an LMS can import, HTML feedback, a score table."""

from __future__ import annotations

import csv
import re
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from grader.config import assignments
from grader.course import Course

HIDDEN_REGION = re.compile(r"BEGIN HIDDEN TESTS|END HIDDEN TESTS|grade\(")


def scores(course: Course, students: list[str]) -> dict[str, dict[str, float]]:
    """Each student's score per assignment, as nbgrader's gradebook records it (0 if absent)."""
    table: dict[str, dict[str, float]] = {}
    with Gradebook(course.api().coursedir.db_url) as gradebook:
        for student in students:
            row = {}
            for assignment in assignments():
                try:
                    row[assignment] = gradebook.find_submission(assignment, student).score
                except MissingEntry:
                    row[assignment] = 0.0
            table[student] = row
    return table


def max_scores(course: Course) -> dict[str, float]:
    with Gradebook(course.api().coursedir.db_url) as gradebook:
        return {a: gradebook.find_assignment(a).max_score for a in assignments()}


def write_csv(course: Course, students: list[str], path: Path) -> Path:
    """One row per student: id, a column per notebook, and the total."""
    table = scores(course, students)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", *assignments(), "total"])
        for student, row in table.items():
            values = [row[a] for a in assignments()]
            writer.writerow([student, *(f"{v:g}" for v in values), f"{sum(values):g}"])
    return path


def write_feedback(course: Course, students: list[str]) -> tuple[Path, list[str]]:
    """nbgrader's HTML feedback per student × notebook, with the hidden-test region removed.
    Returns the folder and, in plain words, each student whose feedback could not be made."""
    api = course.api()
    problems = []
    for assignment in assignments():
        for student in students:
            if not course.autograded_notebook(student, assignment).is_file():
                continue  # never graded: nothing to give feedback on
            result = api.generate_feedback(assignment, student, force=True)
            if not result["success"]:
                tail = (result.get("error") or "").strip().splitlines()[-1:]
                problems.append(f"{student}: no feedback for {assignment} ({' '.join(tail)})")
    return course.feedback, problems


def leaks_hidden_tests(html: str) -> bool:
    return bool(HIDDEN_REGION.search(html))


def format_table(course: Course, students: list[str]) -> str:
    table, maxima = scores(course, students), max_scores(course)
    names = assignments()
    width = max(len(s) for s in students) + 2
    head = "student".ljust(width) + "".join(f"{a[:16]:>18}" for a in names) + f"{'total':>10}"
    lines = [head, "-" * len(head)]
    for student, row in table.items():
        cells = "".join(f"{row[a]:>10g} / {maxima[a]:<5g}" for a in names)
        lines.append(student.ljust(width) + cells + f"{sum(row.values()):>10g}")
    return "\n".join(lines)
