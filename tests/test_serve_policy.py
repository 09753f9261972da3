"""The grade-on-submit policy's decisions (grader/serve/policy.py), and what a page released
before the due date says of an answer (`Verdict.visible`)."""

from __future__ import annotations

from datetime import datetime, timedelta

from conftest import SEEDS, known_mistake
from traitlets.config import Config

from grader.checks import EXERCISES, run
from grader.serve.policy import GradeOnSubmit

DUE = datetime(2030, 1, 1)


def _policy(before_due: str) -> GradeOnSubmit:
    config = Config()
    config.GradeOnSubmit.before_due = before_due
    return GradeOnSubmit(config=config)


def test_only_a_course_that_asks_releases_the_visible_checks_and_only_before_the_due_date():
    visible, full = _policy("visible"), _policy("full")
    assert visible.visible_only(DUE, DUE - timedelta(seconds=1))
    assert visible.visible_only(DUE, DUE)
    assert not visible.visible_only(DUE, DUE + timedelta(seconds=1))
    assert not visible.visible_only(None, DUE)  # no due date: always the whole grade
    assert not full.visible_only(DUE, DUE - timedelta(days=1))


def test_the_visible_verdict_says_nothing_of_the_hidden_checks_nor_a_score():
    exercise = EXERCISES["layer_norm"]
    wrong = known_mistake(exercise, exercise.mistakes[0].name)
    verdict = run(exercise, wrong, hidden=True, seed=SEEDS[0], source="")
    shown = verdict.visible().render()
    assert "(hidden)" in verdict.render() and "(hidden)" not in shown
    assert "visible checks pass" in shown and "points" not in shown.splitlines()[0]
    visible = [o for o in verdict.outcomes if not o.check.hidden]
    assert 0 < len(visible) < len(verdict.outcomes)
    assert len([line for line in shown.splitlines() if line.startswith("  ✓")]) == sum(
        o.passed for o in visible
    )
