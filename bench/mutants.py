"""Mutation score of the checks: wrong answers made from each solution, and what grading says.

Every one-place mutant of each exercise's solution cell (`bench/mutation.py`: constants,
operators, dropped or swapped operands, reductions and their dims, deleted statements) is loaded
as the autograder loads an answer. Mutants whose outputs equal the solution's on every check's
inputs under six other seeds, and on the same inputs with their values redrawn from another law
(`mutation.redrawn`), are equivalent and left out. The others are graded under
`--seed` and counted by what the feedback does:

- missed: full marks (a hole in the checks);
- named: a known mistake recognized;
- explained: a property of a correct output it violates ("normalized over the last dim only");
- raised: its own exception shown (the mutant crashes on the checks' inputs);
- located: only where and by how much it differs.

Specific = named + explained + raised.

Then the holdout: the wrong answers written by hand as students write them (tests/wrong_answers,
one file each, none made from the known mistakes or the mutants), graded and counted the same
way.

    .venv/bin/python bench/mutants.py [options]

"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, markdown_table, print_header, progress
from mutation import (
    OUTCOMES,
    judge_mutant,
    judge_written,
    mutants,
    outcome,
    solution_cells,
    written_answers,
)

from grader.checks import EXERCISES
from grader.grading.sandboxed.calling import load_answer

WRONG_ANSWERS = Path(__file__).resolve().parents[1] / "tests" / "wrong_answers"


def tally(name: str, setup: str, source: str, seed: int) -> Counter:
    exercise = EXERCISES[name]
    answer = load_answer(setup, source, name)
    return Counter(judge_mutant(exercise, setup, answer, m, seed) for m in mutants(source))


def tally_written(seed: int) -> dict[str, Counter]:
    """Per exercise, the outcomes of the hand-written wrong answers."""
    setups = {name: setup for name, setup, _ in solution_cells()}
    counts: dict[str, Counter] = {}
    for answer in written_answers(WRONG_ANSWERS):
        verdict = judge_written(answer, setups, seed)
        found = verdict if isinstance(verdict, str) else outcome(verdict)
        counts.setdefault(answer.exercise, Counter())[found] += 1
    return counts


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "—"


def row(name: str, counts: Counter) -> list[object]:
    wrong = sum(counts.values()) - counts["equivalent"]
    specific = counts["named"] + counts["explained"] + counts["raised"]
    return [
        name,
        sum(counts.values()),
        counts["equivalent"],
        wrong,
        *(counts[o] for o in OUTCOMES[1:]),
        _share(wrong - counts["missed"], wrong),
        _share(specific, wrong),
    ]


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--seed", type=int, default=0, help="grading seed")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    print_header("Mutation score: one-place mutants of each solution, graded")
    rows, total = [], Counter()
    cells = solution_cells()
    for name, setup, source in cells:
        progress(f"{name} ...")
        counts = tally(name, setup, source, args.seed)
        total += counts
        rows.append(row(name, counts))
    rows.append(row("all", total))
    header = ["exercise", "mutants", "equivalent", "wrong", *OUTCOMES[1:]]
    header += ["lose points", "specific"]
    print(markdown_table(header, rows))
    print(
        "\nwrong = mutants − equivalent; lose points = share of wrong ones below full marks; "
        "specific = share named, explained by a property, or shown their own exception."
    )
    progress("hand-written wrong answers ...")
    written = tally_written(args.seed)
    rows = [row(name, written[name]) for name, _, _ in cells if name in written]
    rows.append(row("all", sum(written.values(), Counter())))
    print(f"\nHand-written wrong answers ({WRONG_ANSWERS.parent.name}/{WRONG_ANSWERS.name}):\n")
    header[1] = "answers"
    print(markdown_table(header, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
