"""The instructor's report: one HTML page per assignment on what the class got right and wrong.

Read from what grading recorded: the gradebook's notebook scores (a TA's grades included) for the
class's distribution, and each student's results (`results/<student>/<assignment>.json`) for
each exercise's scores and the mistakes the checks diagnosed in it. The plots are matplotlib
PNGs embedded in the page, so it is one file to send or open anywhere.
"""

from __future__ import annotations

import base64
import io
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, PackageLoader
from matplotlib.figure import Figure  # no pyplot: no display backend, no global state
from nbgrader.api import Gradebook, MissingEntry

from grader.course import UNJUDGED, Course, ExerciseResult, Results
from grader.gradebook.config import gradebook_url
from grader.gradebook.records import released

TOP_MISTAKES = 5


@dataclass
class ExerciseStats:
    """One exercise across the class: its scores and the mistakes diagnosed, with counts."""

    name: str
    points: float = 0.0
    scores: list[float] = field(default_factory=list)
    mistakes: Counter = field(default_factory=Counter)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0

    @property
    def difficulty(self) -> float:
        """The share of the points the class missed: 0 when everyone earned them all."""
        return 1 - self.mean / self.points if self.points else 0.0


def exercise_stats(course: Course, assignment: str, students: list[str]) -> list[ExerciseStats]:
    """Each exercise of `assignment`, over the students with a recorded result."""
    found: dict[str, ExerciseStats] = {}
    for student in students:
        path = course.results_file(student, assignment)
        if not path.is_file():
            continue
        for exercise in Results.load(path).exercises:
            stats = found.setdefault(exercise.name, ExerciseStats(exercise.name))
            stats.points = exercise.max_score
            stats.scores.append(exercise.score)
            stats.mistakes.update(mistakes_in(exercise))
    return list(found.values())


def mistakes_in(exercise: ExerciseResult) -> list[str]:
    """The mistakes grading recorded as diagnosed in one result (as the student was told), or
    why it could not be judged."""
    if exercise.cause:
        return [UNJUDGED[exercise.cause]]
    return [d.message for d in exercise.diagnoses]


def notebook_scores(course: Course, assignment: str, students: list[str]) -> tuple[list, float]:
    """The recorded score of each student who handed `assignment` in, and its points."""
    scores = []
    with Gradebook(gradebook_url(course)) as gradebook:
        points = gradebook.find_assignment(assignment).max_score
        for student in students:
            try:
                scores.append(gradebook.find_submission(assignment, student).score)
            except MissingEntry:
                continue
    return scores, points


def write_reports(course: Course, students: list[str], folder: Path) -> list[Path]:
    """One page per assignment someone handed in, in `folder`; returns the pages written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for assignment in released(course):  # an assignment never released has no points
        scores, points = notebook_scores(course, assignment, students)
        if not scores:
            continue
        page = folder / f"{assignment}.html"
        stats = exercise_stats(course, assignment, students)
        page.write_text(render(assignment, scores, points, stats))
        written.append(page)
    return written


PAGE = Environment(
    loader=PackageLoader("grader.publish"), autoescape=True, keep_trailing_newline=True
).get_template("class_report.html.j2")


def render(assignment: str, scores: list[float], points: float, stats: list) -> str:
    return PAGE.render(
        title=f"{assignment}: what the class got right and wrong",
        scores=scores,
        mean=statistics.fmean(scores),
        median=statistics.median(scores),
        points=points,
        histogram=_png(_histogram(scores, points)),
        stats=stats,
        top_mistakes=TOP_MISTAKES,
        difficulty=_png(_difficulty_chart(stats)),
    )


def _histogram(scores: list[float], points: float) -> Figure:
    figure = Figure(figsize=(6, 3))
    axes = figure.subplots()
    axes.hist(scores, bins=min(20, max(int(points), 1)), range=(0, points), color="#4c72b0")
    axes.set_xlabel("score")
    axes.set_ylabel("students")
    return figure


def _difficulty_chart(stats: list[ExerciseStats]) -> Figure:
    figure = Figure(figsize=(6, 0.5 + 0.4 * len(stats)))
    axes = figure.subplots()
    axes.barh([s.name for s in stats], [s.difficulty for s in stats], color="#dd8452")
    axes.set_xlim(0, 1)
    axes.invert_yaxis()
    axes.set_xlabel("difficulty (share of points missed)")
    return figure


def _png(figure: Figure) -> str:
    """The figure as base64 PNG, to embed in the page."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=80)
    return base64.b64encode(buffer.getvalue()).decode()
