"""The instructor's command line: `grader <command> --help` for each command."""

from __future__ import annotations

import argparse
import sys


def _release(args: argparse.Namespace) -> int:
    from grader.release import generate, stale_files

    if args.check:
        stale = stale_files()
        if stale:
            print(
                "notebooks/ is stale; run `grader release` and commit. Differs:", *stale, sep="\n  "
            )
            return 1
        print("notebooks/ matches solutions/.")
        return 0
    generate()
    print("Regenerated notebooks/ from solutions/.")
    return 0


def _check(args: argparse.Namespace) -> int:
    from grader.student import check_notebook

    return check_notebook(args.notebook)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser(
        "release", help="regenerate notebooks/ (the student release) from solutions/"
    )
    release.add_argument(
        "--check", action="store_true", help="only compare; exit 1 naming stale files"
    )
    release.set_defaults(run=_release)

    check = commands.add_parser(
        "check", help="run one notebook's visible checks and say, per exercise, what is wrong"
    )
    check.add_argument("notebook", help="path to a student's .ipynb")
    check.set_defaults(run=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
