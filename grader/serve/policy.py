"""The course's grade-on-submit policy, set in its nbgrader_config.py:

    c.GradeOnSubmit.assignments = ["01_layer_norm"]  # graded on submit (default: every one)
    c.GradeOnSubmit.per_assignment = 5  # graded submissions per student and assignment (0: any)
    c.GradeOnSubmit.per_day = 2         # graded submissions per student, assignment and UTC day

A submission over a limit is not graded: the student is told why where their feedback would be.
Late submissions are graded, and nbgrader's late policy (`c.LateSubmissionPlugin`) applies.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from traitlets import Int, List, Unicode
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
