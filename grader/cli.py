"""The course's command line (`grader <command> --help` for each): release, autograde,
feedback, export, demo for instructors; check for students."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from grader.config import REPO

DEFAULT_COURSE = Path("course")
SANDBOX_PROCESSES = 64  # per sandbox uid: processes and threads a student's code may hold


def _release(args: argparse.Namespace) -> int:
    _use_source(args)  # an installed grader has no solutions/ to release from
    from grader.release import generate, stale_files

    if args.check:
        stale = stale_files()
        if stale:
            print(
                "notebooks/ is stale; run `grader release` and commit.",
                "Differs:",
                *stale,
                sep="\n  ",
            )
            return 1
        print("notebooks/ matches solutions/.")
        return 0
    generate()
    print("Regenerated notebooks/ from solutions/.")
    return 0


def _use_source(args: argparse.Namespace) -> None:
    """Work from --source (default: the checkout's solutions/); one line, exit 2, and nothing
    created when it does not hold this course's source notebooks."""
    from grader.config import MissingSource, use_source

    try:
        use_source(getattr(args, "source", None))
    except MissingSource as error:
        print(f"grader {args.command}: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def _isolation(args: argparse.Namespace):
    """The sandbox and limits to grade with; refuses (exit 2) when bubblewrap is missing unless
    the instructor explicitly accepts running student code unsandboxed."""
    from grader.sandbox import Sandbox, SandboxUnavailable
    from grader.submission import Limits

    limits = Limits(wall_seconds=args.timeout)
    if args.unsafe_no_sandbox:
        return None, limits
    try:
        sandbox = Sandbox()
    except SandboxUnavailable as error:
        raise SystemExit(f"grader: {error}") from None
    return sandbox, Limits(wall_seconds=args.timeout, processes=SANDBOX_PROCESSES)


def _autograde(args: argparse.Namespace) -> int:
    """Exit 0 when every notebook is graded and recorded, 1 when some are not (listed), 2 when
    the run is refused, 128 + N when stopped by signal N."""
    from grader.autograde import Course, Interrupted, Refused, autograde

    _use_source(args)
    sandbox, limits = _isolation(args)
    course = Course(args.course)
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
    except Refused as error:
        print(f"grader: {error}", file=sys.stderr)
        return 2
    except Interrupted as stop:
        print(
            f"\ngrader: {stop}: the runners were stopped; notebooks recorded before it keep "
            "their grades, the others were not graded. Run the same command again to finish.",
            file=sys.stderr,
        )
        return 128 + stop.signum
    skipped = sum(o.skipped for o in outcomes)
    failed = [o for o in outcomes if o.problem]
    for o in failed:
        print(f"{o.task.student}: {o.task.assignment} could not be recorded: {o.problem}")
    graded = len(outcomes) - skipped - len(failed)
    print(
        f"{graded} graded, {skipped} unchanged since the last run (skipped), "
        f"{len(failed)} not graded."
    )
    if any(o.grader_fault for o in failed):
        print("Grader errors are not grades: fix the cause named above and run again.")
    return 1 if failed else 0


def _students(course: Path) -> list[str]:
    results = course / "results"
    return sorted(p.name for p in results.iterdir() if p.is_dir()) if results.is_dir() else []


def _lost_gradebook(course) -> bool:
    """Say so when the gradebook is gone (nbgrader would silently start an empty one)."""
    problem = course.gradebook_problem()
    if problem:
        print(f"grader: {problem}; restore it, or run `grader autograde --force`.", file=sys.stderr)
    return bool(problem)


def _feedback(args: argparse.Namespace) -> int:
    from grader.autograde import Course
    from grader.report import write_feedback

    course = Course(args.course)
    if _lost_gradebook(course):
        return 2
    folder, problems = write_feedback(course, _students(args.course))
    for problem in problems:
        print(problem)
    print("Feedback written to", folder)
    return 1 if problems else 0


def _export(args: argparse.Namespace) -> int:
    from grader.autograde import Course
    from grader.report import write_csv

    course = Course(args.course)
    if _lost_gradebook(course):
        return 2
    print("Grades written to", write_csv(course, _students(args.course), args.csv))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from grader.autograde import Course, autograde
    from grader.demo import PROFILES, write_class
    from grader.report import format_table, write_csv, write_feedback
    from grader.sandbox import available as sandbox_available

    _use_source(args)
    out = args.out.resolve()
    submissions = write_class(out / "submissions")
    course = Course(out / "course")
    students = sorted(PROFILES)
    if not sandbox_available():  # the sample class is our own code: safe to run unsandboxed
        print("bubblewrap is not installed: grading the sample class without the sandbox.")
        args.unsafe_no_sandbox = True
    sandbox, limits = _isolation(args)
    print(f"Grading a sample class of {len(students)} students ({submissions}) ...")
    outcomes = autograde(submissions, course, args.jobs, None, limits, sandbox)
    print()
    print(format_table(course, students))
    for o in outcomes:
        if o.problem:
            print(f"{o.task.student}: {o.task.assignment} could not be recorded: {o.problem}")
    print()
    for student in students:
        print(f"  {student}: {PROFILES[student].description}")
    print()
    print("Grades CSV:  ", write_csv(course, students, out / "grades.csv"))
    folder, problems = write_feedback(course, students)
    for problem in problems:
        print(problem)
    print("Feedback:    ", folder)
    print("Gradebook:   ", course.root / "gradebook.db")
    return 0


def _check(args: argparse.Namespace) -> int:
    from grader.student import check_notebook

    return check_notebook(args.notebook)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser("release", help="regenerate notebooks/ from solutions/")
    release.add_argument(
        "--check", action="store_true", help="only compare; exit 1 naming stale files"
    )
    release.set_defaults(run=_release)

    course = argparse.ArgumentParser(add_help=False)
    course.add_argument(
        "--course",
        type=Path,
        default=DEFAULT_COURSE,
        help="grading working dir (gradebook, results, feedback)",
    )
    grading = argparse.ArgumentParser(add_help=False)
    grading.add_argument(
        "--jobs", type=int, default=None, help="parallel jobs (default: one per core)"
    )
    grading.add_argument("--timeout", type=float, default=60, help="seconds allowed per exercise")
    grading.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run student code without bubblewrap (only for code you trust)",
    )
    grading.add_argument(
        "--source",
        type=Path,
        metavar="PATH",
        default=None,
        help="the course's source notebooks, <assignment>/<assignment>.ipynb with solutions and "
        "hidden tests (default: solutions/ of the checkout this grader runs from; an installed "
        "grader holds none)",
    )

    autograde = commands.add_parser(
        "autograde",
        parents=[course, grading],
        help="grade every student × notebook under SUBMISSIONS into nbgrader's gradebook",
        description="SUBMISSIONS holds <student>/<assignment>/<assignment>.ipynb. Re-running "
        "skips submissions already graded and unchanged; a broken notebook is reported for its "
        "student and the batch goes on.",
    )
    autograde.add_argument("submissions", type=Path)
    autograde.add_argument(
        "--seed", type=int, default=None, help="fix the hidden inputs (default: random)"
    )
    autograde.add_argument(
        "--force",
        action="store_true",
        help="grade again even what is unchanged since it was recorded (and, if the gradebook "
        "was lost, grade everything into a new one)",
    )
    autograde.add_argument(
        "--student", action="append", metavar="ID", help="grade only this student (repeatable)"
    )
    autograde.add_argument(
        "--assignment",
        action="append",
        metavar="NAME",
        help="grade only this notebook (repeatable)",
    )
    autograde.set_defaults(run=_autograde)

    feedback = commands.add_parser("feedback", parents=[course], help="HTML feedback per student")
    feedback.set_defaults(run=_feedback)

    export = commands.add_parser("export", parents=[course], help="a grades CSV an LMS can import")
    export.add_argument("--csv", type=Path, default=Path("grades.csv"))
    export.set_defaults(run=_export)

    demo = commands.add_parser(
        "demo",
        parents=[grading],
        help="grade the bundled sample class end to end and show the results",
    )
    demo.add_argument("--out", type=Path, default=REPO / "build" / "demo")
    demo.set_defaults(run=_demo, timeout=15)

    check = commands.add_parser(
        "check", help="run one notebook's visible checks and say, per exercise, what is wrong"
    )
    check.add_argument("notebook", type=Path, help="path to your .ipynb")
    check.set_defaults(run=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    warnings.filterwarnings("ignore", module="nbgrader")  # SQLAlchemy chatter from nbgrader's ORM
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
