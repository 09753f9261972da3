"""The course model every package reads: cells, folders, typed results (no nbgrader, no torch).

`grader.course.intake` reads untrusted submissions; `grader.course.discovery` finds them."""

from grader.course.cells import (
    SETUP_ID,
    TEST_SUFFIX,
    answer_cell,
    exercise_of_test,
    grade_id,
    grade_id_of_tests,
    is_solution,
    is_test_cell,
    nbgrader_metadata,
    set_nbgrader_metadata,
)
from grader.course.layout import (
    EXCHANGE_FILES,
    CannotStart,
    Course,
    CourseBusy,
    Layout,
    MissingSource,
    checked_source,
    fetched_feedback,
    holds_data,
    notebook_path,
)
from grader.course.results import (
    UNATTEMPTED,
    UNJUDGED,
    Diagnosis,
    ExerciseResult,
    Results,
    results_file,
    write_atomically,
)

__all__ = [
    "EXCHANGE_FILES",
    "SETUP_ID",
    "TEST_SUFFIX",
    "UNATTEMPTED",
    "UNJUDGED",
    "CannotStart",
    "Course",
    "CourseBusy",
    "Diagnosis",
    "ExerciseResult",
    "Layout",
    "MissingSource",
    "Results",
    "answer_cell",
    "checked_source",
    "exercise_of_test",
    "fetched_feedback",
    "grade_id",
    "grade_id_of_tests",
    "holds_data",
    "is_solution",
    "is_test_cell",
    "nbgrader_metadata",
    "notebook_path",
    "results_file",
    "set_nbgrader_metadata",
    "write_atomically",
]
