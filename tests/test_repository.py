"""The repository stands alone and keeps each convention in one home: what it cites is in the
repository or public; nbgrader's cell metadata, the course's folders and the test-cell predicate
are grader.course's alone, time limits and seeds grader.course.config's; every test asserts
something, and every function of the grader has a caller."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from dataclasses import dataclass

import pytest

from grader.course.config import REPO

THIS_FILE = "tests/test_repository.py"  # it spells out what the rules look for
HOME = "grader/course/layout.py"  # the course's folders
CELLS = "grader/course/cells.py"  # nbgrader's metadata and the course's cell conventions
DEFAULTS = "grader/course/config.py"  # every time limit, and the seeds

# Projects whose public issue trackers may be cited by number ("PyTorch issue #74092").
PUBLIC_PROJECTS = {"pytorch", "torch", "nbgrader", "nbval", "jupyter", "jupyterlab", "bubblewrap"}


@dataclass(frozen=True)
class Rule:
    """Text no tracked file but `home` may hold; `pattern`'s matches count unless `excused`.
    `breaks` are lines the rule must catch, `keeps` how they are written instead."""

    name: str
    pattern: re.Pattern
    breaks: tuple[str, ...]
    keeps: tuple[str, ...]
    home: str | None = None
    suffixes: tuple[str, ...] = (".py",)
    under: str = ""  # only files whose path starts so

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
        breaks=(
            'meta = cell.metadata.get("nbgrader", {})',
            'cell.metadata["nbgrader"]["points"]',
            "cell.metadata.nbgrader.grade_id",
        ),
        keeps=("meta = nbgrader_metadata(cell)", 'resources["nbgrader"]', "grade_id(cell)"),
        home=CELLS,
    ),
    Rule(
        "builds a course folder's or an assignment's path by hand (use grader.course's "
        "Layout, Course or notebook_path)",
        re.compile(
            r"/\s*[\"'](?:source|release|submitted|autograded|feedback|staged|results)[\"']"
            r"|/\s*(\w+)\s*/\s*f[\"']\{\1\}\.ipynb[\"']"
        ),
        breaks=('course.root / "submitted" / student', 'home / assignment / f"{assignment}.ipynb"'),
        keeps=("Layout.of(course.root).submitted / student", "notebook_path(home, assignment)"),
        home=HOME,
    ),
    Rule(
        "defines its own test-cell predicate or test-cell names (use grader.course's "
        "is_test_cell, grade_id_of_tests, exercise_of_test)",
        re.compile(
            r"def\s+(?!test_)\w*test_cells?\b"
            r"|\+\s*[\"']_tests[\"']|\{\w+\}_tests[\"']|suffix\([\"']_tests[\"']\)"
        ),
        breaks=(
            "def _is_test_cell(cell):",
            'box = f"input.score#{name}_tests"',
            'grade_id(cell).removesuffix("_tests")',
        ),
        keeps=(
            "from grader.course import is_test_cell",
            "def test_cells_are_locked():",
            'box = f"input.score#{grade_id_of_tests(name)}"',
        ),
        home=CELLS,
    ),
    Rule(
        "sets a time limit or draws a grading seed of its own (grader.course.config holds every "
        "one: EXERCISE_SECONDS and the other limits, fresh_seed, kernel_seed)",
        re.compile(
            r"(?i)\b\w*(?:timeout|seconds)\w*\s*(?::\s*\w+\s*)?=\s*\d"
            r"|secrets\.randbits|random\.(?:seed|randint)\(|environ[^\n]*SEED"
        ),
        breaks=(
            "wall_seconds: float = 60.0",
            "process.communicate(frames, timeout=600)",
            "seed = secrets.randbits(31)",
            'int(os.environ.get("NORM_COURSE_SEED", 0))',
        ),
        keeps=("wall_seconds: float = EXERCISE_SECONDS", "timeout=timeout", "fresh_seed()"),
        home=DEFAULTS,
        under="grader/",
    ),
    Rule(
        "cites notes that are not in the repository",
        re.compile(
            r"\.\./shared|shared/reference|measured-notes\.md|\bcontent\.md|autograders\.md"
        ),
        breaks=("see ../shared/reference/content.md §7",),
        keeps=("see docs/rubric.md",),
        suffixes=("",),
    ),
    IssueRule(
        "cites an issue of no public project (say what it asked for instead)",
        re.compile(r"(?P<project>\b\w+\s+)?\b[Ii]ssues?\s+#?\d+"),
        breaks=("as issue 11 asked", "## Issue 11's targets"),
        keeps=("as PyTorch issue #74092 shows", "nbgrader issue 1234"),
        suffixes=("",),
    ),
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
        if name in (THIS_FILE, rule.home) or not name.startswith(rule.under):
            continue
        if not name.endswith(rule.suffixes):
            continue
        if path.is_file() and (hits := rule.offenders(path.read_text(errors="replace"))):
            found[name] = hits
    return found


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name.split(" (")[0])
def test_no_file_breaks_the_rule(rule):
    assert offenders(rule) == {}, f"these files {rule.name}"


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name.split(" (")[0])
def test_each_rule_catches_what_it_forbids_and_not_its_fix(rule):
    assert [line for line in rule.breaks if not rule.offenders(line)] == []
    assert [line for line in rule.keeps if rule.offenders(line)] == []


# --- tests that can fail, code that is used -------------------------------------------------------

ASSERTING_CALLS = re.compile(r"assert\w*|raises|fail|warns|deprecated_call")


def silent_tests(source: str) -> list[str]:
    """The test functions in `source` with no assert, no pytest.raises (or fail, warns) and no
    call to an assert helper: they cannot fail on a wrong result."""

    def called(node: ast.Call) -> str:
        return getattr(node.func, "attr", getattr(node.func, "id", ""))

    silent = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            inside = list(ast.walk(node))
            if not any(isinstance(n, ast.Assert) for n in inside) and not any(
                ASSERTING_CALLS.fullmatch(called(n)) for n in inside if isinstance(n, ast.Call)
            ):
                silent.append(node.name)
    return silent


def uncalled(sources: dict[str, str]) -> list[str]:
    """The functions and classes defined at the top of a module of grader/ that nothing uses:
    neither read in their module (where no local of that name hides them), nor imported from it
    or named through it (`grader.gradebook.lms.LmsCsvExport`) anywhere in `sources` (file name ->
    text)."""
    found = []
    for path, text in sources.items():
        if not (path.startswith("grader/") and path.endswith(".py")):
            continue
        module = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        tree = ast.parse(text)
        read = _global_reads(tree)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef | ast.ClassDef) or _connected(node):
                continue
            name = node.name
            if name not in read and not any(
                _names(other, module, name) for other in sources.values() if name in other
            ):
                found.append(f"{path}: {name}")
    return found


def _connected(node: ast.FunctionDef | ast.ClassDef) -> bool:
    """Registered to a signal by its decorator (`@worker_process_init.connect`): the signal is
    its caller."""
    return any(isinstance(d, ast.Attribute) and d.attr == "connect" for d in node.decorator_list)


def _global_reads(node: ast.AST, local: frozenset[str] = frozenset()) -> set[str]:
    """The names read in `node` that are no function's local there: the module's globals."""
    reads = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.Lambda):
            reads |= _global_reads(child, local | _locals(child))
        elif isinstance(child, ast.Name):
            if isinstance(child.ctx, ast.Load) and child.id not in local:
                reads.add(child.id)
        else:
            reads |= _global_reads(child, local)
    return reads


def _locals(function: ast.FunctionDef | ast.Lambda) -> frozenset[str]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    stored = [
        n.id
        for n in ast.walk(function)
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    ]
    return frozenset({a.arg for a in every} | set(stored))


def _names(text: str, module: str, name: str) -> bool:
    """Whether `text` imports `name` from `module` (or, relatively, from `.module`) or names it
    through it (`grader.grading.sandboxed.record.encode`, `record.encode`)."""
    last = module.rpartition(".")[2]
    if re.search(rf"\b(?:{re.escape(module)}|{last})\.{name}\b", text):
        return True
    imports = re.findall(
        rf"from\s+(?:{re.escape(module)}|\.{last})\s+import\s+(\([^)]*\)|[^\n]*)", text
    )
    return any(re.search(rf"\b{name}\b", names) for names in imports)


@functools.cache
def tracked_sources() -> dict[str, str]:
    return {
        name: (REPO / name).read_text(errors="replace")
        for name in tracked_files()
        if name.endswith((".py", ".ipynb", ".md", ".cfg", ".toml", "Makefile"))
        and (REPO / name).is_file()
    }


def test_every_test_asserts_something():
    silent = {
        name: found
        for name, text in tracked_sources().items()
        if re.fullmatch(r"tests/test_\w+\.py", name) and (found := silent_tests(text))
    }
    assert silent == {}, "these tests assert nothing"


def test_a_test_that_asserts_nothing_is_found():
    assert silent_tests("def test_sandbox_starts():\n    Sandbox()\n") == ["test_sandbox_starts"]
    assert (
        silent_tests("def test_refused():\n    with pytest.raises(ValueError):\n        f()\n")
        == []
    )


def test_every_function_of_the_grader_has_a_caller():
    assert uncalled(tracked_sources()) == []


def test_a_function_without_a_caller_is_found():
    planted = {"grader/planted.py": "def students(course):\n    return []\n"}
    assert uncalled(tracked_sources() | planted) == ["grader/planted.py: students"]
