"""What every benchmark prints besides its numbers: the machine, the load, and markdown tables.

The machine is shared with other people's jobs, so a number means little without the load it
was measured under: every script records the 1-minute load average next to each measurement.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


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


def bench_parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's parser: its docstring's first paragraph, then its options with defaults."""
    return argparse.ArgumentParser(
        description=doc.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
