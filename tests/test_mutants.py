"""The mutation score of the checks, on a fixed sample of mutants (bench/mutants.py has all).

Each mutant changes one place of a solution cell (grader/checks/mutation.py). Every mutant that
is not equivalent to the solution must lose points, and most must get a specific diagnosis: a
known mistake named, a property of a correct output explained, or its own exception shown.
"""

from __future__ import annotations

import random

import pytest
import torch

from grader.checks import EXERCISES
from grader.checks.core import Check, Exercise
from grader.checks.mutation import equivalent, judge_mutant, mutants
from grader.config import assignments
from grader.notebook import answer_source, exercises_of, setup_code, source_notebook
from grader.sandboxed.probe import load_answer

SAMPLE = 80  # of ~560 mutants; the whole set takes ~100 s (bench/mutants.py)
SPECIFIC = 0.95  # this sample measures 74 of 74, every mutant 0.99 (docs/mutants.md)


@pytest.fixture(scope="module")
def outcomes() -> list[tuple[str, str, str]]:
    """(exercise, mutant source, outcome) for a fixed sample of every solution's mutants."""
    everything = []
    for assignment in assignments():
        notebook = source_notebook(assignment)
        setup = setup_code(notebook)
        for name in exercises_of(notebook):
            source = answer_source(notebook, name)
            everything += [(name, setup, source, m) for m in mutants(source)]
    sample = random.Random(17).sample(everything, SAMPLE)
    return [
        (name, m.source, judge_mutant(EXERCISES[name], setup, load_answer(setup, s, name), m, 0))
        for name, setup, s, m in sample
    ]


def test_every_sampled_mutant_that_changes_the_outputs_loses_points(outcomes):
    missed = [(name, source) for name, source, outcome in outcomes if outcome == "missed"]
    assert not missed


def test_most_sampled_mutants_get_a_specific_diagnosis(outcomes):
    wrong = [o for _, _, o in outcomes if o != "equivalent"]
    specific = [o for o in wrong if o in {"named", "explained", "raised"}]
    assert len(wrong) > SAMPLE / 2
    assert len(specific) >= SPECIFIC * len(wrong), (len(specific), len(wrong))


def test_a_mutant_is_equivalent_only_on_inputs_the_checks_never_draw():
    """The equivalence filter redraws the checks' inputs from another law: a mutant that agrees
    with the answer on every value the checks draw (here [0, 1)) but not beyond is counted."""
    exercise = Exercise(
        name="identity",
        reference=lambda x: x,
        probe=lambda answer, a: {"y": answer(torch.from_numpy(a["x"]))},
        checks=(Check("values in [0, 1)", lambda rng: {"x": rng.uniform(0, 1, 8)}, 1),),
    )
    clipped = lambda x: x.clamp(max=2.0)  # noqa: E731
    assert not equivalent(exercise, exercise.reference, clipped)
    assert equivalent(exercise, exercise.reference, lambda x: x * 1.0)
