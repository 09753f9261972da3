"""The course's command line (`grader <command> --help` for each): init, release, autograde,
feedback, export, report, collect, roster, demo for instructors; check for students."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from grader.course import Layout
from grader.course.config import DEMO_EXERCISE_SECONDS, EXERCISE_SECONDS, REPO

DEFAULT_COURSE = Path("course")


def _release(args: argparse.Namespace) -> int:
    source = _source(args)  # an installed grader has no solutions/ to release from
    from grader.release.notebooks import generate, stale_files, student_wheel

    if args.check:
        stale = stale_files(source=source)
        if stale:
            print(
                "notebooks/ or normcheck/data/ is stale; run `grader release` and commit.",
                "Differs:",
                *stale,
                sep="\n  ",
            )
            return 1
        print("notebooks/ and normcheck/data/ match solutions/.")
        return 0
    generate(source=source)
    print("Regenerated notebooks/ and normcheck/data/ from solutions/.")
    if args.student_wheel:
        print(f"Built {student_wheel(args.student_wheel)}")
    return 0


def _init(args: argparse.Namespace) -> int:
    """A new nbgrader course folder: source/ (the course's source notebooks) and the
    nbgrader_config.py that points every nbgrader command at it."""
    from grader.course.config import assignments

    source = _source(args)
    course: Path = args.course
    if course.exists() and (not course.is_dir() or any(course.iterdir())):
        raise UsageError(f"{course} already exists and is not an empty folder: name a new one")
    for assignment in assignments():
        target = Layout.of(course).source / assignment
        shutil.copytree(source / assignment, target, ignore=_NOT_SOURCE)
    shutil.copy(
        Path(__file__).parent / "gradebook" / "nbgrader_config.py", course / "nbgrader_config.py"
    )
    print(
        f"Course folder {course}: nbgrader_config.py and source/ ({len(assignments())} "
        "assignments). Run nbgrader's commands from there, starting with "
        "`nbgrader generate_assignment ASSIGNMENT`."
    )
    return 0


_NOT_SOURCE = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")


class UsageError(Exception):
    """Bad input, found before anything is created: one line, exit status 2."""


def _source(args: argparse.Namespace) -> Path:
    """The course source to work from: --source (default: a `grader init` course folder's
    source/, else the checkout's solutions/); refused (UsageError) when it does not hold this
    course's source notebooks."""
    from grader.course import MissingSource, checked_source

    folder, course = getattr(args, "source", None), getattr(args, "course", None)
    if folder is None and course is not None and Layout.of(course).source.is_dir():
        folder = Layout.of(course).source  # a course folder made by `grader init`
    try:
        return checked_source(folder)
    except MissingSource as error:
        raise UsageError(str(error)) from None


def _isolation(args: argparse.Namespace, source: Path, wait: bool = True):
    """The sandbox (hiding the answer key `source`) and limits to grade with; refuses (exit 2)
    when bubblewrap is missing unless the instructor explicitly accepts running student code
    unsandboxed. With `wait=False`, the sandbox's start-up check (Python and torch in a fresh
    runner, 2 s) runs on while this process imports the grading pipeline (1.5 s); the caller
    then waits for it with `_runner_started`."""
    if args.unsafe_no_sandbox:
        from grader.grading.grade import Limits

        return None, Limits(wall_seconds=args.timeout)
    with _refused_without_sandbox():
        from grader.grading.sandbox import Sandbox

        sandbox = Sandbox(source, wait)
    from grader.autograde import sandbox_limits

    return sandbox, sandbox_limits(args.timeout)


@contextlib.contextmanager
def _refused_without_sandbox() -> Iterator[None]:
    """A sandbox that cannot be made or whose runner cannot start: refused, exit 2."""
    from grader.grading.sandbox import SandboxUnavailable

    try:
        yield
    except SandboxUnavailable as error:
        raise UsageError(str(error)) from None


def _runner_started(sandbox) -> None:
    """Wait for the sandbox's start-up check, if any; refused (exit 2) if its runner failed."""
    if sandbox is not None:
        with _refused_without_sandbox():
            sandbox.check_runner_starts()


def _autograde(args: argparse.Namespace) -> int:
    """Exit 0 when every notebook is graded and recorded, 1 when some are not (listed), 2 when
    the run is refused, 128 + N when stopped by signal N."""
    from grader.course import CannotStart
    from grader.course.discovery import layout_problem

    _refuse_an_older_config(args.course)
    source = _source(args)
    args.submissions = args.submissions or Layout.of(args.course).submitted
    problem = layout_problem(args.submissions, args.course)
    if problem:
        raise UsageError(problem)
    _refuse_unknown_names(args)
    sandbox, limits = _isolation(args, source, wait=False)
    from grader.autograde import Interrupted, autograde, not_handed_in
    from grader.gradebook.config import open_course
    from grader.gradebook.records import gradable

    _runner_started(sandbox)  # before anything is opened or created
    course = open_course(args.course, source)
    _refuse_unreleased(course, args.assignment or ())
    try:
        outcomes = autograde(
            args.submissions,
            course,
            args.jobs,
            args.seed,
            limits,
            sandbox,
            force=args.force,
            students=args.student or (),
            notebooks=args.assignment or (),
        )
    except CannotStart as error:
        print(f"grader: {error}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        print(
            f"\ngrader: {stop}: the runners were stopped; notebooks recorded before it keep "
            "their grades, the others were not graded. Run the same command again to finish.",
            file=sys.stderr,
        )
        return 128 + stop.signum
    released = gradable(course)
    absent = not_handed_in(args.submissions, args.student or (), args.assignment or ())
    unreleased = [(o.task, "never released") for o in _handed_in_unreleased(args, released)]
    _listing("Not released (skipped, nothing recorded):", unreleased)
    return _summary(outcomes, course, [t for t in absent if t.assignment in released])


def _handed_in_unreleased(args: argparse.Namespace, released: list[str]) -> list:
    from grader.autograde import Outcome, _wanted, discover

    named = (args.student or (), args.assignment or ())
    return [
        Outcome(t)
        for t in discover(args.submissions)
        if t.assignment not in released and _wanted(t, *named)
    ]


def unknown(kind: str, name: str, known: list[str], where: str) -> str:
    """One line naming `name`, which is no `kind` of `known`, and the near matches."""
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"{kind}s: {', '.join(known)}"
    return f"no {kind} {name!r} {where} ({hint if known else 'there is none'})"


def _refuse_unknown_names(args: argparse.Namespace) -> None:
    """`--student` and `--assignment` must each name one: a typo is refused, never '0 graded'."""
    from grader.course.config import assignments
    from grader.course.discovery import student_folders

    students = student_folders(args.submissions)[0]
    for student in args.student or ():
        if student not in students:
            raise UsageError(unknown("student", student, students, f"in {args.submissions}"))
    for assignment in args.assignment or ():
        if assignment not in assignments():
            raise UsageError(unknown("assignment", assignment, assignments(), "in this course"))


def _refuse_unreleased(course, named: list[str]) -> None:
    """In an nbgrader course folder, an assignment named but never released is refused."""
    from grader.gradebook.config import CONFIG_FILE
    from grader.gradebook.records import released

    if not (course.root / CONFIG_FILE).is_file():
        return
    for assignment in named:
        if assignment not in released(course):
            raise UsageError(
                f"{assignment} is not released in {course.root} (nothing to grade): "
                f"`nbgrader generate_assignment {assignment}` there releases it"
            )


def _summary(outcomes: list, course, absent: list = ()) -> int:
    """Print every student × notebook not graded in full (and those `absent`: not handed in,
    so not graded), and the counts; returns the exit status: 1 when any notebook was not
    graded and recorded."""
    from grader.autograde import lost

    _listing("Not handed in (skipped, nothing recorded):", [(t, "") for t in absent])
    not_recorded = [(o.task, o.problem) for o in outcomes if o.problem]
    unjudged = [(o.task, why) for o in outcomes if not o.problem and (why := lost(o.task, course))]
    _listing("Scored 0 as listed (the student's doing; their feedback says why):", unjudged)
    _listing("NOT RECORDED (fix the cause, then run again; other grades are kept):", not_recorded)
    _scores(course, outcomes, unjudged + not_recorded)
    skipped = sum(o.skipped for o in outcomes)
    graded = len(outcomes) - skipped - len(not_recorded)
    seeds = sorted({o.seed for o in outcomes if o.seed is not None})
    if seeds:  # recorded with each result, and reused by `--force --student ID`
        print("Hidden inputs drawn with seed", ", ".join(map(str, seeds)))
    print(
        f"Notebooks: {graded} graded, {skipped} unchanged since the last run (skipped), "
        f"{len(absent)} not handed in, {len(not_recorded)} not recorded."
    )
    return 1 if not_recorded else 0


def _scores(course, outcomes: list, failed: list) -> None:
    """The table of what the gradebook holds for the students of this run."""
    from grader.course.discovery import why_unstorable
    from grader.publish.tables import score_table, show

    students = sorted({o.task.student for o in outcomes if not why_unstorable(o.task.student)})
    if not students:
        return
    failures: dict[str, list[str]] = {}
    for task, reason in failed:
        failures.setdefault(task.student, []).append(f"{task.assignment}: {reason}")
    show(score_table(course, students, {s: "; ".join(r) for s, r in failures.items()}))


def _listing(title: str, items: list) -> None:
    """`items` (task, reason) as one line per student and reason, naming the notebooks."""
    from grader.course.config import assignments
    from grader.course.discovery import why_unstorable

    notebooks: dict[tuple[str, str], list[str]] = {}
    for task, reason in items:
        notebooks.setdefault((task.student, reason), []).append(task.assignment)
    if not notebooks:
        return
    rows = [
        (
            repr(student) if why_unstorable(student) else student,  # whitespace and newlines shown
            "every notebook" if names == assignments() else ", ".join(names),
            reason,
        )
        for (student, reason), names in notebooks.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(2)]
    print(title)
    for student, names, reason in rows:
        print(f"  {student:<{widths[0]}}  {names:<{widths[1]}}  {reason}")


# What an nbgrader_config.py copied by a grader before grader/ was laid out as the pipeline
# imports: nbgrader's commands in such a course would fail on it.
_OLDER_CONFIG = ("from grader.config import",)


def _refuse_an_older_config(root: Path) -> None:
    config = root / "nbgrader_config.py"
    text = config.read_text(errors="replace") if config.is_file() else ""
    if any(old in text for old in _OLDER_CONFIG):
        raise UsageError(
            f"{config} was written by an older grader and names modules that moved: replace it "
            f"with this grader's ({Path(__file__).parent / 'gradebook' / 'nbgrader_config.py'})"
        )


def _graded_course(root: Path):
    """The course `grader autograde` graded at `root`; anything else is refused, creating
    nothing (no hint here leads to grading into a new folder by accident)."""
    from grader.course import holds_data
    from grader.gradebook.config import gradebook_file, open_course
    from grader.gradebook.records import gradebook_problem

    _refuse_an_older_config(root)
    if not root.is_dir():
        raise UsageError(
            f"there is no course folder {root}: name it with --course, or run from the course "
            "folder (the one holding nbgrader_config.py)"
        )
    course = open_course(root)
    # A gradebook on a database server (the course's db_url) is taken to be there.
    if gradebook_file(course) is not None and not holds_data(course.gradebook):
        raise UsageError(
            f"{root} is not a graded course ({course.gradebook} is missing or empty): name the "
            "course folder with --course, or grade its submissions first (`grader autograde`)"
        )
    problem = gradebook_problem(course)
    if problem:
        raise UsageError(f"{problem}: restore it, or run `grader autograde --force`")
    return course


def _students(course) -> list[str]:
    """Every student with a recorded result; ids nbgrader would read as patterns are left out."""
    from grader.course.discovery import why_unstorable

    results = course.results
    found = [p.name for p in results.iterdir() if p.is_dir()] if results.is_dir() else []
    return sorted(name for name in found if not why_unstorable(name))


def _feedback(args: argparse.Namespace) -> int:
    from grader.publish.feedback import write_feedback

    course = _graded_course(args.course)
    folder, problems = write_feedback(course, _students(course), args.jobs, progress=True)
    for problem in problems:
        print(problem)
    print("Feedback written to", folder)
    return 1 if problems else 0


def _export(args: argparse.Namespace) -> int:
    """Exit 1 when students of the gradebook are not in the LMS's roster (named, not
    exported)."""
    from grader.gradebook.records import released
    from grader.publish.feedback import export_grades

    if (args.lms != "nbgrader") != (args.roster is not None):
        raise UsageError("--lms canvas and --lms moodle go with --roster FILE (the LMS's export)")
    if args.roster is not None:
        _roster(args.lms, args.roster)
    course = _graded_course(args.course)
    for assignment in args.assignment or ():
        if assignment not in released(course):
            raise UsageError(unknown("assignment", assignment, released(course), "graded here"))
    for student in args.student or ():
        if student not in _students(course):
            raise UsageError(unknown("student", student, _students(course), "graded here"))
    named = (args.student or (), args.assignment or ())
    unmatched = export_grades(course, args.csv, *named, args.lms, args.roster)
    if unmatched:
        print(f"Not in the {args.lms} roster, not exported:", ", ".join(unmatched))
    print("Grades written to", args.csv)
    return 1 if unmatched else 0


def _roster(lms: str, path: Path):
    """The LMS's roster file, read (refused in one line when it is not that LMS's export)."""
    from grader.gradebook.rosters import RosterError, read_roster

    try:
        return read_roster(lms, path)
    except RosterError as error:
        raise UsageError(str(error)) from None


def _groups(path: Path, roster):
    """The groups file, read (refused in one line when it is not a group set CSV)."""
    from grader.gradebook.rosters import RosterError, read_groups

    try:
        return read_groups(path, roster)
    except RosterError as error:
        raise UsageError(str(error)) from None


def _collect(args: argparse.Namespace) -> int:
    """Exit 1 when an entry of the download was not collected (each named, with why)."""
    import zipfile

    from grader.course.config import assignments
    from grader.gradebook.config import open_course
    from grader.gradebook.downloads import collect

    if args.assignment not in assignments():
        raise UsageError(unknown("assignment", args.assignment, assignments(), "in this course"))
    if not zipfile.is_zipfile(args.download):
        raise UsageError(f"{args.download} is not a zip file (the LMS's submission download)")
    roster = _roster(args.lms, args.roster) if args.roster else None
    groups = _groups(args.groups, roster) if args.groups else None
    course = open_course(args.course)
    done = collect(args.download, args.assignment, course, args.lms, roster, groups)
    for student, entry in done.students.items():
        print(f"  {student}: {entry}")
    if done.skipped:
        print("NOT COLLECTED (fix the name or the roster, then run again):")
        print(*(f"  {why}" for why in done.skipped), sep="\n")
    submitted = Layout.of(args.course).submitted
    print(f"Collected {len(done.students)} students into {submitted}.")
    return 1 if done.skipped else 0


def _roster_command(args: argparse.Namespace) -> int:
    from grader.gradebook.rosters import nbgrader_roster, write_csv

    write_csv(args.csv, nbgrader_roster(_roster(args.lms, args.roster)))
    print(f"nbgrader's roster written to {args.csv}: `nbgrader db student import {args.csv}`")
    return 0


def _report(args: argparse.Namespace) -> int:
    from grader.publish.class_report import write_reports

    course = _graded_course(args.course)
    pages = write_reports(course, _students(course), args.out or args.course / "reports")
    for page in pages:
        print("Report:", page)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from grader.autograde import autograde
    from grader.course import Course
    from grader.grading.sandbox import available as sandbox_available
    from grader.publish.feedback import write_csv, write_feedback
    from grader.release.demo import PROFILES, write_class, written_answers_note

    source = _source(args)
    out = args.out.resolve()
    submissions = write_class(out / "submissions")
    course = Course(out / "course", source)
    students = sorted(PROFILES)
    if not sandbox_available():  # the sample class is our own code: safe to run unsandboxed
        print("bubblewrap is not installed: grading the sample class without the sandbox.")
        args.unsafe_no_sandbox = True
    sandbox, limits = _isolation(args, source)
    print(f"Grading a sample class of {len(students)} students ({submissions}) ...")
    outcomes = autograde(submissions, course, args.jobs, None, limits, sandbox)
    print()
    status = _summary(outcomes, course)
    print()
    for student in students:
        print(f"  {student}: {PROFILES[student].description}")
    print(written_answers_note(source))
    print()
    print("Grades CSV:  ", write_csv(course, out / "grades.csv"))
    folder, problems = write_feedback(course, students, args.jobs, progress=True)
    for problem in problems:
        print(problem)
    print("Feedback:    ", folder)
    print("Gradebook:   ", course.gradebook)
    return status


def _serve(args: argparse.Namespace) -> int:
    """Serve until stopped (SIGINT, SIGTERM): exit 0."""
    import signal
    import threading

    from grader.course import CannotStart, Course
    from grader.gradebook.config import course_settings
    from grader.serve.queue import Grading
    from grader.serve.service import InProcess, Queued, Service

    course = _served_course(args.course)
    source = _source(args)
    if args.broker:
        grader = Queued(args.broker)
    else:
        grader = InProcess(Grading(source, *_isolation(args, source)))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    where = f"the workers on {args.broker}" if args.broker else "this process"
    print(f"grader serve: grading {course.root}'s submissions through {where}", file=sys.stderr)
    try:
        Service(Course(course.root, source), course_settings(course.root), grader).run(stop)
    except CannotStart as error:
        print(f"grader: {error}", file=sys.stderr)
        return 2
    return 0


def _status(args: argparse.Namespace) -> int:
    import json

    from grader.serve.service import status_file, workers_on

    path = status_file(_served_course(args.course))
    if not path.is_file():
        raise UsageError(f"{args.course} has not been served: run `grader serve --course` first")
    status = json.loads(path.read_text())
    last = status["last_graded"]
    print(f"as of {status['updated']}:")
    print(f"  queue: {status['queue']} waiting, {status['in_flight']} being graded")
    if "broker" in status:
        workers = workers_on(status["broker"])
        print(f"  workers: {len(workers)} answering on {status['broker']} {' '.join(workers)}")
    else:
        print(f"  workers: {status['workers']}")
    print(f"  graded: {status['graded']}")
    if last:
        print(
            f"  last graded: {last['student']}/{last['assignment']} at {last['at']}: "
            f"{last['score']:g} of {last['max_score']:g}"
        )
    print(f"  failures (being retried): {len(status['failures'])}")
    for name, cause in status["failures"].items():
        print(f"    {name}: {cause}")
    return 0


def _served_course(root: Path):
    """A `grader init` course folder (its nbgrader_config.py names the exchange)."""
    from grader.course import Course

    _refuse_an_older_config(root)
    if not (root / "nbgrader_config.py").is_file():
        raise UsageError(
            f"{root} is not a course folder (no nbgrader_config.py): see `grader init`"
        )
    return Course(root)


def _check(args: argparse.Namespace) -> int:
    from grader.course.intake import read_notebook
    from grader.grading.self_check import check_notebook

    notebook = args.notebook.absolute()  # read as <folder>/<assignment>/<notebook>, even bare
    try:
        read_notebook(notebook)
    except ValueError as error:
        raise UsageError(f"cannot check {args.notebook}: {error}") from None
    return check_notebook(notebook)


def _number(convert: Callable[[str], float], accepts: Callable[[float], bool], wording: str):
    """An argparse type: `convert(text)` if it `accepts` the value, else "must be <wording>"."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not accepts(value):
            raise argparse.ArgumentTypeError(f"must be {wording}, not {text!r}")
        return value

    return parse


_seed = _number(int, lambda v: v >= 0, "a whole number, 0 or more")
_jobs = _number(int, lambda v: v >= 1, "a whole number, 1 or more")
_seconds = _number(float, lambda v: 0 < v < math.inf, "a number of seconds above 0")


def _grading_options(timeout: float) -> argparse.ArgumentParser:
    """The options of every command that grades; each command gets its own copy, so one
    command's default never becomes another's (argparse shares a parent's option objects)."""
    grading = argparse.ArgumentParser(add_help=False, parents=[_source_option(), _jobs_option()])
    grading.add_argument(
        "--timeout",
        type=_seconds,
        default=timeout,
        help="seconds allowed per exercise (default: %(default)g)",
    )
    grading.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run student code without bubblewrap (only for code you trust)",
    )
    return grading


def _option(flag: str, **how) -> argparse.ArgumentParser:
    """A parent parser holding the one option `flag` (`how`: argparse's `add_argument`
    keywords), for the commands that share it; a new one per call, for the reason above."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(flag, **how)
    return parent


def _jobs_option() -> argparse.ArgumentParser:
    return _option("--jobs", type=_jobs, default=None, help="parallel jobs (default: one per core)")


def _source_option() -> argparse.ArgumentParser:
    return _option(
        "--source",
        type=Path,
        metavar="PATH",
        default=None,
        help="the course's source notebooks, <assignment>/<assignment>.ipynb with solutions and "
        "hidden tests (default: the course folder's source/ if it has one, else solutions/ of "
        "the checkout this grader runs from; an installed grader holds none)",
    )


def _course_option() -> argparse.ArgumentParser:
    return _option(
        "--course",
        type=Path,
        default=None,
        help="the course folder: gradebook, results, feedback (default: the current folder "
        f"when it holds an nbgrader_config.py, as nbgrader finds it; else {DEFAULT_COURSE})",
    )


def course_folder(named: Path | None, cwd: Path | None = None) -> Path:
    """The course folder a command works on: the one named, else the current folder when it
    holds an nbgrader_config.py (nbgrader's own commands read that one), else DEFAULT_COURSE."""
    from grader.gradebook.config import CONFIG_FILE

    if named is not None:
        return named
    here = cwd or Path.cwd()
    return Path(".") if (here / CONFIG_FILE).is_file() else DEFAULT_COURSE


def _narrowing_options(verb: str) -> argparse.ArgumentParser:
    """--student and --assignment, each repeatable, for a command that would `verb` them all;
    a name that is none of them is refused (`unknown`)."""
    narrowing = argparse.ArgumentParser(add_help=False)
    narrowing.add_argument(
        "--student", action="append", metavar="ID", help=f"{verb} only this student (repeatable)"
    )
    narrowing.add_argument(
        "--assignment",
        action="append",
        metavar="NAME",
        help=f"{verb} only this assignment (repeatable; default: every released one)",
    )
    return narrowing


def _command(
    commands, name: str, run: Callable[[argparse.Namespace], int], **how
) -> argparse.ArgumentParser:
    """The subcommand `name`, which `run` carries out; `how` is argparse's `add_parser` keywords
    (help, description, parents)."""
    command = commands.add_parser(name, **how)
    command.set_defaults(run=run)
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    init = _command(
        commands,
        "init",
        _init,
        parents=[_source_option()],
        help="make a new nbgrader course folder for this course",
        description="COURSE gets source/ (the solution notebooks with their hidden tests) and "
        "an nbgrader_config.py under which every nbgrader command run there (formgrader "
        "included) uses one gradebook and grades through the course's sandboxed checks.",
    )
    init.add_argument("course", type=Path, metavar="COURSE", help="the folder to create")

    release = _command(
        commands,
        "release",
        _release,
        help="regenerate notebooks/ and normcheck/data/ from solutions/",
    )
    release.add_argument(
        "--check", action="store_true", help="only compare; exit 1 naming stale files"
    )
    release.add_argument(
        "--student-wheel",
        type=Path,
        metavar="DIR",
        help="also build the students' wheel (what the notebooks import, no answers) into DIR",
    )

    autograde = _command(
        commands,
        "autograde",
        _autograde,
        parents=[_course_option(), _grading_options(EXERCISE_SECONDS), _narrowing_options("grade")],
        help="grade every student × notebook under SUBMISSIONS into nbgrader's gradebook",
        description="SUBMISSIONS holds <student>/<assignment>/<assignment>.ipynb. Re-running "
        "skips submissions already graded and unchanged; a broken notebook is reported for its "
        "student and the batch goes on.",
    )
    autograde.add_argument(
        "submissions",
        type=Path,
        nargs="?",
        help="<student>/<assignment>/<assignment>.ipynb; read, never written (default: the "
        "course's own submitted/, where `nbgrader collect` puts them)",
    )
    autograde.add_argument(
        "--seed", type=_seed, default=None, help="fix the hidden inputs (default: random)"
    )
    autograde.add_argument(
        "--force",
        action="store_true",
        help="grade again even what is unchanged since it was recorded (and, if the gradebook "
        "was lost, grade everything into a new one)",
    )

    _command(
        commands,
        "feedback",
        _feedback,
        parents=[_course_option(), _jobs_option()],
        help="HTML feedback per student × graded notebook",
        description="nbgrader's feedback pages (feedback/<student>/<assignment>/, what "
        "`nbgrader release_feedback` releases), hidden tests removed, rendered from the "
        "recorded grades, a TA's included; a page whose notebook and grades are unchanged "
        "since it was written is kept.",
    )

    export = _command(
        commands,
        "export",
        _export,
        parents=[_course_option(), _narrowing_options("export")],
        help="a grades CSV an LMS can import",
        description="Every released assignment. By default, one row per student of nbgrader's "
        "roster (student_id, last_name, first_name, email), one column per assignment headed "
        "'<assignment> (<points> pts)', and the total; an assignment not handed in scores 0 "
        "(`nbgrader export --exporter grader.gradebook.lms.LmsCsvExport`). With --lms canvas "
        "or moodle, the file that LMS's grade import reads, one row per student of its roster "
        "(--roster); exit 1 naming the graded students the roster lacks.",
    )
    export.add_argument(
        "--csv", type=Path, default=Path("grades.csv"), help="where to write (default: %(default)s)"
    )
    export.add_argument(
        "--lms",
        choices=["nbgrader", "canvas", "moodle"],
        default="nbgrader",
        help="the file's format: nbgrader's roster and columns (default), or the named LMS's "
        "grade import, for the students of its own roster (--roster)",
    )
    export.add_argument(
        "--roster",
        type=Path,
        metavar="FILE",
        help="the LMS's gradebook export (Canvas: Grades → Export; Moodle: Grades → Export → "
        "Plain text file): its students, ids and columns",
    )

    collect = _command(
        commands,
        "collect",
        _collect,
        parents=[_course_option()],
        help="an LMS's submission download into the course's submitted/",
        description="Each student's latest submission of ASSIGNMENT in DOWNLOAD (the zip "
        "Canvas's or Moodle's 'Download submissions' gives, wherever it is), by the names the "
        "LMS gives: resubmissions, late markers (timestamped one second after the due date), "
        "Moodle's folders, a group's submission for each member (--groups). Ids come from the "
        "roster (--roster) or the LMS's own ids; a name "
        "that matches nothing, an unsafe entry or an id nbgrader cannot store is listed and "
        "skipped for its student only (exit 1).",
    )
    collect.add_argument("assignment", metavar="ASSIGNMENT")
    collect.add_argument("download", type=Path, metavar="DOWNLOAD", help="the LMS's zip")
    collect.add_argument("--lms", choices=["canvas", "moodle"], required=True)
    collect.add_argument(
        "--roster", type=Path, metavar="FILE", help="the LMS's gradebook export (its ids)"
    )
    collect.add_argument(
        "--groups",
        type=Path,
        metavar="FILE",
        help="for a group assignment: Canvas's group set CSV (group_name and each member's "
        "canvas_user_id, login_id or user_id); a group's submission goes to every member",
    )

    roster = _command(
        commands,
        "roster",
        _roster_command,
        help="an LMS's roster as the CSV `nbgrader db student import` reads",
        description="Reads the LMS's gradebook export (Canvas's or Moodle's) and writes its "
        "students (nbgrader id, first and last name, email) for `nbgrader db student import`. "
        "The nbgrader id is Canvas's SIS Login ID (else its user ID), Moodle's ID number "
        "(else the email address).",
    )
    roster.add_argument("lms", choices=["canvas", "moodle"])
    roster.add_argument("roster", type=Path, metavar="FILE", help="the LMS's gradebook export")
    roster.add_argument(
        "--csv",
        type=Path,
        default=Path("students.csv"),
        help="where to write (default: %(default)s)",
    )

    report = _command(
        commands,
        "report",
        _report,
        parents=[_course_option()],
        help="the instructor's report: an HTML page per assignment",
        description="Per assignment handed in: the class's score distribution, each "
        "exercise's mean and difficulty, and the mistakes the checks diagnosed most often in "
        "each exercise, with counts.",
    )
    report.add_argument(
        "--out", type=Path, default=None, help="where the pages go (default: the course's reports/)"
    )

    demo = _command(
        commands,
        "demo",
        _demo,
        parents=[_grading_options(DEMO_EXERCISE_SECONDS)],
        help="grade the bundled sample class end to end and show the results",
    )
    demo.add_argument(
        "--out",
        type=Path,
        default=REPO / "build" / "demo",
        help="where the class, course, CSV and feedback go (default: %(default)s)",
    )

    serve = _command(
        commands,
        "serve",
        _serve,
        parents=[_course_option(), _grading_options(EXERCISE_SECONDS)],
        help="grade each submission as it reaches the exchange, and release its feedback",
        description="Watches the course's exchange inbound; collects, grades (sandboxed) and "
        "records each submission, then releases that student's feedback (nbgrader "
        "fetch_feedback). On start it catches up on everything submitted since it last ran. "
        "Policy: c.GradeOnSubmit in the course's nbgrader_config.py.",
    )
    serve.add_argument(
        "--broker",
        metavar="URL",
        default=None,
        help="grade through Celery workers on this Redis broker, e.g. redis://host:6379/0 "
        "(default: grade in this process)",
    )

    _command(
        commands,
        "status",
        _status,
        parents=[_course_option()],
        help="what `grader serve` is doing: queue, workers, last graded, failures",
    )

    check = _command(
        commands,
        "check",
        _check,
        help="run one notebook's visible checks and say, per exercise, what is wrong",
    )
    check.add_argument("notebook", type=Path, help="path to your .ipynb")
    return parser


def main(argv: list[str] | None = None) -> int:
    from grader.gradebook.config import CourseConfigError

    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter from nbgrader's ORM
    if "course" in args and args.command != "init":
        args.course = course_folder(args.course)
    try:
        return args.run(args)
    except (UsageError, CourseConfigError) as error:
        print(f"grader {args.command}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
