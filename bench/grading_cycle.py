"""The whole grading cycle of a class, ours against stock nbgrader's, side by side in one run.

A cycle is what an instructor waits for between collecting a class and uploading its grades:
- ours: `grader autograde --jobs J` + `grader feedback --jobs J` + `grader export`;
- stock: `nbgrader autograde A` + `nbgrader generate_feedback A` for each assignment A +
  `nbgrader export`, in a course folder with the course's own nbgrader configuration and
  nbgrader's default preprocessors (see grading_throughput.py: every student notebook executed
  in a kernel, experiments included).
Both on the same generated class (honest students cycling through the demo profiles whose
notebooks run to completion), gradebooks prepared before the clock starts. Reported per student
× notebook: total, overhead (total minus the student's own code, timed in-process without the
grader) and the peak RSS of the largest process of each command (wait4's ru_maxrss), with the
load around each command. Ours at every `--students` size shows how the time grows with the
class; stock runs at `--stock-students` only (it executes every notebook: ~7 s each here).

Also: what a student's runner costs to start, started by bubblewrap for each student as
without pre-started runners, or forked from a pre-started one (one correct student's four
notebooks graded in this process, sandboxed; median of `--repeats`).

    .venv/bin/python bench/grading_cycle.py [options]

"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    bench_parser,
    load_1min,
    markdown_table,
    median_and_spread,
    print_header,
    progress,
)
from grading_throughput import (
    BIN,
    HONEST,
    SEED,
    STOCK,
    TIMEOUT_S,
    Measured,
    System,
    generated_profiles,
    grading_env,
    grading_workspace,
    mean_student_code_seconds,
    measure,
    recorded_scores,
    stock_course,
)

from grader.autograde import register_all
from grader.course import Course, notebook_path
from grader.course.config import assignments
from grader.course.intake import Submission
from grader.grading.grade import grade_in_one_runner
from grader.grading.prestarted import prestarted
from grader.grading.sandbox import Sandbox
from grader.release.demo import PROFILES, write_class

# The targets of the whole cycle: its speed-up over stock's at a class size, its seconds per
# student × notebook from a class size up, the peak RSS of its largest process.
RATIO_TARGETS = {8: 20, 64: 50}
PER_ITEM_TARGET = (200, 0.08)
MEMORY_TARGET_MB = 500


@dataclass
class Cycle:
    """One system's cycle on one class: each step's measured command(s)."""

    system: System
    students: int
    steps: dict[str, list[Measured]]

    @property
    def items(self) -> int:
        return self.students * len(assignments())

    def seconds(self, step: str | None = None) -> float:
        chosen = [self.steps[step]] if step else self.steps.values()
        return sum(m.seconds for measured in chosen for m in measured)

    def largest_rss_mb(self) -> float:
        return max(m.largest_rss_mb for measured in self.steps.values() for m in measured)

    def load(self) -> str:
        loads = [x for ms in self.steps.values() for m in ms for x in (m.load_before, m.load_after)]
        return f"{min(loads):.1f}–{max(loads):.1f}"

    def failed(self) -> list[str]:
        return [
            f"{step} exit status {m.returncode}"
            for step, measured in self.steps.items()
            for m in measured
            if m.returncode != 0
        ]


def stock_cycle(submissions: Path, root: Path, students: int) -> Cycle:
    env = grading_env()
    stock_course(root, submissions, env)  # generate_assignment: not timed
    nbgrader = str(BIN / "nbgrader")
    steps: dict[str, list[Measured]] = {"autograde": [], "feedback": [], "export": []}
    for step, command in (("autograde", "autograde"), ("feedback", "generate_feedback")):
        for assignment in assignments():
            progress(f"  stock nbgrader {command} {assignment} ...")
            steps[step].append(measure([nbgrader, command, assignment], root, env))
    progress("  stock nbgrader export ...")
    steps["export"].append(measure([nbgrader, "export"], root, env))
    return Cycle(STOCK, students, steps)


def ours_cycle(submissions: Path, root: Path, students: int, jobs: int) -> Cycle:
    register_all(Course(root))  # the gradebook's assignments: not timed, as for stock
    grader, course = str(BIN / "grader"), ["--course", str(root)]
    autograde = [grader, "autograde", str(submissions), *course, "--jobs", str(jobs)]
    autograde += ["--seed", str(SEED), "--timeout", str(TIMEOUT_S)]
    commands = {
        "autograde": autograde,
        "feedback": [grader, "feedback", *course, "--jobs", str(jobs)],
        "export": [grader, "export", *course, "--csv", str(root / "grades.csv")],
    }
    steps = {}
    for step, command in commands.items():
        progress(f"  grader {step} ({students} students) ...")
        steps[step] = [measure(command, root, grading_env())]
    return Cycle(System(jobs=jobs, sandboxed=True), students, steps)


def cycle_rows(cycles: list[Cycle], code_s: dict[int, float]) -> list[list[object]]:
    stock = {c.students: c for c in cycles if c.system.stock}
    rows = []
    for cycle in cycles:
        per_item = cycle.seconds() / cycle.items
        theirs = stock.get(cycle.students)
        ratio = (
            "—"
            if cycle.system.stock or not theirs
            else f"{theirs.seconds() / cycle.seconds():.1f}×"
        )
        name = "stock nbgrader" if cycle.system.stock else f"ours --jobs {cycle.system.jobs}"
        rows.append(
            [
                name + (f" ({', '.join(cycle.failed())})" if cycle.failed() else ""),
                f"{cycle.students} × {len(assignments())}",
                *(f"{cycle.seconds(step):.1f}" for step in ("autograde", "feedback", "export")),
                f"{cycle.seconds():.1f}",
                f"{per_item:.3f}",
                f"{per_item - code_s[cycle.students]:.3f}",
                ratio,
                f"{cycle.largest_rss_mb():.0f}",
                cycle.load(),
            ]
        )
    return rows


CYCLE_HEADER = [
    "system",
    "class",
    "autograde s",
    "feedback s",
    "export s",
    "cycle s",
    "s per student × notebook",
    "cycle overhead s per student × notebook",
    "cycle vs stock",
    "peak RSS, largest process MB",
    "load (1 min)",
]


def startup_rows(work: Path, repeats: int) -> list[list[object]]:
    """One correct student's notebooks graded in this process, sandboxed: each runner started
    by bubblewrap, or forked from a pre-started one (after its own start, not counted)."""
    submissions = write_class(work / "startup", {"ada": PROFILES["ada"]})
    read = [Submission.read(notebook_path(submissions / "ada", a), a) for a in assignments()]
    sandbox = Sandbox()
    timings: dict[str, list[float]] = {"bubblewrap per student": [], "pre-started": []}
    loads = []
    with prestarted(sandbox, work) as pool:
        for _ in range(repeats):
            loads.append(load_1min())
            for way in timings:
                sandbox.pool = pool if way == "pre-started" else None
                start = time.perf_counter()
                grade_in_one_runner(read, SEED, sandbox=sandbox)
                timings[way].append(time.perf_counter() - start)
        sandbox.pool = pool
    notebooks = len(assignments())
    load = f"{min(loads):.1f}–{max(loads):.1f}"
    return [
        [way, median_and_spread(values), median_and_spread([v / notebooks for v in values]), load]
        for way, values in timings.items()
    ]


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument(
        "--students", type=int, nargs="+", default=[16, 200], help="the class sizes ours grades"
    )
    parser.add_argument(
        "--stock-students",
        type=int,
        nargs="*",
        default=[16],
        help="the class sizes stock nbgrader grades (none: ours only)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs of ours")
    parser.add_argument("--repeats", type=int, default=5, help="of the start-up comparison")
    parser.add_argument(
        "--keep",
        type=Path,
        help="keep the courses here (without it, a scratch folder, removed at the end)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    with grading_workspace(args.keep, prefix="grading-cycle-") as work:
        print_header("The grading cycle: stock nbgrader vs ours")
        report(args, work)
    return 0


def report(args: argparse.Namespace, work: Path) -> None:
    sizes = sorted(set(args.students) | set(args.stock_students))
    cycles, code_s, agree = [], {}, []
    for students in sizes:
        profiles = generated_profiles(students)
        submissions = write_class(work / f"class-{students}" / "submissions", profiles)
        code_s[students] = mean_student_code_seconds(profiles)
        ran = []
        if students in args.stock_students:
            progress(f"stock nbgrader, {students} students")
            ran.append(stock_cycle(submissions, work / f"class-{students}" / "stock", students))
        if students in args.students:
            progress(f"ours, {students} students")
            root = work / f"class-{students}" / "ours"
            ran.append(ours_cycle(submissions, root, students, args.jobs))
        cycles += ran
        if len(ran) == 2:
            names = sorted(profiles)
            same = recorded_scores(work / f"class-{students}" / "stock", names) == recorded_scores(
                work / f"class-{students}" / "ours", names
            )
            agree.append(f"{students} students: {'identical' if same else '**different**'}")
    kinds = len(HONEST)
    print(
        f"Class: generated, honest students cycling through {kinds} demo profiles; "
        f"{len(assignments())} notebooks each; seed {SEED}; ours sandboxed (bubblewrap, "
        f"pre-started runners), --jobs {args.jobs}.\n"
    )
    print(markdown_table(CYCLE_HEADER, cycle_rows(cycles, code_s)))
    print()
    print(
        "Student's own code per student × notebook (answers defined and called on every "
        "hidden check's inputs, in-process): "
        + ", ".join(f"{code_s[n]:.3f} s at {n} students" for n in sizes)
        + ".\n"
    )
    if agree:
        print("Per-cell scores, stock vs ours: " + "; ".join(agree) + ".\n")
    verdicts(cycles)
    progress("runner start-up ...")
    print(
        "\nA student's runner: started by bubblewrap per student, or forked from a pre-started "
        f"runner (one correct student's {len(assignments())} notebooks graded in this process, "
        "sandboxed, judging included):\n"
    )
    header = ["runner", "s per student", "s per notebook", "load (1 min)"]
    print(markdown_table(header, startup_rows(work, args.repeats)))


def verdicts(cycles: list[Cycle]) -> None:
    """How the time grows with the class, and each target met or not."""
    ours = [c for c in cycles if not c.system.stock]
    stock = {c.students: c for c in cycles if c.system.stock}
    if len(ours) >= 2:
        small, large = ours[0], ours[-1]
        per_item = (large.seconds() / large.items) / (small.seconds() / small.items)
        print(
            f"Growth: {large.students / small.students:.1f}× the students took "
            f"{large.seconds() / small.seconds():.1f}× the time ({small.students} → "
            f"{large.students}); per student × notebook {per_item:.2f}× (1.00: linear).\n"
        )
    for cycle in ours:
        found = [_verdict("peak RSS MB", cycle.largest_rss_mb(), MEMORY_TARGET_MB)]
        from_students, per_item = PER_ITEM_TARGET
        if cycle.students >= from_students:
            seconds = cycle.seconds() / cycle.items
            found.append(_verdict("cycle s per student × notebook", seconds, per_item))
        if cycle.students in stock and cycle.students in RATIO_TARGETS:
            ratio = stock[cycle.students].seconds() / cycle.seconds()
            target = RATIO_TARGETS[cycle.students]
            found.append(_verdict("cycle vs stock's", ratio, target, at_least=True))
        print(f"- {cycle.students} students: " + "; ".join(found))


def _verdict(what: str, value: float, target: float, at_least: bool = False) -> str:
    met = value >= target if at_least else value <= target
    bound = "≥" if at_least else "≤"
    return f"{what} {value:.3g} (target {bound} {target}): {'**met**' if met else '**not met**'}"


if __name__ == "__main__":
    sys.exit(main())
