"""Notebook 05's checks (grader/checks/training.py): `MyBatchNorm1d` alone and trained in the
network, judged on known answers: the solution, PyTorch's own module, each known mistake."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import SEEDS, cheats_earn_nothing, known_mistake
from torch import nn

from grader.checks import run
from grader.checks.training import MY_BATCH_NORM_1D, _trained
from grader.grading.sandboxed.probes import EVAL_ACCURACY, probe_my_batch_norm

TRAINED = "trained on 600 digits"


def _trained_accuracy(module_cls, seed: int) -> float:
    return float(
        probe_my_batch_norm(module_cls, _trained(np.random.default_rng(seed)))[EVAL_ACCURACY]
    )


def test_the_solution_earns_every_point(solutions):
    answer, source = solutions["MyBatchNorm1d"]
    for seed in SEEDS:
        verdict = run(MY_BATCH_NORM_1D, answer, hidden=True, seed=seed, source=source)
        assert verdict.score == MY_BATCH_NORM_1D.points, verdict.render()


def test_pytorchs_batch_norm_passes_every_check_it_is_the_model_of():
    """nn.BatchNorm1d is refused as the library's, but its outputs pass every check: the
    reference module and the network's recipe are torch's."""
    verdict = run(MY_BATCH_NORM_1D, nn.BatchNorm1d, hidden=True, seed=SEEDS[0], source="")
    assert all(o.passed for o in verdict.outcomes), verdict.render()


@pytest.mark.parametrize("mistake", [m.name for m in MY_BATCH_NORM_1D.mistakes])
def test_each_known_mistake_loses_points_and_is_named(mistake):
    impl = known_mistake(MY_BATCH_NORM_1D, mistake)
    verdict = run(MY_BATCH_NORM_1D, impl, hidden=True, seed=SEEDS[0], source="")
    assert verdict.score < MY_BATCH_NORM_1D.points
    assert mistake in {m.name for m in verdict.diagnoses}, verdict.render()


def test_a_norm_useless_in_evaluation_mode_fails_the_training_check_by_far():
    """Running statistics never updated: evaluation normalizes with 0 and 1 and the trained
    network collapses, far outside the 0.2 the check allows, on every grading seed."""
    useless = known_mistake(MY_BATCH_NORM_1D, "running stats not updated")
    for seed in SEEDS:
        gap = _trained_accuracy(MY_BATCH_NORM_1D.reference, seed) - _trained_accuracy(useless, seed)
        assert gap > 0.4, gap  # twice the tolerance
        verdict = run(MY_BATCH_NORM_1D, useless, hidden=True, seed=seed, source="")
        failed = [o.check.description for o in verdict.outcomes if not o.passed]
        assert any(TRAINED in d for d in failed), verdict.render()


def test_layer_norms_axis_trains_the_network_but_keeps_at_most_the_cap():
    """Per-sample statistics are a LayerNorm: the network still learns, so the training check
    alone cannot tell; the structure's cap does."""
    wrong = known_mistake(MY_BATCH_NORM_1D, "per-sample statistics")
    verdict = run(MY_BATCH_NORM_1D, wrong, hidden=True, seed=SEEDS[0], source="")
    assert verdict.score <= MY_BATCH_NORM_1D.structure.cap, verdict.render()


test_library_modules_earn_nothing = cheats_earn_nothing(
    {
        "MyBatchNorm1d": [
            "class MyBatchNorm1d(nn.BatchNorm1d):\n    pass\n",
            """
            class MyBatchNorm1d(nn.Module):
                def __init__(self, num_features, eps=1e-5, momentum=0.1):
                    super().__init__()
                    self.bn = nn.BatchNorm1d(num_features, eps=eps, momentum=momentum)
                    self.weight, self.bias = self.bn.weight, self.bn.bias

                def forward(self, x):
                    return self.bn(x)
            """,
        ]
    }
)
