"""`python -m normcheck NOTEBOOK`: a student's terminal check of a notebook, with only the
students' wheel and JupyterLab installed. Runs the notebook top to bottom in a kernel, as Run
All does (a copy: the file is not changed), and says, per exercise, whether its visible checks
pass or what is wrong. Exit status 1 while an exercise is still to fix."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

TEST_SUFFIX = "_tests"  # a check cell's nbgrader grade_id: <exercise>_tests
CELL_SECONDS = 120


def verdicts(path: Path) -> dict[str, str]:
    """Each exercise's check cell after Run All: '' when it passes, else what it said."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=CELL_SECONDS,
        allow_errors=True,  # as Run All goes on past an exercise not answered yet
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    # As under nbgrader's Validate, an exercise not answered yet fails its check (normcheck.check).
    os.environ["NBGRADER_EXECUTION"] = "validate"
    client.execute()
    found = {}
    for cell in notebook.cells:
        name = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", "")
        if cell.cell_type != "code" or not name.endswith(TEST_SUFFIX):
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        found[name.removesuffix(TEST_SUFFIX)] = "\n".join(
            o["evalue"] if o["ename"] == "CheckFailed" else f"{o['ename']}: {o['evalue']}"
            for o in errors
        )
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m normcheck", description=__doc__)
    parser.add_argument("notebook", type=Path, help="your .ipynb")
    args = parser.parse_args(argv)
    if not args.notebook.is_file():
        print(f"normcheck: error: {args.notebook} is not a file", file=sys.stderr)
        return 2
    try:
        found = verdicts(args.notebook)
    except ValueError as error:  # not a notebook nbformat can read
        print(f"normcheck: error: cannot read {args.notebook}: {error}", file=sys.stderr)
        return 2
    if not found:
        print(f"normcheck: error: {args.notebook} has no check cells", file=sys.stderr)
        return 2
    for exercise, said in found.items():
        print(said or f"{exercise}: the visible checks pass")
    failing = [exercise for exercise, said in found.items() if said]
    print("\nAll visible checks pass." if not failing else f"\nStill to fix: {', '.join(failing)}.")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
