"""nbgrader's settings for a course: what every nbgrader command run in it reads (`grader init`
writes an nbgrader_config.py that loads them), and the API `grader autograde` records with."""

from __future__ import annotations

from pathlib import Path

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)
from traitlets.config import Config, PyFileConfigLoader

from grader.course import Course
from grader.course.config import course_config

# nbgrader's autograde step that grades a notebook the course has no current result for, then
# writes the results into its test cells (grader.gradebook.preprocessor.InjectResults); named
# by its path, as nbgrader names preprocessors, for it lives with the grading it starts.
GRADING_STEP = "grader.autograde.GradeThenInject"


def nbgrader_config(course: Course) -> Config:
    """nbgrader's settings for `course`: nbgrader's folders, one gradebook, and `autograde`
    grading through the course's sandboxed checks."""
    config = course_config(root=course.root, source=course.source, release=course.release)
    config.InjectResults.results_dir = str(course.results)
    config.InjectResults.submissions_dir = str(course.submitted)
    config.Autograde.autograde_preprocessors = [
        GRADING_STEP,
        IgnorePattern,
        ClearMetadataPreprocessor,
        LimitOutput,
        SaveAutoGrades,
        AssignLatePenalties,
        CheckCellMetadata,
    ]
    # Strip hidden-test markers wherever a student pasted them, instead of failing.
    config.ClearHiddenTests.enforce_metadata = False
    config.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbgrader.preprocessors.GetGrades",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    return config


def course_settings(root: Path) -> Config:
    """The settings of the course folder `root` as every nbgrader command run there reads them
    (its nbgrader_config.py: ours, and what the instructor added: the exchange, a db_url)."""
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def gradebook_url(course: Course) -> str:
    """The gradebook's database, as nbgrader's commands in the course open it: the course
    folder's `c.CourseDirectory.db_url` (a PostgreSQL server, shared by graders on several
    machines), else gradebook.db in the course."""
    if (course.root / "nbgrader_config.py").is_file():
        return course_settings(course.root).CourseDirectory.db_url
    return nbgrader_config(course).CourseDirectory.db_url


def gradebook_file(course: Course) -> Path | None:
    """The course's gradebook when it is an SQLite file (None: a database server holds it)."""
    url = gradebook_url(course)
    return Path(url.removeprefix(SQLITE)) if url.startswith(SQLITE) else None


SQLITE = "sqlite:///"


def recording_api(course: Course) -> NbGraderAPI:
    """nbgrader for `grader autograde`'s recording: it reads the staged copies, and the
    results just graded are the submission's own."""
    config = nbgrader_config(course)
    config.CourseDirectory.db_url = gradebook_url(course)
    config.CourseDirectory.submitted_directory = str(course.staged)
    config.InjectResults.graded_now = True
    return NbGraderAPI(config=config)
