"""The instructor's command line: defaults as documented, bad input refused before anything
runs, and every autograde run ending with what was not graded in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.cli import DEFAULT_COURSE, DEMO_TIMEOUT, main
from grader.config import REPO
from grader.submission import DEFAULT_LIMITS

# (command with its required arguments, option's dest, default from its one source of truth)
DEFAULTS = [
    (["autograde", "SUB"], "course", DEFAULT_COURSE),
    (["autograde", "SUB"], "timeout", DEFAULT_LIMITS.wall_seconds),
    (["autograde", "SUB"], "jobs", None),
    (["autograde", "SUB"], "seed", None),
    (["autograde", "SUB"], "unsafe_no_sandbox", False),
    (["feedback"], "course", DEFAULT_COURSE),
    (["export"], "course", DEFAULT_COURSE),
    (["export"], "csv", Path("grades.csv")),
    (["demo"], "timeout", DEMO_TIMEOUT),
    (["demo"], "jobs", None),
    (["demo"], "out", REPO / "build" / "demo"),
    (["release"], "check", False),
]


def parsed(argv: list[str]) -> dict:
    from grader.cli import build_parser

    return vars(build_parser().parse_args(argv))


def help_of(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    assert stop.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines anywhere


@pytest.mark.parametrize(("argv", "dest", "expected"), DEFAULTS)
def test_each_default_is_its_one_source_and_what_its_help_says(argv, dest, expected, capsys):
    assert parsed(argv)[dest] == expected
    if expected not in (None, False):  # options off by default say what they do instead
        shown = f"{expected:g}" if isinstance(expected, float | int) else str(expected)
        assert f"(default: {shown})" in help_of(argv[0], capsys)


def test_the_demos_shorter_timeout_does_not_leak_into_autograde():
    assert DEMO_TIMEOUT != DEFAULT_LIMITS.wall_seconds  # else the test below proves nothing
    assert parsed(["demo"])["timeout"] == DEMO_TIMEOUT
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
