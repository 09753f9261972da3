"""The instructor's command line: defaults as documented, bad input refused before anything
runs, and every autograde run ending with what was not graded in full."""

from __future__ import annotations

import contextlib
import io
import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from grader.autograde import discover, misnamed_folders
from grader.cli import DEFAULT_COURSE, build_parser, main
from grader.course import Course, notebook_path
from grader.course.config import DEMO_EXERCISE_SECONDS, RELEASE, REPO, assignments
from grader.course.discovery import why_unstorable
from grader.course.intake import exercises_of, source_notebook
from grader.grading.grade import DEFAULT_LIMITS
from grader.release.demo import PROFILES, expected_scores, write_class

SECONDS = f"{DEFAULT_LIMITS.wall_seconds:g}"
# (command and its required arguments, option's dest, default from its one source of truth,
# how its help words that default; None for a switch, which says what it does instead)
DEFAULTS = [
    (["autograde", "SUB"], "course", DEFAULT_COURSE, str(DEFAULT_COURSE)),
    (["autograde", "SUB"], "timeout", DEFAULT_LIMITS.wall_seconds, SECONDS),
    (["autograde", "SUB"], "jobs", None, "one per core"),
    (["autograde", "SUB"], "seed", None, "random"),
    (["autograde", "SUB"], "source", None, "the course folder's source/ if it has one"),
    (["autograde"], "submissions", None, "the course's own submitted/"),
    (["init", "COURSE"], "source", None, "the course folder's source/ if it has one"),
    (["autograde", "SUB"], "unsafe_no_sandbox", False, None),
    (["feedback"], "course", DEFAULT_COURSE, str(DEFAULT_COURSE)),
    (["export"], "course", DEFAULT_COURSE, str(DEFAULT_COURSE)),
    (["export"], "csv", Path("grades.csv"), "grades.csv"),
    (["demo"], "timeout", DEMO_EXERCISE_SECONDS, f"{DEMO_EXERCISE_SECONDS:g}"),
    (["demo"], "jobs", None, "one per core"),
    (["demo"], "out", REPO / "build" / "demo", str(REPO / "build" / "demo")),
    (["release"], "check", False, None),
]


def parsed(argv: list[str]) -> dict:
    return vars(build_parser().parse_args(argv))


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere


@pytest.mark.parametrize(("argv", "dest", "default", "said"), DEFAULTS)
def test_each_default_is_its_one_source_and_what_its_help_says(argv, dest, default, said, capsys):
    assert parsed(argv)[dest] == default
    if said is not None:
        assert f"(default: {said}" in help_of(argv[0], capsys)


def test_the_demos_shorter_timeout_does_not_leak_into_autograde():
    # else the test below proves nothing
    assert DEMO_EXERCISE_SECONDS != DEFAULT_LIMITS.wall_seconds
    assert parsed(["demo"])["timeout"] == DEMO_EXERCISE_SECONDS
    assert parsed(["autograde", "SUB"])["timeout"] == DEFAULT_LIMITS.wall_seconds


BAD_GRADING_OPTIONS = [
    ("--jobs", "0"),
    ("--jobs", "-1"),
    ("--jobs", "two"),
    ("--timeout", "0"),
    ("--timeout", "-5"),
    ("--timeout", "nan"),
    ("--timeout", "inf"),
    ("--timeout", "1e400"),
]
BAD_OPTIONS = [
    *(("autograde", *bad) for bad in [*BAD_GRADING_OPTIONS, ("--seed", "-1")]),
    *(("demo", *bad) for bad in BAD_GRADING_OPTIONS),
]


@pytest.mark.parametrize(("command", "option", "value"), BAD_OPTIONS)
def test_a_bad_option_value_is_one_error_line_and_exit_2(command, option, value, tmp_path, capsys):
    where = {
        "autograde": [str(tmp_path / "no-such-folder"), "--course", str(tmp_path / "course")],
        "demo": ["--out", str(tmp_path / "demo")],
    }
    with pytest.raises(SystemExit) as stop:
        main([command, option, value, "--unsafe-no-sandbox", *where[command]])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"grader {command}: error: argument {option}: ")
    assert repr(value) in error
    assert list(tmp_path.iterdir()) == []


ASSIGNMENT = assignments()[0]
NOTEBOOK = f"{ASSIGNMENT}.ipynb"


def make(root: Path, *files: str) -> Path:
    """A folder holding `files` (paths relative to it; a trailing / makes a folder)."""
    for name in files:
        path = root / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}")
    root.mkdir(parents=True, exist_ok=True)
    return root


def refusal_line(argv: list[str], capsys) -> str:
    """The one line a refused command prints; it must exit 2 and print nothing else."""
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


BAD_SUBMISSIONS = {
    "does not exist": [],
    "is not a folder": None,  # a file
    "holds no student folder": ["ada/", "ben/notes.txt", ".ipynb_checkpoints/", "__MACOSX/"],
    "holds notebooks directly": ["ada.ipynb", "ben.ipynb"],
    "named after an assignment": [f"{ASSIGNMENT}/ada/{NOTEBOOK}", f"ben/{ASSIGNMENT}/{NOTEBOOK}"],
    "SUB/submitted does: grade that folder": [f"submitted/ada/{ASSIGNMENT}/{NOTEBOOK}"],
}


@pytest.mark.parametrize(("problem", "files"), BAD_SUBMISSIONS.items())
def test_a_submissions_folder_not_laid_out_as_expected_is_refused(problem, files, tmp_path, capsys):
    submissions = tmp_path / "SUB"
    if files is None:
        submissions.write_text("")
    elif files:
        make(submissions, *files)
    course = tmp_path / "course"
    error = refusal_line(["autograde", str(submissions), "--course", str(course)], capsys)
    assert error.startswith("grader autograde: error: ")
    assert problem.replace("SUB", str(submissions)) in error
    assert not course.exists()


def test_a_course_folder_nbgrader_would_read_as_a_pattern_is_refused(tmp_path, capsys):
    submissions = make(tmp_path / "SUB", f"ada/{ASSIGNMENT}/{NOTEBOOK}")
    course = tmp_path / "course[2024]"
    error = refusal_line(["autograde", str(submissions), "--course", str(course)], capsys)
    assert "has pattern characters" in error
    assert not course.exists()


def test_submissions_inside_the_course_but_its_submitted_are_refused_and_left_untouched(
    tmp_path, capsys
):
    """Only nbgrader's own submitted/ may lie in the course (tests/test_course.py grades it)."""
    course = make(tmp_path / "course", f"incoming/ada/{ASSIGNMENT}/{NOTEBOOK}")
    submissions = course / "incoming"
    before = sorted(course.rglob("*"))
    error = refusal_line(["autograde", str(submissions), "--course", str(course)], capsys)
    assert "must not contain one another" in error
    assert sorted(course.rglob("*")) == before


@pytest.mark.parametrize("command", ["feedback", "export"])
@pytest.mark.parametrize("course", ["TYPO", "empty-folder", "empty-gradebook"])
def test_feedback_and_export_refuse_a_folder_that_is_not_a_graded_course(
    command, course, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "empty-folder")
    make(tmp_path / "empty-gradebook")
    (tmp_path / "empty-gradebook" / "gradebook.db").touch()
    before = sorted(tmp_path.rglob("*"))
    error = refusal_line([command, "--course", course], capsys)
    assert f"{course} is not a graded course" in error
    assert sorted(tmp_path.rglob("*")) == before


def test_without_a_sandbox_autograde_refuses_in_one_line_creating_nothing(
    tmp_path, monkeypatch, capsys
):
    import grader.grading.sandbox

    def unavailable(source):
        raise grader.grading.sandbox.SandboxUnavailable("bubblewrap is not installed")

    monkeypatch.setattr(grader.grading.sandbox, "Sandbox", unavailable)
    course = tmp_path / "course"
    submissions = make(tmp_path / "SUB", f"ada/{ASSIGNMENT}/{NOTEBOOK}")
    error = refusal_line(["autograde", str(submissions), "--course", str(course)], capsys)
    assert error == "grader autograde: error: bubblewrap is not installed"
    assert not course.exists()


@pytest.mark.parametrize(("content", "problem"), [(None, "is missing"), ("{", "is not a readable")])
def test_check_refuses_a_notebook_it_cannot_read(content, problem, tmp_path, capsys):
    notebook = tmp_path / ASSIGNMENT / NOTEBOOK
    if content is not None:
        make(tmp_path, f"{ASSIGNMENT}/{NOTEBOOK}")
        notebook.write_text(content)
    error = refusal_line(["check", str(notebook)], capsys)
    assert error.startswith(f"grader check: error: cannot check {notebook}: {NOTEBOOK} {problem}")


def test_check_runs_on_a_notebook_named_from_its_own_folder(tmp_path, monkeypatch, capsys):
    """`grader check 01_layer_norm.ipynb`, as a student types it beside the notebook."""
    shutil.copy(notebook_path(RELEASE, ASSIGNMENT), tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["check", NOTEBOOK]) == 1  # the untouched release: everything still to do
    assert "Still to fix:" in capsys.readouterr().out


LITTER = [".ipynb_checkpoints", "__MACOSX", ".git"]
UNSTORABLE = ["*", "[ab]", "bob ", " bob", "a\nb", "tab\tbed", "back\\slash"]


def test_discovery_skips_tool_litter_and_refuses_ids_nbgrader_cannot_store(tmp_path, monkeypatch):
    handed_in = (f"{n}/{ASSIGNMENT}/" for n in ["ada", *LITTER])
    submissions = make(tmp_path / "SUB", "notes.txt", "ben/", *handed_in)  # ben: nothing in
    for name in UNSTORABLE:
        (submissions / name).mkdir()
    monkeypatch.chdir(tmp_path)
    tasks = discover(Path("SUB"))
    assert {t.student for t in tasks} == {"ada"}
    # nbgrader changes the working directory while it records: paths must not depend on it
    assert all(t.submission.is_absolute() for t in tasks)
    outcomes = misnamed_folders(Path("SUB"))
    assert {o.task.student for o in outcomes} == set(UNSTORABLE)
    assert all(o.problem.startswith("not graded: the folder name has ") for o in outcomes)


# A small class through `grader autograde`, from relative paths as an instructor types them:
# a correct student, one of each way to lose a notebook unjudged, two ids nbgrader cannot store,
# tool litter, and a notebook whose recording fails (nbgrader reports an error).
CLASS = ["ada", "cyd", "dee", "fay", "gus"]
NOT_STORED = ["*", "bob "]  # copies of ada's work: "*" would match every student as a glob
UNRECORDABLE = ("fay", assignments()[1])


@pytest.fixture(scope="module")
def class_run(tmp_path_factory):
    from nbgrader.apps import NbGraderAPI

    root = tmp_path_factory.mktemp("cli-class")
    write_class(root / "SUB", {s: PROFILES[s] for s in CLASS})
    for name in [*NOT_STORED, *LITTER]:
        shutil.copytree(root / "SUB" / "ada", root / "SUB" / name)
    record = NbGraderAPI.autograde

    def disk_full(api, assignment, student, **options):
        if (student, assignment) == UNRECORDABLE:
            return {"success": False, "error": "OSError: [Errno 28] No space left on device"}
        return record(api, assignment, student, **options)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(NbGraderAPI, "autograde", disk_full)
        status, output = autograde_class(root)
    return root, status, output


def autograde_class(root: Path) -> tuple[int, str]:
    """`grader autograde SUB --course course` run in `root`: its exit status and output."""
    argv = ["autograde", "SUB", "--course", "course", "--jobs", "2", "--timeout", "1"]
    argv += ["--seed", "1", "--unsafe-no-sandbox"]  # the sample class is the course's own code
    capture = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(capture):
        patch.chdir(root)
        status = main(argv)
    return status, capture.getvalue()


def listed(output: str, title: str) -> dict[tuple[str, str], str]:
    """The summary section starting with `title`: (student, notebooks) -> reason."""
    lines = output.split(title, 1)[1].splitlines()[1:] if title in output else []
    section = itertools.takewhile(lambda line: line.startswith("  "), lines)
    return {tuple(line.split(None, 2)[:2]): line.split(None, 2)[2] for line in section}


def test_the_run_lists_each_notebook_that_lost_its_points_unjudged(class_run):
    _, _, output = class_run
    unjudged = listed(output, "Scored 0 as listed")
    assert unjudged.pop(("cyd", "every")) == "notebook  is missing"
    assert unjudged.pop(("dee", "every")).startswith("notebook  is not a readable notebook")
    for assignment in assignments():
        assert unjudged.pop(("gus", assignment)).startswith("timed out: ")
        if ("fay", assignment) != UNRECORDABLE:
            assert unjudged.pop(("fay", assignment)).startswith("crashed: ")
    assert unjudged == {}  # ada, the litter and the refused ids are not here


def test_what_was_not_recorded_is_listed_and_the_exit_status_is_1(class_run):
    _, status, output = class_run
    assert status == 1
    not_recorded = listed(output, "NOT RECORDED")
    assert "No space left on device" in not_recorded.pop(UNRECORDABLE)
    assert "pattern characters" in not_recorded.pop(("'*'", "every"))
    assert "whitespace" in not_recorded.pop(("'bob", "'"))
    assert not_recorded == {}
    counts = f"Notebooks: {len(CLASS) * len(assignments()) - 1} graded, 0 unchanged"
    assert counts in output.splitlines()[-1]


def test_only_the_class_is_recorded_not_litter_nor_unstorable_ids(class_run):
    course = class_run[0] / "course"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert sorted(s.id for s in gradebook.students) == CLASS
        ada = {a: gradebook.find_submission(a, "ada").score for a in assignments()}
    expected = expected_scores()
    assert ada == {a: sum(expected[("ada", a)].values()) for a in assignments()}
    assert sorted(p.name for p in Course(course).results.iterdir()) == CLASS


def test_the_command_exits_2_with_one_line_and_no_traceback(tmp_path):
    """As a shell sees it: the exit status and the only line printed."""
    done = subprocess.run(
        [sys.executable, "-m", "grader", "autograde", "NO_SUCH_DIR"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "grader autograde: error: NO_SUCH_DIR does not exist "
        "(expected NO_SUCH_DIR/<student>/<assignment>/<assignment>.ipynb)"
    ]
    assert list(tmp_path.iterdir()) == []


def test_a_rerun_records_what_was_not_and_lists_the_rest_again(class_run):
    root, _, first = class_run
    status, output = autograde_class(root)
    assert status == 1  # the two folder names are still refused
    assert listed(output, "NOT RECORDED").keys() == {("'*'", "every"), ("'bob", "'")}
    unjudged = listed(first, "Scored 0 as listed")
    first_exercise = exercises_of(source_notebook(UNRECORDABLE[1]))[0]
    now_recorded = {UNRECORDABLE: f"crashed: {first_exercise}"}
    assert listed(output, "Scored 0 as listed") == unjudged | now_recorded
    assert output.splitlines()[-1].startswith("Notebooks: 1 graded, ")


@pytest.mark.parametrize(
    "student",
    [
        "<img src=x onerror=alert(1)>",
        '=HYPERLINK("http://x")',
        "+1",
        "-2",
        "@SUM(A1)",
        "a b",
        "x'y",
    ],
)
def test_an_id_that_would_be_markup_or_a_formula_is_refused(student):
    assert "would be markup or a formula" in why_unstorable(student)


@pytest.mark.parametrize("student", ["ada", "a.lovelace", "s1234567", "jane_doe", "ada-l", "王芳"])
def test_an_ordinary_id_is_kept(student):
    assert why_unstorable(student) == ""
