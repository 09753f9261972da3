"""The instructor's command line: defaults as documented, bad input refused before anything
runs, and every autograde run ending with what was not graded in full."""

from __future__ import annotations

import contextlib
import datetime
import io
import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.utils import is_grade

from grader.autograde import discover, misnamed_folders
from grader.checks import EXERCISES
from grader.cli import build_parser, main
from grader.course import Course, Layout, nbgrader_metadata, notebook_path
from grader.course.config import DEMO_EXERCISE_SECONDS, RELEASE, REPO, assignments
from grader.course.discovery import why_unstorable
from grader.course.intake import exercises_of, source_notebook
from grader.grading.grade import DEFAULT_LIMITS
from grader.grading.sandbox import available as sandbox_available
from grader.release.demo import PROFILES, expected_scores, write_class, written_answers_note

SECONDS = f"{DEFAULT_LIMITS.wall_seconds:g}"
# (command and its required arguments, option's dest, default from its one source of truth,
# how its help words that default; None for a switch, which says what it does instead)
DEFAULTS = [
    (
        ["autograde", "SUB"],
        "course",
        None,
        "the current folder when it holds an nbgrader_config.py",
    ),
    (["autograde", "SUB"], "timeout", DEFAULT_LIMITS.wall_seconds, SECONDS),
    (["autograde", "SUB"], "jobs", None, "one per core"),
    (["autograde", "SUB"], "seed", None, "random"),
    (["autograde", "SUB"], "source", None, "the course folder's source/ if it has one"),
    (["autograde"], "submissions", None, "the course's own submitted/"),
    (["init", "COURSE"], "source", None, "the course folder's source/ if it has one"),
    (["autograde", "SUB"], "unsafe_no_sandbox", False, None),
    (["feedback"], "course", None, "the current folder when it holds an nbgrader_config.py"),
    (["export"], "course", None, "the current folder when it holds an nbgrader_config.py"),
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
    said = "there is no course folder" if course == "TYPO" else "is not a graded course"
    assert f"{said} {course}" in error if course == "TYPO" else f"{course} {said}" in error
    assert "autograde SUBMISSIONS" not in error  # no hint that would grade into a new folder
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize("command", ["feedback", "export", "report"])
def test_run_from_inside_the_course_folder_the_course_is_found_there(
    command, tmp_path, capsys, monkeypatch
):
    """As nbgrader finds it: the current folder's nbgrader_config.py names it the course."""
    course = tmp_path / "course"
    assert main(["init", str(course)]) == 0
    monkeypatch.chdir(course)
    capsys.readouterr()
    error = refusal_line([command], capsys)
    assert error.endswith(
        ". is not a graded course (" + str(course / "gradebook.db") + " is "
        "missing or empty): name the course folder with --course, or grade its "
        "submissions first (`grader autograde`)"
    )
    assert not (course / "course").exists()


def test_without_a_sandbox_autograde_refuses_in_one_line_creating_nothing(
    tmp_path, monkeypatch, capsys
):
    import grader.grading.sandbox

    def unavailable(*args):
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
    argv = ["autograde", "SUB", "--course", "course", "--jobs", "2", "--timeout", "8"]
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
    assert unjudged.pop(("gus", assignments()[0])).startswith("timed out: ")
    for assignment in assignments():
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


@pytest.mark.parametrize(
    ("option", "typed", "said"),
    [
        ("--student", "adaa", "no student 'adaa' in SUB (did you mean ada?)"),
        (
            "--assignment",
            "01_layernorm",
            f"no assignment '01_layernorm' in this course (did you mean {ASSIGNMENT}?)",
        ),
        ("--student", "zed", "no student 'zed' in SUB (students: ada)"),
    ],
)
def test_an_unknown_student_or_assignment_is_named_with_its_near_matches(
    option, typed, said, tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    make(tmp_path / "SUB", f"ada/{ASSIGNMENT}/{NOTEBOOK}")
    before = sorted(tmp_path.rglob("*"))
    argv = ["autograde", "SUB", "--course", "c", option, typed, "--unsafe-no-sandbox"]
    assert refusal_line(argv, capsys) == f"grader autograde: error: {said}"
    assert sorted(tmp_path.rglob("*")) == before  # no course made


@pytest.fixture(scope="module")
def one_released(tmp_path_factory):
    """An nbgrader course folder where only the first assignment was released (generated),
    and ada handed in the first two: `grader autograde` run from inside it, no --course."""
    root = tmp_path_factory.mktemp("one-released")
    course = root / "course"
    assert main(["init", str(course)]) == 0
    release = notebook_path(Layout.of(course).release, ASSIGNMENT)
    release.parent.mkdir(parents=True)
    shutil.copy(notebook_path(RELEASE, ASSIGNMENT), release)  # as generate_assignment leaves it
    write_class(root / "SUB", {"ada": PROFILES["ada"]})
    for assignment in assignments()[:2]:
        shutil.copytree(
            root / "SUB" / "ada" / assignment, Layout.of(course).submitted / "ada" / assignment
        )
    capture = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(capture):
        patch.chdir(course)
        status = main(["autograde", "--jobs", "1", "--seed", "1", "--unsafe-no-sandbox"])
    return course, status, capture.getvalue()


def test_an_assignment_never_released_is_not_graded_exported_or_totalled(one_released, capsys):
    course, status, output = one_released
    assert status == 0, output
    assert listed(output, "Not released") == {("ada", assignments()[1]): "never released"}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert [a.name for a in gradebook.assignments] == [ASSIGNMENT]
    assert main(["export", "--course", str(course), "--csv", str(course / "g.csv")]) == 0
    header = (course / "g.csv").read_text().splitlines()[0].split(",")
    points = sum(expected_scores({"ada": PROFILES["ada"]})[("ada", ASSIGNMENT)].values())
    assert [h.split(" (")[0] for h in header[4:]] == [ASSIGNMENT, "total"]
    assert header[4].removeprefix(ASSIGNMENT) == header[5].removeprefix("total")
    assert points > 0
    argv = ["autograde", "--course", str(course), "--assignment", assignments()[1]]
    capsys.readouterr()
    error = refusal_line([*argv, "--unsafe-no-sandbox"], capsys)
    assert f"{assignments()[1]} is not released in {course}" in error


NBGRADER = str(Path(sys.executable).parent / "nbgrader")
LATE = "2026-01-02 00:00:00.000000 UTC"  # a day after the due date below


@pytest.mark.skipif(not sandbox_available(), reason="nbgrader's autograde grades in the sandbox")
def test_every_command_grades_with_the_courses_own_nbgrader_config(tmp_path):
    """A late penalty set in the course's nbgrader_config.py, and an extension in its
    gradebook: `nbgrader autograde` (formgrader's Autograde runs the same app) and `grader
    autograde` record the same grades, whichever ran last."""
    course = tmp_path / "course"
    assert main(["init", str(course)]) == 0
    with (course / "nbgrader_config.py").open("a") as config:
        config.write('c.LateSubmissionPlugin.penalty_method = "zero"\n')
    write_class(tmp_path / "SUB", {"ada": PROFILES["ada"]})
    for student in ("dave", "eve"):  # both late; eve has three days more
        handed = Layout.of(course).submitted / student / ASSIGNMENT
        shutil.copytree(tmp_path / "SUB" / "ada" / ASSIGNMENT, handed)
        (handed / "timestamp.txt").write_text(LATE)
    nbgrader(course, "generate_assignment", ASSIGNMENT)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        gradebook.update_or_create_assignment(ASSIGNMENT, duedate=datetime.datetime(2026, 1, 1))
        for student in ("dave", "eve"):
            gradebook.update_or_create_student(student)
            gradebook.update_or_create_submission(ASSIGNMENT, student)
        gradebook.grant_extension(ASSIGNMENT, "eve", days=3)

    nbgrader(course, "autograde", ASSIGNMENT, "--force")
    by_nbgrader = late_grades(course)
    grader_argv = ["autograde", "--course", str(course), "--force", "--jobs", "1"]
    assert main([*grader_argv, "--unsafe-no-sandbox"]) == 0
    assert late_grades(course) == by_nbgrader
    nbgrader(course, "autograde", ASSIGNMENT, "--force")
    assert late_grades(course) == by_nbgrader
    full = sum(expected_scores({"ada": PROFILES["ada"]})[("ada", ASSIGNMENT)].values())
    assert by_nbgrader == {"dave": (full, full), "eve": (full, 0.0)}


def nbgrader(course: Path, *argv: str) -> None:
    """An nbgrader command run as the instructor runs it: from the course folder."""
    done = subprocess.run([NBGRADER, *argv], cwd=course, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]


def late_grades(course: Path) -> dict[str, tuple[float, float]]:
    """Each student's recorded (score, late penalty)."""
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {
            s.student.id: (s.score, s.late_submission_penalty or 0.0)
            for s in gradebook.find_assignment(ASSIGNMENT).submissions
        }


def test_a_regrade_of_a_student_draws_the_hidden_inputs_of_their_recorded_grade(
    tmp_path, monkeypatch
):
    """The seed of each run is recorded with its results and shown; `--force --student X`
    grades X again on the same hidden inputs, to the very same result."""
    write_class(tmp_path / "SUB", {"ivy": PROFILES["ivy"]})  # a mistake the hidden checks see
    monkeypatch.chdir(tmp_path)
    argv = ["autograde", "SUB", "--course", "c", "--assignment", ASSIGNMENT, "--jobs", "1"]
    argv += ["--unsafe-no-sandbox"]
    results = Course(tmp_path / "c").results_file("ivy", ASSIGNMENT)

    def run(*options: str) -> tuple[str, str]:
        capture = io.StringIO()
        with contextlib.redirect_stdout(capture):
            assert main([*argv, *options]) == 0
        return capture.getvalue(), results.read_text()

    output, first = run()
    seed = json.loads(first)["seed"]
    assert f"Hidden inputs drawn with seed {seed}\n" in output
    assert run("--force", "--student", "ivy")[1] == first
    assert json.loads(run("--force")[1])["seed"] != seed  # a new run draws afresh


def test_the_run_ends_with_a_score_table_of_points_and_what_failed(class_run):
    _, _, output = class_run
    table = output.split("Scores recorded in the gradebook", 1)[1]
    rows = {line.split("│")[1].strip(): line for line in table.splitlines() if "│" in line}
    full = sum(sum(e.values()) for e in expected_scores({"ada": PROFILES["ada"]}).values())
    assert f" {full:g} " in rows["ada"]
    assert "timed out" in rows["gus"] and "crashed" in rows["fay"]
    assert not {"*", "bob "} & set(rows)  # ids nbgrader cannot store have no row


def test_a_course_config_that_cannot_be_loaded_is_one_line_naming_it(tmp_path, capsys):
    course = tmp_path / "course"
    assert main(["init", str(course)]) == 0
    with (course / "nbgrader_config.py").open("a") as config:
        config.write("c.LateSubmissionPlugin.penalty_method = undefined_name\n")
    (course / "gradebook.db").write_bytes(b"x")  # past the "not graded" check
    capsys.readouterr()
    error = refusal_line(["export", "--course", str(course)], capsys)
    assert f"{course}/nbgrader_config.py cannot be loaded: NameError" in error


def test_the_demo_says_a_correct_notebooks_missing_points_are_the_written_answers():
    """ada ('correct everywhere') earns every exercise's points; what she is short of, each
    assignment's points less its exercises', is what the demo says a TA grades."""
    note = written_answers_note()
    short = {}
    for assignment in assignments():
        notebook = source_notebook(assignment)
        points = sum(float(nbgrader_metadata(c)["points"]) for c in notebook.cells if is_grade(c))
        short[assignment] = points - sum(EXERCISES[e].points for e in exercises_of(notebook))
    assert f"missing points ({sum(short.values()):g}: " in note
    for assignment, points in short.items():
        assert (f"{points:g} in {assignment}" in note) == (points > 0)
    assert "written answers" in note


@pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")
def test_a_runner_that_cannot_start_refuses_autograde_in_one_line_creating_nothing(
    tmp_path, monkeypatch, capsys
):
    """The sandbox's start-up check runs while autograde imports the grading pipeline; its
    failure is still a refusal before the course folder is opened or made."""
    import grader.grading.sandbox

    shown = grader.grading.sandbox.visible_paths

    def without_the_reference(keys):  # stands for anything the runner needs and cannot see
        visible, masked = shown(keys)
        return [p for p in visible if p != REPO / "norm_utils"], masked

    monkeypatch.setattr(grader.grading.sandbox, "visible_paths", without_the_reference)
    course = tmp_path / "course"
    submissions = make(tmp_path / "SUB", f"ada/{ASSIGNMENT}/{NOTEBOOK}")
    error = refusal_line(["autograde", str(submissions), "--course", str(course)], capsys)
    assert error.startswith("grader autograde: error: the sandboxed runner cannot start")
    assert "No module named 'norm_utils'" in error
    assert not course.exists()
