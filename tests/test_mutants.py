"""The mutation score of the checks, on a fixed sample of mutants (bench/mutants.py has all),
and the holdout: wrong answers written by hand as students write them (tests/wrong_answers).

Each mutant changes one place of a solution cell (bench/mutation.py). Every mutant that
is not equivalent to the solution must lose points, and most must get a specific diagnosis: a
known mistake named, a property of a correct output explained, or its own exception shown. The
same holds for every hand-written wrong answer, and the feedback of one marked
`# feedback: <words>` says those words.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from grader.checks import EXERCISES
from grader.checks.core import Check, Exercise
from grader.grading.sandboxed.calling import load_answer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import mutation
from mutation import equivalent, judge_mutant, mutants

SAMPLE = 80  # of ~560 mutants; the whole set takes ~100 s (bench/mutants.py)
SPECIFIC = 0.95  # all mutants measure 885 of 915 at 38f43e6 (docs/mutants.md)
WRITTEN_SPECIFIC = 0.9  # the hand-written answers measure 85 of 86 (docs/mutants.md)
WRONG_ANSWERS = mutation.written_answers(Path(__file__).resolve().parent / "wrong_answers")


@pytest.fixture(scope="module")
def outcomes() -> list[tuple[str, str, str]]:
    """(exercise, mutant source, outcome) for a fixed sample of every solution's mutants."""
    everything = []
    for name, setup, source in mutation.solution_cells():
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


@pytest.fixture(scope="module")
def written() -> dict[str, object]:
    """File name -> the verdict on that hand-written wrong answer ("raised" if it defines none)."""
    setups = {name: setup for name, setup, _ in mutation.solution_cells()}
    return {a.path.name: mutation.judge_written(a, setups, seed=0) for a in WRONG_ANSWERS}


def test_the_holdout_covers_every_graded_exercise():
    assert {a.exercise for a in WRONG_ANSWERS} == set(EXERCISES)


@pytest.mark.parametrize("answer", WRONG_ANSWERS, ids=lambda a: a.path.stem)
def test_no_hand_written_wrong_answer_earns_full_marks(written, answer):
    verdict = written[answer.path.name]
    assert verdict == "raised" or verdict.score < verdict.max_score, verdict.render()
    if answer.feedback:
        assert answer.feedback in verdict.render(), verdict.render()


def test_most_hand_written_wrong_answers_get_a_specific_diagnosis(written):
    found = [v if isinstance(v, str) else mutation.outcome(v) for v in written.values()]
    specific = [o for o in found if o in {"named", "explained", "raised"}]
    assert len(specific) >= WRITTEN_SPECIFIC * len(found), (len(specific), len(found))
