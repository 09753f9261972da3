"""nbgrader's configuration of a course folder, copied there by `grader init COURSE`.

The folder holding this file is the course: nbgrader's source/, release/, submitted/,
autograded/ and feedback/, and one gradebook.db, the same for every nbgrader command run in it
(generate_assignment, release_assignment, collect, zip_collect, autograde, generate_feedback,
release_feedback, export, formgrader in JupyterLab started here) and for `grader autograde
--course COURSE`. nbgrader's `autograde` grades through the course's sandboxed checks.
"""

from pathlib import Path

from grader.course import Course, Layout
from grader.course.config import use_this_environment
from grader.gradebook.config import nbgrader_config

use_this_environment()  # nbgrader runs `alembic` by name: this environment's, unactivated
course = Path(__file__).resolve().parent
c = get_config()  # noqa: F821 (injected by traitlets)
c.merge(nbgrader_config(Course(course, Layout.of(course).source)))  # answer key: its source/
# Where students fetch and submit (nbgrader 0.9.6's default: /usr/local/share/nbgrader/exchange):
# c.Exchange.root = "/usr/local/share/nbgrader/exchange"
