"""Notebook 02's checks (grader/checks/batch_norm.py, group_norm.py, rms_norm.py) judged on
known answers.

The solution cells come from the solution notebook and are run as the autograder runs them:
the imports cell, then that one answer cell, in a fresh namespace.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import SEEDS, cheats_earn_nothing, known_mistake
from torch import nn

from grader.checks import run
from grader.checks.batch_norm import (
    BATCH_NORM,
    BATCH_NORM_FROM_KERAS,
    EXERCISES,
    PREDICT,
    _bn_case,
    _keras_case,
)
from grader.checks.batch_norm_backward import BATCH_NORM_BACKWARD
from grader.checks.core import outputs_of, plan
from grader.checks.group_norm import GROUP_NORM
from grader.checks.rms_norm import RMS_NORM
from grader.grading.sandboxed.probes import probe_batch_norm
from grader.reference import functional as reference

ASSIGNMENT = "02_batch_norm"
BY_NAME = {e.name: e for e in (*EXERCISES, GROUP_NORM, RMS_NORM)}


CASES = [(e, m) for e in BY_NAME.values() for m in e.mistakes]


def _largest_gap(exercise, impl, seed: int) -> float:
    """The largest |mistake − reference| over all checks, relative to the check's tolerance."""
    gaps = []
    for check_, inputs in plan(exercise, hidden=True, seed=seed):
        want = outputs_of(exercise, exercise.reference, inputs)
        try:
            got = outputs_of(exercise, impl, inputs)
        except Exception:
            continue
        for key, expected in want.items():
            diff = np.nan_to_num(np.abs(got[key] - expected), nan=np.inf)
            gaps.append(float(np.max(diff / (check_.atol + check_.rtol * np.abs(expected)))))
    return max(gaps)


@pytest.mark.parametrize(("exercise", "mistake"), CASES, ids=lambda c: getattr(c, "name", ""))
def test_some_check_separates_each_mistake_by_far_more_than_its_tolerance(exercise, mistake):
    for seed in range(5):
        assert _largest_gap(exercise, mistake.impl, seed) > 100


def _scenario(impl, batches, x_eval):
    """Run the batch_norm probe on `impl` for the given training batches and eval batch."""
    case = _bn_case(np.random.default_rng(0), batches, x_eval)
    return {k: np.asarray(v) for k, v in probe_batch_norm(impl, case).items()}


def test_the_batch_norm_reference_is_nn_batchnorm1d_step_for_step():
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((6, 3, 2)) * 2 + 1).astype(np.float32) for _ in range(3)]
    x_eval = rng.standard_normal((4, 3, 2)).astype(np.float32)
    module = nn.BatchNorm1d(3, affine=False)
    expected = {}
    for i, b in enumerate(batches):
        expected[f"output of training step {i + 1}"] = module(torch.from_numpy(b)).detach().numpy()
        expected[f"running_mean after training step {i + 1}"] = module.running_mean.numpy().copy()
        expected[f"running_var after training step {i + 1}"] = module.running_var.numpy().copy()
    expected["output of the evaluation call"] = (
        module.eval()(torch.from_numpy(x_eval)).detach().numpy()
    )
    for impl in (F.batch_norm, reference.batch_norm):
        got = _scenario(impl, batches, x_eval)
        for key, value in expected.items():
            np.testing.assert_allclose(got[key], value, rtol=1e-5, atol=1e-6, err_msg=key)


def test_the_seed_table_is_the_first_visible_batch_norm_checks():
    """The notebook's numbers: (1, 3), (5, 7) normalize to ±1, one step stores 0.1·(3, 5) and
    0.9 + 0.1·8 = 1.7, and evaluation normalizes with those."""
    (_, outputs), (_, running), (_, evaluated) = plan(BATCH_NORM, hidden=False, seed=0)[:3]
    out = outputs_of(BATCH_NORM, BATCH_NORM.reference, outputs)
    np.testing.assert_allclose(out["output of training step 1"], [[-1, -1], [1, 1]], atol=1e-5)
    out = outputs_of(BATCH_NORM, BATCH_NORM.reference, running)
    np.testing.assert_allclose(out["running_mean after training step 1"], [0.3, 0.5], rtol=1e-6)
    np.testing.assert_allclose(out["running_var after training step 1"], [1.7, 1.7], rtol=1e-6)
    out = outputs_of(BATCH_NORM, BATCH_NORM.reference, evaluated)
    table = np.array([[1.0, 3.0], [5.0, 7.0]])
    want = (table - [0.3, 0.5]) / np.sqrt(1.7 + 1e-5)
    np.testing.assert_allclose(out["output of the evaluation call"], want, rtol=1e-6)


def test_the_port_evaluates_as_keras_does_and_goes_on_with_its_moving_average():
    """Keras's BatchNormalization written out: evaluation γ(x − mean)/√(var + ε) + β with the
    moving statistics as stored; training m·old + (1 − m)·new for the mean."""
    for part, momentum in (("evaluation", 0.99), ("running_mean", 0.9), ("running_mean", 0.6)):
        case = _keras_case(np.random.default_rng(4), part, momentum)
        out = outputs_of(BATCH_NORM_FROM_KERAS, BATCH_NORM_FROM_KERAS.reference, case)
        if part == "evaluation":
            spread = np.sqrt(case["moving_variance"] + case["epsilon"])
            x_hat = (case["evaluation batch"] - case["moving_mean"]) / spread
            want = case["gamma"] * x_hat + case["beta"]
            np.testing.assert_allclose(out["output in evaluation"], want, rtol=1e-5, atol=1e-5)
            continue
        mean = case["moving_mean"].astype(np.float64)
        for i, batch in enumerate(case["training batches"], start=1):
            mean = momentum * mean + (1 - momentum) * batch.mean(0)
            got = out[f"running_mean after training step {i}"]
            np.testing.assert_allclose(got, mean, rtol=1e-5, atol=1e-5)


def test_no_grad_alone_changes_the_buffers_that_predict_must_leave_alone():
    _, inputs = plan(PREDICT, hidden=False, seed=0)[0]
    no_grad = known_mistake(PREDICT, "no_grad taken for eval")
    right = outputs_of(PREDICT, PREDICT.reference, inputs)
    wrong = outputs_of(PREDICT, no_grad, inputs)
    assert right["num_batches_tracked"] == inputs["tracked"]
    assert wrong["num_batches_tracked"] == inputs["tracked"] + 1
    assert not np.allclose(wrong["running_mean"], inputs["running_mean"])
    np.testing.assert_array_equal(right["running_mean"], inputs["running_mean"])


# Its own normalization, with the running update left to SyncBatchNorm's piece (it earned 10 / 10).
_UPDATE_STATS = (
    "def batch_norm(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):\n"
    "    dims = (0, *range(2, x.dim()))\n"
    "    if training or rm is None:\n"
    "        if x.numel() // x.shape[1] <= 1:\n"
    '            raise ValueError("Expected more than 1 value per channel when training")\n'
    "        mean, var = x.mean(dims), x.var(dims, correction=0)\n"
    "        if training and rm is not None:\n"
    "            torch.batch_norm_update_stats(x, rm, rv, momentum)\n"
    "    else:\n"
    "        mean, var = rm, rv\n"
    "    shape = (1, -1, *[1] * (x.dim() - 2))\n"
    "    y = (x - mean.view(shape)) / (var.view(shape) + eps).sqrt()\n"
    "    y = y if w is None else y * w.view(shape)\n"
    "    return y if b is None else y + b.view(shape)\n"
)

CHEATS = {
    "batch_norm": [
        _UPDATE_STATS,
        "def batch_norm(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    return F.batch_norm(x, rm, rv, w, b, training, momentum, eps)",
        "def batch_norm(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    from grader.reference import functional\n"
        "    return functional.batch_norm(x, rm, rv, w, b, training, momentum, eps)",
        # LayerNorm over the transposed batch is BatchNorm's forward pass
        "def batch_norm(x, rm, rv, w=None, b=None, training=False, momentum=0.1, eps=1e-5):\n"
        "    if not training:\n"
        "        return (x - rm) / torch.sqrt(rv + eps)\n"
        "    n = x.shape[0]\n"
        "    rm.mul_(1 - momentum).add_(momentum * x.mean(0))\n"
        "    rv.mul_(1 - momentum).add_(momentum * x.var(0))\n"
        "    return F.layer_norm(x.T, (n,), eps=eps).T",
    ],
    "group_norm": [
        "def group_norm(x, g, w=None, b=None, eps=1e-5):\n    return F.group_norm(x, g, w, b, eps)",
        "def group_norm(x, g, w=None, b=None, eps=1e-5):\n"
        "    y = F.layer_norm(x.reshape(x.shape[0], g, -1), (x[0].numel() // g,), eps=eps)\n"
        "    y = y.reshape(x.shape)\n"
        "    s = (1, -1) + (1,) * (x.dim() - 2)\n"
        "    return y if w is None else y * w.view(s) + b.view(s)",
    ],
    "rms_norm": [
        "def rms_norm(x, s, w=None, eps=None):\n    return F.rms_norm(x, s, w, eps)",
        "def rms_norm(x, s, w=None, eps=None):\n"
        "    return nn.RMSNorm(s, eps=eps, elementwise_affine=False)(x) * (1 if w is None else w)",
    ],
}


test_a_library_normalization_where_one_is_to_be_built_earns_zero = cheats_earn_nothing(CHEATS)


def test_grad_weight_summed_over_n_only_keeps_no_more_than_a_slip():
    """The values sharing γ and β are the structure of batch_norm_backward: sums over N only
    keep its cap, not the points of the checks they pass (grad_x is right)."""
    for seed in SEEDS:
        wrong, slipped = (
            run(
                BATCH_NORM_BACKWARD,
                known_mistake(BATCH_NORM_BACKWARD, m),
                hidden=True,
                seed=seed,
                source="",
            )
            for m in ("sums over N only", "weight left out of grad_x")
        )
        assert wrong.capped and wrong.score <= slipped.score, (wrong.score, slipped.score)
