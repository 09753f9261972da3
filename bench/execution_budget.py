"""The course's execution budget: how long each solution notebook takes to run, cell by cell, and
(optionally) how long `make test` takes, in this checkout and from a fresh clone.

Each notebook is executed with nbclient in a kernel of this environment, in a scratch copy of its
folder (so nothing is written into solutions/). Cells are split into the part grading needs
(the imports cell, answer cells, test cells) and the experiments (everything else): stock
nbgrader executes both, our grader neither in a kernel, so the split is the ceiling of what
skipping experiments can save.

`make test` and the fresh clone take many minutes and both cores; they run only when asked and
when the 1-minute load is below --max-load (others share this machine), unless --force.

    .venv/bin/python bench/execution_budget.py [options]

"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.utils import is_grade, is_solution

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    REPO,
    bench_parser,
    load_1min,
    markdown_table,
    median_and_spread,
    print_header,
    progress,
    wait_for_quiet,
)

from grader.course import SETUP_ID, grade_id, notebook_path
from grader.course.config import SOLUTIONS, assignments, use_this_environment


@dataclass
class CellTime:
    index: int
    label: str  # the nbgrader grade_id, or the cell's first line
    role: str  # "graded" (imports, answer, test) or "experiment"
    seconds: float


@dataclass
class Execution:
    """One run of one notebook: kernel start-up, then every code cell."""

    kernel_start: float = 0.0
    cells: list[CellTime] = field(default_factory=list)
    total: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    errors: int = 0

    def seconds(self, role: str) -> float:
        return sum(c.seconds for c in self.cells if c.role == role)

    def between_cells(self) -> float:
        """Kernel shut-down, messaging and markdown cells: what is neither start-up nor code."""
        return self.total - self.kernel_start - sum(c.seconds for c in self.cells)


def role_of(cell: nbformat.NotebookNode) -> str:
    """What grading needs: the locked imports, every answer cell, every test cell."""
    needed = grade_id(cell) == SETUP_ID or is_solution(cell) or is_grade(cell)
    return "graded" if needed else "experiment"


def label_of(cell: nbformat.NotebookNode) -> str:
    if grade_id(cell):
        return grade_id(cell)
    first = next((line for line in cell.source.splitlines() if line.strip()), "")
    return first[:40].replace("|", "\\|")


def execute_notebook(assignment: str, timeout: int) -> Execution:
    """Run the solution notebook top to bottom, timing kernel start-up and each code cell."""
    notebook = nbformat.read(notebook_path(SOLUTIONS, assignment), as_version=4)
    run = Execution(load_before=load_1min())
    started: dict[int, float] = {}

    def on_execute(cell, cell_index: int) -> None:
        started[cell_index] = time.perf_counter()

    def on_executed(cell, cell_index: int, execute_reply) -> None:
        elapsed = time.perf_counter() - started[cell_index]
        run.cells.append(CellTime(cell_index, label_of(cell), role_of(cell), elapsed))
        run.errors += execute_reply["content"]["status"] == "error"

    with tempfile.TemporaryDirectory(prefix=f"budget-{assignment}-") as scratch:
        client = NotebookClient(
            notebook,
            timeout=timeout,
            kernel_name="python3",
            allow_errors=True,
            resources={"metadata": {"path": scratch}},
            on_cell_execute=on_execute,
            on_cell_executed=on_executed,
        )
        begin = time.perf_counter()
        with client.setup_kernel():
            run.kernel_start = time.perf_counter() - begin
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
        run.total = time.perf_counter() - begin
    run.load_after = load_1min()
    return run


def notebook_rows(runs: dict[str, list[Execution]]) -> list[list[object]]:
    rows = []
    for assignment, executions in runs.items():
        _, index, label, _, seconds = slowest_cells({assignment: executions}, 1)[0]
        rows.append(
            [
                assignment,
                median_and_spread([e.total for e in executions]),
                median_and_spread([e.kernel_start for e in executions]),
                median_and_spread([e.seconds("graded") for e in executions]),
                median_and_spread([e.seconds("experiment") for e in executions]),
                median_and_spread([e.between_cells() for e in executions]),
                f"cell {index} {label}: {seconds} s",
                max(e.errors for e in executions),
                _loads(executions),
            ]
        )
    return rows


def _loads(executions: list[Execution]) -> str:
    return ", ".join(f"{e.load_before:.1f}→{e.load_after:.1f}" for e in executions)


def slowest_cells(runs: dict[str, list[Execution]], top: int) -> list[list[object]]:
    """The `top` slowest cells course-wide, median over runs."""
    medians = []
    for assignment, executions in runs.items():
        for cell in executions[0].cells:
            times = [c.seconds for e in executions for c in e.cells if c.index == cell.index]
            medians.append((statistics.median(times), assignment, cell))
    medians.sort(key=lambda m: m[0], reverse=True)
    return [[a, c.index, f"`{c.label}`", c.role, f"{s:.2f}"] for s, a, c in medians[:top]]


LOGS = REPO / "build" / "bench"


def timed_make_test(
    cwd: Path, log: str, env: dict[str, str] | None = None, reuse_venv: bool = False
) -> tuple[float, int, str]:
    """Wall time, exit code and pytest's summary line of `make test` in `cwd`, its whole output
    kept in build/bench/`log` (a scratch clone is gone afterwards), and on failure the first
    failing tests. With `reuse_venv` the venv's install step is skipped (`make -o`): in the
    shared checkout it would reinstall into the .venv other people are testing with; the fresh
    clone measures installing."""
    command = ["make", "-o", ".venv/.installed-stamp", "test"] if reuse_venv else ["make", "test"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    output = done.stdout + done.stderr
    LOGS.mkdir(parents=True, exist_ok=True)
    (LOGS / log).write_text(output)
    lines = output.strip().splitlines()
    summary = next((line for line in reversed(lines) if " in " in line and "=" in line), "")
    summary = summary.strip("= ") or (lines[-1] if lines else "")
    failed = [line.split(" - ")[0] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    if failed:
        summary += f"; first: {', '.join(failed[:3])} (all in build/bench/{log})"
    return elapsed, done.returncode, summary


def fresh_clone_make_test() -> tuple[float, int, str]:
    """`git clone` this repository into a scratch folder and run `make test` there: what a new
    contributor waits for (venv creation and every install included). Only committed work is
    cloned, so colleagues' uncommitted changes are not measured."""
    with tempfile.TemporaryDirectory(prefix="fresh-clone-") as scratch:
        # mkdtemp makes the folder private (mode 700); a clone made by hand is not, and the
        # sandbox's unprivileged runner must read the course code (it refuses otherwise).
        Path(scratch).chmod(0o755)
        start = time.perf_counter()
        subprocess.run(["git", "clone", "--quiet", str(REPO), scratch], check=True)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(REPO))
        )
        _, code, summary = timed_make_test(Path(scratch), "fresh-clone.log", env)
        return time.perf_counter() - start, code, summary


def _make_test_here() -> tuple[float, int, str]:
    return timed_make_test(REPO, "make-test.log", reuse_venv=True)


def quiet_enough(max_load: float, patience: float, force: bool) -> bool:
    """Whether the 1-minute load is (or, within `patience` seconds, becomes) at most max_load."""
    return force or wait_for_quiet(max_load, patience, time.sleep) <= max_load


def long_runs(args: argparse.Namespace) -> list[list[object]]:
    """The two long measurements, or why they were not taken and how to take them."""
    rows = []
    here = (
        "`make test` in this checkout (venv already set up)",
        args.make_test,
        "--make-test",
        _make_test_here,
    )
    clone = (
        "fresh clone → passing `make test`",
        args.fresh_clone,
        "--fresh-clone",
        fresh_clone_make_test,
    )
    wanted = [here, clone]
    for name, asked, flag, measure in wanted:
        command = f".venv/bin/python bench/execution_budget.py --runs 0 {flag}"
        if not asked:
            rows.append([name, "not measured in this session", "", "", f"`{command}`"])
            continue
        if not quiet_enough(args.max_load, args.patience, args.force):
            load = load_1min()
            reason = f"not measured in this session: load {load:.2f} > {args.max_load}"
            rows.append([name, reason, "", f"{load:.2f}", f"`{command}`"])
            continue
        load = load_1min()
        progress(f"{name} ...")
        seconds, code, summary = measure()
        verdict = "passed" if code == 0 else f"FAILED (exit {code})"
        load_text = f"{load:.2f}→{load_1min():.2f}"
        rows.append(
            [name, f"{seconds / 60:.1f} min", f"{verdict}: {summary}", load_text, f"`{command}`"]
        )
    return rows


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument(
        "--runs", type=int, default=3, help="executions per notebook (median); 0: skip"
    )
    parser.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    parser.add_argument("--top", type=int, default=8, help="slowest cells to list")
    parser.add_argument("--make-test", action="store_true", help="also time `make test` here")
    parser.add_argument(
        "--fresh-clone", action="store_true", help="also time clone → passing `make test`"
    )
    parser.add_argument(
        "--max-load", type=float, default=1.0, help="skip the long runs above this 1-min load"
    )
    parser.add_argument(
        "--patience", type=float, default=600.0, help="seconds to wait for the load to drop"
    )
    parser.add_argument("--force", action="store_true", help="run the long runs whatever the load")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    use_this_environment()  # the kernelspec starts `python` from PATH: it must be this venv's

    print_header("Execution budget")
    if args.runs > 0:
        report_notebooks(args)
    print("### `make test`\n")
    header = ["measurement", "wall time", "result", "load (1 min)", "command"]
    print(markdown_table(header, long_runs(args)))
    return 0


def report_notebooks(args: argparse.Namespace) -> None:
    runs: dict[str, list[Execution]] = {}
    for assignment in assignments():
        for i in range(args.runs):
            progress(f"{assignment}: run {i + 1}/{args.runs} ...")
            runs.setdefault(assignment, []).append(execute_notebook(assignment, args.timeout))

    print("### Solution notebooks, executed with nbclient (seconds, median (min–max) of runs)\n")
    header = [
        "notebook",
        "total s",
        "kernel start s",
        "graded cells s",
        "experiment cells s",
        "shut-down and messaging s",
        "slowest cell (median run)",
        "cells with errors",
        "load before→after each run",
    ]
    print(markdown_table(header, notebook_rows(runs)))
    totals = [sum(e[i].total for e in runs.values()) for i in range(args.runs)]
    print(f"\nAll notebooks, one after another: {median_and_spread(totals)} s.\n")
    print(f"### The {args.top} slowest cells\n")
    header = ["notebook", "cell", "label", "role", "median s"]
    print(markdown_table(header, slowest_cells(runs, args.top)))
    print()


if __name__ == "__main__":
    sys.exit(main())
