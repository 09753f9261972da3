"""How far each known mistake lands from the tolerance of the checks that must catch it.

For every exercise, every check draws its inputs under `--seeds` grading seeds; the reference and
each known mistake are run through the exercise's probe on them, exactly as `judge` does. The
margin of an output is its largest |difference| from the expected values divided by the check's
allowance `atol + rtol·|expected|`: a margin above 1 fails the check, and the larger it is, the
less a rounding difference (another CPU, another torch) could flip the verdict.

Reported per exercise × mistake: the best margin over the checks (how clearly the best check
separates the mistake; the worst seed), and how many checks it fails under every seed. Reported
per exercise: the reference's own worst margin (computed in the input's dtype against the
float64 oracle where a check uses one): it must stay well below 1.

    .venv/bin/python bench/margins.py [options]

"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bench_parser, markdown_table, print_header, progress

from grader.checks import EXERCISES
from grader.checks.core import Check, Exercise, expected_outputs, margin, outputs_of


def _margin(exercise: Exercise, check: Check, impl, inputs) -> float:
    """`margin` of impl's outputs; for a check that expects an exception, 0 when impl raises
    it and ∞ when it returns values."""
    if check.expects is None:
        return margin(
            outputs_of(exercise, impl, inputs), expected_outputs(exercise, check, inputs), check
        )
    try:
        outputs_of(exercise, impl, inputs)
    except check.expects:
        return 0.0
    return float("inf")


def margins(exercise: Exercise, impl, seeds: range) -> list[list[float]]:
    """margins[c][s]: the margin of `impl` on check c under seed s (nan: it does not apply)."""
    table = []
    for i, check in enumerate(exercise.checks):
        row = []
        for seed in seeds:
            inputs = check.inputs(np.random.default_rng([seed if check.hidden else 0, i]))
            try:
                row.append(_margin(exercise, check, impl, inputs))
            except Exception:  # a mistake need not apply to every input (e.g. shapes)
                row.append(float("nan"))
        table.append(row)
    return table


def _fmt(value: float) -> str:
    return "∞" if value == float("inf") else f"{value:.3g}"


def exercise_rows(exercise: Exercise, seeds: range) -> list[list[object]]:
    reference = np.nanmax(np.array(margins(exercise, exercise.reference, seeds)))
    rows: list[list[object]] = [[exercise.name, "(reference)", _fmt(float(reference)), "—"]]
    for mistake in exercise.mistakes:
        table = np.array(margins(exercise, mistake.impl, seeds))
        worst_seed = np.nanmin(np.where(np.isnan(table), np.inf, table), axis=1)  # per check
        caught_always = int(np.sum(np.all(table > 1, axis=1)))
        best = float(np.max(worst_seed)) if worst_seed.size else float("nan")
        rows.append(["", mistake.name, _fmt(best), f"{caught_always} / {len(exercise.checks)}"])
    return rows


def arguments() -> argparse.ArgumentParser:
    parser = bench_parser(__doc__)
    parser.add_argument("--seeds", type=int, default=5, help="grading seeds per hidden check")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    print_header("Margins: each known mistake against the tolerance of its checks")
    rows = []
    for exercise in EXERCISES.values():
        progress(f"{exercise.name} ...")
        rows += exercise_rows(exercise, range(args.seeds))
    header = [
        "exercise",
        "answer",
        "best margin (worst seed)",
        "checks it fails under every seed",
    ]
    print(markdown_table(header, rows))
    print(
        "\nA margin is |output − expected| / (atol + rtol·|expected|), maximized over the "
        "outputs: above 1 the check fails. The reference row is the correct answer's own "
        "distance from the oracle (≪ 1). ∞: a shape mismatch or NaN where a number is expected."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
