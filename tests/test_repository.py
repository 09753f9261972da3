"""The repository stands alone and keeps each convention in one home: what it cites is in the
repository or public; nbgrader's cell metadata, the course's folders and the test-cell predicate
are grader.course's alone."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

import pytest

from grader.config import REPO

THIS_FILE = "tests/test_repository.py"  # it spells out what the rules look for
HOME = "grader/course.py"  # the one model of the course

# Projects whose public issue trackers may be cited by number ("PyTorch issue #74092").
PUBLIC_PROJECTS = {"pytorch", "torch", "nbgrader", "nbval", "jupyter", "jupyterlab", "bubblewrap"}


@dataclass(frozen=True)
class Rule:
    """Text no tracked file but `home` may hold; `pattern`'s matches count unless `excused`."""

    name: str
    pattern: re.Pattern
    home: str | None = None
    suffixes: tuple[str, ...] = (".py",)

    def excused(self, match: re.Match) -> bool:
        return False

    def offenders(self, text: str) -> list[str]:
        return [m.group(0) for m in self.pattern.finditer(text) if not self.excused(m)]


class IssueRule(Rule):
    def excused(self, match: re.Match) -> bool:
        project = match.group("project")
        return project is not None and project.strip().lower() in PUBLIC_PROJECTS


RULES = [
    Rule(
        "reads cells' nbgrader metadata by hand (use grader.course.nbgrader_metadata, grade_id "
        "or nbgrader.utils)",
        re.compile(
            r"metadata\s*(?:\[\s*[\"']nbgrader[\"']"
            r"|\.(?:get|setdefault|pop)\(\s*[\"']nbgrader[\"']|\.nbgrader\b)"
        ),
        HOME,
    ),
    Rule(
        "builds a course folder's or an assignment's path by hand (use grader.course's Layout, "
        "Course or notebook_path)",
        re.compile(
            r"/\s*[\"'](?:source|release|submitted|autograded|feedback|staged|results)[\"']"
            r"|/\s*(\w+)\s*/\s*f[\"']\{\1\}\.ipynb[\"']"
        ),
        HOME,
    ),
    Rule(
        "defines its own test-cell predicate (use grader.course.is_test_cell)",
        re.compile(r"def\s+(?!test_)\w*test_cells?\b"),
        HOME,
    ),
    Rule(
        "cites notes that are not in the repository",
        re.compile(
            r"\.\./shared|shared/reference|measured-notes\.md|\bcontent\.md|autograders\.md"
        ),
        suffixes=("",),
    ),
    IssueRule(
        "cites an issue of no public project (say what it asked for instead)",
        re.compile(r"(?P<project>\b\w+\s+)?\b[Ii]ssues?\s+#?\d+"),
        suffixes=("",),
    ),
]

# One planted violation per rule, and the way the rule wants it written.
PLANTED = [
    (RULES[0], 'meta = cell.metadata.get("nbgrader", {})', "meta = nbgrader_metadata(cell)"),
    (RULES[0], 'cell.metadata["nbgrader"]["points"]', 'nbgrader_metadata(cell)["points"]'),
    (RULES[0], "cell.metadata.nbgrader.grade_id", "grade_id(cell)"),
    (RULES[1], 'course.root / "submitted" / student', "Layout.of(course.root).submitted / student"),
    (RULES[1], 'home / assignment / f"{assignment}.ipynb"', "notebook_path(home, assignment)"),
    (RULES[2], "def _is_test_cell(cell):", "from grader.course import is_test_cell"),
    (RULES[3], "see ../shared/reference/content.md §7", "see docs/rubric.md"),
    (RULES[4], "as issue 11 asked", "as PyTorch issue #74092 shows"),
]


def tracked_files() -> list[str]:
    listing = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return listing.stdout.splitlines()


def offenders(rule: Rule) -> dict[str, list[str]]:
    found = {}
    for name in tracked_files():
        path = REPO / name
        if name in (THIS_FILE, rule.home) or not name.endswith(rule.suffixes):
            continue
        if path.is_file() and (hits := rule.offenders(path.read_text(errors="replace"))):
            found[name] = hits
    return found


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name.split(" (")[0])
def test_no_file_breaks_the_rule(rule):
    assert offenders(rule) == {}, f"these files {rule.name}"


@pytest.mark.parametrize(("rule", "planted", "fixed"), PLANTED, ids=[p for _, p, _ in PLANTED])
def test_each_rule_catches_a_planted_violation_and_not_its_fix(rule, planted, fixed):
    assert rule.offenders(planted)
    assert not rule.offenders(fixed)
