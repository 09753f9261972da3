"""The instructor's report: one HTML page per assignment on what the class got right and wrong.

Read from what grading recorded: the gradebook's notebook scores (a TA's grades included) for the
class's distribution, each written answer's grades (graded, or still to grade by a person) and
each student's line, and each student's results (`results/<student>/<assignment>.json`) for
each exercise's scores, who did not attempt it, and the mistakes the checks diagnosed in it.
The plots are matplotlib PNGs embedded in the page, so it is one file to send or open anywhere.
"""

from __future__ import annotations

import base64
import io
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jinja2 import Environment, PackageLoader
from markupsafe import Markup, escape
from matplotlib.figure import Figure  # no pyplot: no display backend, no global state
from nbgrader.api import Gradebook, MissingEntry

from grader.course import UNATTEMPTED, UNJUDGED, Course, ExerciseResult, Results
from grader.gradebook.config import gradebook_url
from grader.gradebook.records import grades_to_review, released

TOP_MISTAKES = 5


@dataclass
class ExerciseStats:
    """One exercise across the class: its scores and the mistakes diagnosed, with counts."""

    name: str
    points: float = 0.0
    scores: list[float] = field(default_factory=list)
    mistakes: Counter = field(default_factory=Counter)
    unattempted: int = 0  # no answer to judge: no notebook, no answer cell, the stub untouched
    wrong: int = 0  # students whose answer was judged and fell short of the points

    @property
    def mean(self) -> float:
        return statistics.fmean(self.scores) if self.scores else 0.0

    @property
    def difficulty(self) -> float:
        """The share of the points the class missed: 0 when everyone earned them all."""
        return 1 - self.mean / self.points if self.points else 0.0

    @property
    def unattempted_share(self) -> float:
        """The part of `difficulty` that is points of students who did not attempt it."""
        return self.unattempted / len(self.scores) if self.scores else 0.0

    @property
    def wrong_share(self) -> float:
        """The part of `difficulty` lost by answers that were judged: what they got wrong."""
        return self.difficulty - self.unattempted_share


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
            if exercise.cause in UNATTEMPTED:
                stats.unattempted += 1
            elif exercise.score < exercise.max_score:
                stats.wrong += 1
    return list(found.values())


@dataclass
class WrittenStats:
    """One written answer across the class: graded by a person (or 0 by nbgrader, for no
    response), or still to grade (never graded, or graded before a resubmission)."""

    name: str
    points: float = 0.0
    graded: list[float] = field(default_factory=list)
    to_grade: int = 0


@dataclass
class StudentLine:
    """One student's notebook: their recorded score, the exercises short of their points (and
    how), and their written answers still to grade."""

    student: str
    score: float
    short: list[str]
    to_grade: int


def mistakes_in(exercise: ExerciseResult) -> list[str]:
    """The mistakes grading recorded as diagnosed in one result (as the student was told), or
    why it could not be judged."""
    if exercise.cause:
        return [UNJUDGED[exercise.cause]]
    return [d.message for d in exercise.diagnoses]


@dataclass
class Recorded:
    """What the gradebook holds of one assignment: its points, each student's score and
    written answers, and the students' lines (their exercises filled in from the results)."""

    points: float
    scores: list[float]
    written: list[WrittenStats]
    students: list[StudentLine]


def recorded(course: Course, assignment: str, students: list[str]) -> Recorded:
    """The gradebook's record of `assignment` for each of `students` who handed it in."""
    written: dict[str, WrittenStats] = {}
    lines = []
    with Gradebook(gradebook_url(course)) as gradebook:
        points = gradebook.find_assignment(assignment).max_score
        for student in students:
            try:
                notebook = gradebook.find_submission_notebook(assignment, assignment, student)
            except MissingEntry:
                continue
            review = grades_to_review(notebook)
            for grade in notebook.grades:
                if grade.cell_type != "markdown":
                    continue
                stats = written.setdefault(grade.name, WrittenStats(grade.name, grade.max_score))
                if grade.name in review:
                    stats.to_grade += 1
                else:
                    stats.graded.append(grade.score)
            to_grade = sum(name in written for name in review)
            short = shortfalls(course, student, assignment)
            lines.append(StudentLine(student, notebook.score, short, to_grade))
    return Recorded(points, [line.score for line in lines], list(written.values()), lines)


def shortfalls(course: Course, student: str, assignment: str) -> list[str]:
    """Each exercise short of its points in the student's results: not attempted, or its score."""
    path = course.results_file(student, assignment)
    if not path.is_file():
        return []
    return [
        f"{e.name}: "
        + ("not attempted" if e.cause in UNATTEMPTED else f"{e.score:g}/{e.max_score:g}")
        for e in Results.load(path).exercises
        if e.score < e.max_score
    ]


def write_reports(course: Course, students: list[str], folder: Path) -> list[Path]:
    """One page per assignment someone handed in, in `folder`; returns the pages written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for assignment in released(course):  # an assignment never released has no points
        record = recorded(course, assignment, students)
        if not record.scores:
            continue
        page = folder / f"{assignment}.html"
        stats = exercise_stats(course, assignment, students)
        page.write_text(render(assignment, record, stats))
        written.append(page)
    return written


BACKTICKED = re.compile(r"`([^`]+)`")


def code_names(text: str) -> Markup:
    """`text` escaped, its backticked names (`layer_norm`) as code: the page's filter for
    what the checks and the students wrote."""
    return Markup(BACKTICKED.sub(r"<code>\1</code>", str(escape(text))))


ENVIRONMENT = Environment(
    loader=PackageLoader("grader.publish"), autoescape=True, keep_trailing_newline=True
)
ENVIRONMENT.filters["code_names"] = code_names
PAGE = ENVIRONMENT.get_template("class_report.html.j2")


def render(assignment: str, record: Recorded, stats: list[ExerciseStats]) -> str:
    scores, points = record.scores, record.points
    return PAGE.render(
        title=f"{assignment}: what the class got right and wrong",
        scores=scores,
        mean=statistics.fmean(scores),
        median=statistics.median(scores),
        points=points,
        histogram=_png(_histogram(scores, points)),
        stats=stats,
        written=record.written,
        students=record.students,
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
    names = [s.name for s in stats]
    unattempted = [s.unattempted_share for s in stats]
    axes.barh(names, unattempted, color="#bbbbbb", label="did not attempt")
    axes.barh(
        names,
        [s.wrong_share for s in stats],
        left=unattempted,
        color="#dd8452",
        label="got it wrong",
    )
    axes.set_xlim(0, 1)
    axes.invert_yaxis()
    axes.set_xlabel("difficulty (share of points missed)")
    axes.legend(loc="lower right")
    return figure


def _png(figure: Figure) -> str:
    """The figure as base64 PNG, to embed in the page."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=80)
    return base64.b64encode(buffer.getvalue()).decode()
