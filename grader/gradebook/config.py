"""nbgrader's settings for a course: what every nbgrader command run in it reads (`grader init`
writes an nbgrader_config.py that loads them), and the API `grader autograde` records with.

`nbgrader_config` is the course's defaults; `course_config_of` is what nbgrader's own commands
run in the course folder see: those defaults, then the nbgrader_config.py files nbgrader loads
(Jupyter's config folders, then the course folder's own), so that whatever the instructor sets
there (late penalties, course_id, db_url, the exchange...) every `grader` command honours too."""

from __future__ import annotations

from pathlib import Path

from jupyter_core.paths import jupyter_config_path
from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.apps import NbGraderAPI
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)
from traitlets.config import Config
from traitlets.config.loader import ConfigFileNotFound, PyFileConfigLoader

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
    # nbconvert validates the notebook against nbformat's schema after each preprocessor (six
    # times in each of autograde's two passes); optimistic: once, after the last, which still
    # refuses a notebook left invalid (only the preprocessor named in the error may differ).
    config.Autograde.NotebookExporter.optimistic_validation = True
    # Strip hidden-test markers wherever a student pasted them, instead of failing.
    config.ClearHiddenTests.enforce_metadata = False
    config.GenerateFeedback.preprocessors = [
        "nbgrader.preprocessors.ClearHiddenTests",
        "nbgrader.preprocessors.GetGrades",
        "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    ]
    return config


CONFIG_FILE = "nbgrader_config.py"


class CourseConfigError(RuntimeError):
    """A course's nbgrader_config.py cannot be loaded: nothing was done."""


def course_config_of(course: Course) -> Config:
    """nbgrader's settings in `course` as its own commands read them there: the course's
    defaults, overridden by each nbgrader_config.py nbgrader loads, the course folder's last
    (it wins). What `grader` needs to grade through the course's checks stays ours: the
    course folder, the source it grades against and, while recording, the preprocessors
    (see `recording_api`)."""
    config = nbgrader_config(course)
    for folder in [*reversed(jupyter_config_path()), str(course.root)]:
        config.merge(_config_file(folder))
    config.CourseDirectory.root = str(course.root)
    config.CourseDirectory.source_directory = str(course.source)
    return config


def _config_file(folder: str) -> Config:
    """`folder`'s nbgrader_config.py, loaded as nbgrader loads it (empty when there is none)."""
    try:
        return PyFileConfigLoader(CONFIG_FILE, path=folder).load_config()
    except ConfigFileNotFound:
        return Config()
    except Exception as error:  # the instructor's code: any error is theirs to fix
        why = f"{type(error).__name__}: {error}"
        raise CourseConfigError(f"{folder}/{CONFIG_FILE} cannot be loaded: {why}") from None


def gradebook_url(course: Course) -> str:
    """The gradebook's database, as nbgrader's commands in the course open it."""
    return course_config_of(course).CourseDirectory.db_url


def course_settings(root: Path) -> Config:
    """The nbgrader settings of the course folder `root` as every nbgrader command run there
    reads them (nbgrader's config path, then the folder's nbgrader_config.py)."""
    return course_config_of(Course(root))


def open_course(root: Path, source: Path | None = None) -> Course:
    """The course at `root`, with the gradebook its nbgrader configuration names: a `db_url`
    set in its nbgrader_config.py is honoured, a SQLite file or a database server (PostgreSQL,
    shared by graders on several machines)."""
    course = Course(root, source)
    if (path := gradebook_file(course)) is not None:
        course.gradebook = (course.root / path).resolve()
    return course


def gradebook_file(course: Course) -> Path | None:
    """The course's gradebook when it is an SQLite file (None: a database server holds it)."""
    url = gradebook_url(course)
    return Path(url.removeprefix(SQLITE)) if url.startswith(SQLITE) else None


SQLITE = "sqlite:///"


def recording_api(course: Course) -> NbGraderAPI:
    """nbgrader for `grader autograde`'s recording, configured as the course is: it reads the
    staged copies, records through our preprocessors, and the results just graded are the
    submission's own."""
    config = course_config_of(course)
    ours = nbgrader_config(course)
    config.Autograde.autograde_preprocessors = ours.Autograde.autograde_preprocessors
    config.InjectResults = ours.InjectResults
    config.CourseDirectory.submitted_directory = str(course.staged)
    config.InjectResults.graded_now = True
    return NbGraderAPI(config=config)
