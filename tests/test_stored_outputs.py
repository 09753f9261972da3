"""What nbval compares in the solutions: the course notes' worked examples digit for digit, no
rounding-level noise, and nothing hidden from it without an assert in its place."""

from __future__ import annotations

import re
import tomllib

import pytest
from nbval.plugin import find_comment_markers, find_metadata_tags, get_sanitize_patterns

from grader.course.config import REPO, assignments
from grader.course.intake import source_notebook

# The course notes' worked examples, as the solutions print them: exact on any CPU.
NOTES_EXAMPLES = {
    "01_layer_norm": ["[[-1.0, 1.0], [-1.0, 1.0]]\nmode max diff: 0.0\n"],
    "02_batch_norm": [
        "BN [[-1.0, -1.0], [1.0, 1.0]]\nLN [[-1.0, 1.0], [-1.0, 1.0]]\n",
        "BN, per column: mean [3.0, 5.0]  std [2.0, 2.0]\n"
        "LN, per row:    mean [2.0, 6.0]  std [1.0, 1.0]\n",
        "running_mean tensor([0.3000, 0.5000])  running_var tensor([1.7000, 1.7000])\n",
    ],
    "03_sequences": ["[[-1.0, 1.0], [-1.0, 1.0]]\nmode max diff: 0.0\n"],
}


def nbval_options() -> list[str]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"][
        "addopts"
    ]


def sanitize_patterns() -> list[tuple[str, str]]:
    (path,) = [o.split("=", 1)[1] for o in nbval_options() if o.startswith("--nbval-sanitize-with")]
    return get_sanitize_patterns((REPO / path).read_text())


def compared(cell) -> bool:
    """Whether nbval (run with --nbval) compares this code cell's outputs, as nbval decides it."""
    options = dict(find_metadata_tags(cell.metadata))
    options.update(find_comment_markers(cell.source))
    return options.get("check", True) and not options.get("skip", False)


def stored_text(cell) -> str:
    return "".join(
        out.get("text", "") or out.get("data", {}).get("text/plain", "") for out in cell.outputs
    )


def code_cells(assignment: str) -> list:
    return [c for c in source_notebook(assignment).cells if c.cell_type == "code"]


def test_every_cell_is_compared_unless_tagged():
    """--nbval compares every untagged cell; --nbval-lax would compare only tagged ones."""
    assert "--nbval" in nbval_options() and "--nbval-lax" not in nbval_options()


@pytest.mark.parametrize("assignment", sorted(NOTES_EXAMPLES))
def test_the_notes_examples_are_compared_digit_for_digit(assignment):
    cells = code_cells(assignment)
    for example in NOTES_EXAMPLES[assignment]:
        printing = [c for c in cells if example in stored_text(c)]
        assert len(printing) == 1, f"{assignment}: no single cell prints {example!r}"
        assert compared(printing[0]), f"{assignment}: nbval skips the cell printing {example!r}"
        for regex, replace in sanitize_patterns():
            assert re.sub(regex, replace, example) == example, (regex, example)


@pytest.mark.parametrize("assignment", assignments())
def test_a_cell_hidden_from_nbval_still_asserts_its_conclusion(assignment):
    hidden = [c.source for c in code_cells(assignment) if not compared(c)]
    assert [s for s in hidden if not re.search(r"^\s*assert ", s, re.M)] == []


NEGATIVE_ZERO = re.compile(r"-0(?:\.0*)?(?![\d.])")  # -0, -0., -0.0000; not -0.05 or 1e-05


@pytest.mark.parametrize("assignment", assignments())
def test_no_compared_output_shows_a_negative_zero(assignment):
    """A printed -0.0000 is a rounding-level value: its sign flips with the summation order."""
    shown = [
        match.group()
        for cell in code_cells(assignment)
        if compared(cell)
        for match in NEGATIVE_ZERO.finditer(stored_text(cell))
    ]
    assert shown == []
