"""The course's grade-on-submit policy, set in its nbgrader_config.py:

    c.GradeOnSubmit.assignments = ["01_layer_norm"]  # graded on submit (default: every one)
    c.GradeOnSubmit.per_assignment = 5  # graded submissions per student and assignment (0: any)
    c.GradeOnSubmit.per_day = 2         # graded submissions per student, assignment and UTC day
    c.GradeOnSubmit.before_due = "visible"  # before the due date, release what the visible
                                            # checks say; "full" (default): the whole grade

A submission over a limit is not graded: the student is told why where their feedback would be.
Late submissions are graded, and nbgrader's late policy (`c.LateSubmissionPlugin`) applies.
With `before_due = "visible"`, a submission made before its assignment's due date is graded in
full and recorded (the instructor sees the grade), but the page released to the student shows
only its visible checks and no score; once the due date has passed, the service releases the
full page of each such submission (an assignment with no due date is always released in full).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from traitlets import Enum, Int, List, Unicode
from traitlets.config import Configurable


class GradeOnSubmit(Configurable):
    assignments = List(
        Unicode(), help="the assignments graded on submit (empty: every assignment)"
    ).tag(config=True)
    per_assignment = Int(
        0, help="graded submissions allowed per student and assignment (0: no limit)"
    ).tag(config=True)
    per_day = Int(
        0, help="graded submissions allowed per student and assignment in a UTC day (0: no limit)"
    ).tag(config=True)

    before_due = Enum(
        ["full", "visible"],
        "full",
        help="what a student is released before the due date: the full grade, or only what the "
        "visible checks say (the full page follows once the due date has passed)",
    ).tag(config=True)

    def visible_only(self, due: datetime | None, now: datetime) -> bool:
        """Whether a page released `now` shows only the visible checks (both naive UTC, as
        nbgrader keeps due dates): before a due date, when the course says so."""
        return self.before_due == "visible" and due is not None and now <= due

    def graded_on_submit(self, assignment: str) -> bool:
        return not self.assignments or assignment in self.assignments

    def refusal(self, submitted: datetime, graded_before: Iterable[datetime]) -> str:
        """Why a submission at `submitted` is not graded, given when the student's earlier
        graded submissions of the assignment were made ('' when it is graded)."""
        earlier = list(graded_before)
        if self.per_assignment and len(earlier) >= self.per_assignment:
            return (
                f"you have had {len(earlier)} submissions of this assignment graded, the "
                f"course's limit ({self.per_assignment}); your grade stays the last one given"
            )
        same_day = [t for t in earlier if t.date() == submitted.date()]
        if self.per_day and len(same_day) >= self.per_day:
            return (
                f"you have had {len(same_day)} submissions of this assignment graded on "
                f"{submitted:%Y-%m-%d} (UTC), the course's daily limit ({self.per_day}); "
                "submit again tomorrow to have it graded"
            )
        return ""
