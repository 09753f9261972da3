"""Configuration for plain `nbgrader` commands run from this folder (e.g. `nbgrader formgrader`)."""

from grader.config import course_config

c = get_config()  # noqa: F821 (injected by traitlets)
c.merge(course_config())
