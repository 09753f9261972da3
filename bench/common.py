"""What every benchmark prints besides its numbers: the machine, the load, and markdown tables.

The machine is shared with other people's jobs, so a number means little without the load it
was measured under: every script records the 1-minute load average next to each measurement.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def options(doc: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """A benchmark's command line, as its docstring declares it.

    The description is the docstring's first paragraph; the options are the entries of its
    ``Options:`` section, so that ``--help`` and the docstring say the same. An entry is
    ``--name (type): help. Default: value`` (continued on lines indented further), where type is
    ``int``, ``float``, ``str`` or ``path``, followed by ``, one or more`` or ``, zero or more``
    for a list (its default: values separated by spaces). An entry without a type is a switch,
    off by default; a typed one without ``Default:`` is None when not given.

    Args:
        doc (str): the benchmark's module docstring.
        argv (sequence of str, optional): the arguments; None reads ``sys.argv``.

    Raises:
        ValueError: an entry of the ``Options:`` section is not of that form.
    """
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    for entry in _option_entries(doc):
        _add_option(parser, entry)
    return parser.parse_args(argv)


_TYPES: dict[str, Callable[[str], object]] = {"int": int, "float": float, "str": str, "path": Path}
_NARGS = {"one or more": "+", "zero or more": "*"}
_ENTRY = re.compile(
    r"(?P<flag>--[a-z][a-z0-9-]*)"
    r"(?: \((?P<type>\w+)(?:, (?P<count>one or more|zero or more))?\))?: (?P<help>.+)"
)
_DEFAULT = re.compile(r"Default: (?P<value>.+)$")


def _option_entries(doc: str) -> list[str]:
    """The entries of the docstring's ``Options:`` section, each joined into one line."""
    lines = doc.splitlines()
    if "Options:" not in lines:
        return []
    entries: list[str] = []
    indent = 0  # of the entry being read: its continuation lines are indented further
    for line in itertools.takewhile(str.strip, lines[lines.index("Options:") + 1 :]):
        text = line.strip()
        if text.startswith("--"):
            entries.append(text)
            indent = line.index(text)
        elif entries and line.index(text) > indent:
            entries[-1] += " " + text
        else:
            raise ValueError(f"Options: {text!r} is neither an option nor indented under one")
    return entries


def _add_option(parser: argparse.ArgumentParser, entry: str) -> None:
    match = _ENTRY.fullmatch(entry)
    if match is None:
        raise ValueError(f"an option reads `--name (type): help. Default: value`, not {entry!r}")
    flag, kind, count, text = match.group("flag", "type", "count", "help")
    help = text.replace("%", "%%")  # argparse formats help with %
    if kind is None:
        parser.add_argument(flag, action="store_true", help=help)
        return
    if kind not in _TYPES:
        raise ValueError(f"{flag}: type {kind!r} is none of {', '.join(_TYPES)}")
    convert, nargs = _TYPES[kind], _NARGS.get(count)
    default = _DEFAULT.search(text)
    value: object = None
    if default and nargs:
        value = [convert(word) for word in default["value"].split()]
    elif default:
        value = convert(default["value"])
    parser.add_argument(
        flag, type=convert, nargs=nargs, default=value, metavar=kind.upper(), help=help
    )


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ram_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return float("nan")


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as `uptime` prints them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def load_1min() -> float:
    return os.getloadavg()[0]


def git_revision() -> str:
    """The commit measured, marked dirty when the working tree differs (others edit it live)."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def torch_version() -> str:
    try:
        import torch
    except ImportError:
        return "not installed"
    return f"{torch.__version__} ({torch.get_num_threads()} intra-op threads by default)"


def machine_table() -> str:
    rows = [
        ("date", datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")),
        ("CPU", cpu_model()),
        ("cores", f"{os.cpu_count()} logical, {len(os.sched_getaffinity(0))} usable"),
        ("RAM", f"{ram_gib():.1f} GiB"),
        ("OS", platform.platform()),
        ("Python", sys.version.split()[0]),
        ("torch", torch_version()),
        ("commit", git_revision()),
        ("load average (1, 5, 15 min)", load_average()),
    ]
    return markdown_table(["machine", ""], rows)


def command_line() -> str:
    """How this run was started, relative to the repository, so it can be rerun as is."""
    script = Path(sys.argv[0]).resolve()
    try:
        script = script.relative_to(REPO)
    except ValueError:
        pass
    return " ".join([".venv/bin/python", str(script), *sys.argv[1:]])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def median_and_spread(values: Sequence[float], digits: int = 3) -> str:
    """'median (min–max, n=k)': the median is what we report; the range says how noisy it was."""
    if not values:
        return "not measured"
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:.{digits}g} (n=1)"
    return f"{med:.{digits}g} ({min(values):.{digits}g}–{max(values):.{digits}g}, n={len(values)})"


def print_header(title: str) -> None:
    print(f"## {title}\n")
    print(f"Command: `{command_line()}`\n")
    print(machine_table())
    print()


def progress(message: str) -> None:
    """Progress goes to stderr, so stdout stays a clean markdown report."""
    print(message, file=sys.stderr, flush=True)


def wait_for_quiet(max_load: float, patience_s: float, sleep: Callable[[float], None]) -> float:
    """Wait (up to `patience_s`) for the 1-minute load to drop below `max_load`; returns it.
    Timing while other people's test suites saturate both cores measures them, not us."""
    waited = 0.0
    while load_1min() > max_load and waited < patience_s:
        sleep(10)
        waited += 10
    return load_1min()
