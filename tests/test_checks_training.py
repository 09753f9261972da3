"""Notebook 05's checks (grader/checks/training.py): `MyBatchNorm1d` alone and trained in the
network, judged on known answers: the solution, PyTorch's own module, each known mistake. That
the solution earns every point and each known mistake loses points and is named, on every seed
of SEEDS, is tested for every exercise, this one included, in tests/test_checks.py."""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import SEEDS, answer_from, cheats_earn_nothing, graded, known_mistake
from torch import nn

from grader.checks import run
from grader.checks.training import DEFAULTS, MY_BATCH_NORM_1D, _trained
from grader.grading.sandboxed.probes import EVAL_ACCURACY, _sgd_step, probe_my_batch_norm
from norm_utils.training import digit_arrays

TRAINED = "trained on 600 digits"


def _trained_accuracy(module_cls, seed: int) -> float:
    return float(
        probe_my_batch_norm(module_cls, _trained(np.random.default_rng(seed)))[EVAL_ACCURACY]
    )


def test_pytorchs_batch_norm_passes_every_check_it_is_the_model_of():
    """nn.BatchNorm1d is refused as the library's, but its outputs pass every check: the
    reference module and the network's recipe are torch's."""
    verdict = run(MY_BATCH_NORM_1D, nn.BatchNorm1d, hidden=True, seed=SEEDS[0], source="")
    assert all(o.passed for o in verdict.outcomes), verdict.render()


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


def test_the_checks_sgd_step_is_torchs_to_the_bit():
    """The probe's written-out SGD (`_sgd_step`) against torch.optim.SGD from the same weights."""
    torch.manual_seed(0)
    ours, theirs = nn.Linear(4, 3), nn.Linear(4, 3)
    theirs.load_state_dict(ours.state_dict())
    opt, velocity = torch.optim.SGD(theirs.parameters(), lr=0.05, momentum=0.9), {}
    for _ in range(3):
        x = torch.randn(8, 4)
        for model in (ours, theirs):
            model.zero_grad()
            (model(x) ** 2).sum().backward()
        _sgd_step(ours, velocity, 0.05, momentum=0.9)
        opt.step()
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)


def test_training_in_a_fresh_runner_imports_no_compiler():
    """torch.optim's optimizers import torch._dynamo when built, 3 s of the exercise's own time
    in a fresh runner; the probe trains without them."""
    code = (
        "import sys, numpy as np\n"
        "from grader.checks.training import _trained\n"
        "from grader.grading.sandboxed.probes import probe_my_batch_norm\n"
        "from grader.reference.modules import BatchNorm\n"
        "case = _trained(np.random.default_rng(0))\n"
        "before = 'torch._dynamo' in sys.modules\n"
        "probe_my_batch_norm(BatchNorm, case)\n"
        "print(before, 'torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr


def test_the_digits_are_scikit_learns_to_the_bit():
    """`digit_arrays` reads load_digits' file itself (importing scikit-learn takes seconds)."""
    from sklearn.datasets import load_digits

    images, labels = digit_arrays()
    data = load_digits()
    assert np.array_equal(images, (data.data / 16).astype(np.float32))
    assert np.array_equal(labels, data.target) and labels.dtype == np.int64


# The handed-out line of the answer cell, and what the checks built with no eps or momentum see.
HANDED_OUT = "def __init__(self, num_features, eps=1e-5, momentum=0.1):"
BUILT_WITH_DEFAULTS = "built with its defaults"


def _with_init(solutions, line: str):
    """The solution with its handed-out `__init__` line replaced by `line`."""
    source = solutions["MyBatchNorm1d"][1]
    assert HANDED_OUT in source
    return answer_from(source.replace(HANDED_OUT, line), "MyBatchNorm1d")


def test_the_defaults_the_checks_compare_with_are_the_handed_out_ones(solutions):
    """The checks built with no eps or momentum compare with the reference's defaults: those the
    answer cell hands out and the exercise's text names."""
    answer, source = solutions["MyBatchNorm1d"]
    assert HANDED_OUT in source
    given = inspect.signature(answer).parameters
    assert {k: given[k].default for k in DEFAULTS} == DEFAULTS == {"eps": 1e-5, "momentum": 0.1}


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            "def __init__(self, num_features, eps=1e-4, momentum=0.1):",
            "your module adds ε = 1e-4 to the variance, not the default eps = 1e-5",
        ),
        (
            "def __init__(self, num_features, eps=1e-5, momentum=1.0):",
            "with weight 1, not the default momentum = 0.1",
        ),
    ],
    ids=["eps", "momentum"],
)
def test_a_changed_default_loses_its_check_and_is_said(solutions, line, said):
    """The two mutants that once kept full marks (docs/mutants.md): every other check gives the
    module its eps and momentum, so only the check built with its defaults sees them; it costs
    its 0.25 and says which default changed, in the student's own check() too."""
    verdict = graded(MY_BATCH_NORM_1D, _with_init(solutions, line), SEEDS[0])
    failed = [o for o in verdict.outcomes if not o.passed]
    assert [o.check.description.startswith(BUILT_WITH_DEFAULTS) for o in failed] == [True]
    assert verdict.score == verdict.max_score - 0.25, verdict.render()
    assert said in verdict.render() and said in verdict.visible().render()


@pytest.mark.parametrize(
    "line",
    [
        "def __init__(self, num_features, momentum=0.1, eps=1e-5):",
        "def __init__(self, num_features, *, eps=10**-5, momentum=1 / 10):",
        "def __init__(self, num_features, eps=0.00001, momentum=.1, **unused):",
    ],
    ids=["keyword order", "keyword-only", "other spellings"],
)
def test_the_defaults_written_another_legal_way_keep_full_marks(solutions, line):
    verdict = graded(MY_BATCH_NORM_1D, _with_init(solutions, line), SEEDS[0])
    assert verdict.score == verdict.max_score, verdict.render()
