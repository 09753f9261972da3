"""Checks for notebook 05 (training on real data): `MyBatchNorm1d`, the student's BatchNorm
module, on its own and trained end to end in the notebook's 10-layer MLP.

On its own, the module runs the scenarios of notebook 02's `batch_norm` (`batch_norm.py`):
training steps, then one evaluation call, each part judged apart against the reference module
(`grader.reference.modules.BatchNorm`, held to `nn.BatchNorm1d` by the tests), and each classic
slip of the functional exercise, written as a module, named when an output matches it.

In a network, the module goes after every hidden Linear of the notebook's MLP, which is trained
on 600 of scikit-learn's bundled digits (SGD, 24 steps) and evaluated in evaluation mode on the
held-out digits, the way a deployed model is. The reference module trained the same way (same
initial weights, same mini-batches) gives the accuracy to reach. A correct module follows the
reference's trajectory up to rounding: its accuracy is within a few test digits of the
reference's. The check allows 0.2 either way, and a norm that does not normalize in evaluation
mode (running statistics never updated) falls far below it (tests/test_checks_training.py).

Every check but two builds the module with an eps and a momentum given; those two build it with
the defaults its `__init__` is handed out with (`MyBatchNorm1d(num_features)`, eps 1e-5 and
momentum 0.1, the reference's) and compare with the reference built the same way: the
evaluation where the running variance is close to the default eps, which reads back the ε the
module adds (`normcheck.properties.default_eps`), and the running statistics after one step,
which read back the weight of the batch (`RunningAverage`). So a student who edits the handed-out
defaults loses their points and is told which default changed. They are visible, as the default
eps of notebook 06's `rms_norm_upcast` is: a default is one value whatever the inputs, and the
student's own `check()` sees it.

Rubric (8 points): the training outputs 1.75 (the table of notebook 02, and batches of 4 values
per channel, which tell the biased variance), the running statistics 1.75 (the stored variance
and the momentum's weight), the defaults 0.5 (eps 0.25, momentum 0.25), the evaluation 1 (its
visible twin 0.5), trained in the network 3 (its visible twin 1.5): the point of the notebook, a
module that trains a deep net and serves it in evaluation mode. Per-sample statistics
(LayerNorm's axis) are a wrong structure, capped at 3: such a norm still trains the network,
which is what the training check sees, but it is not a BatchNorm.
"""

from __future__ import annotations

import inspect

import numpy as np
from torch import nn

from grader.checks.batch_norm import BATCH_NORM_MISTAKES, SEED_TABLE, _bn_case, _bn_steps
from grader.checks.core import Arrays, Exercise, Mistake, Structure, hidden, visible
from grader.checks.inputs import judging
from grader.checks.library import NORMALIZATIONS, forbid
from grader.grading.sandboxed import probes
from grader.grading.sandboxed.probes import probe_my_batch_norm
from grader.reference.modules import BatchNorm
from norm_utils.training import digit_arrays
from normcheck.properties import (
    BATCH_NORM_RUNNING,
    BATCH_NORM_TRAINING,
    default_eps,
    evaluated_on_the_batch,
)

# ---------------------------------------------------------------------------------------------
# The classic slips, as modules: notebook 02's functional variants called with the module's state


def _module_of(mistake: Mistake) -> type[nn.Module]:
    """A BatchNorm module whose forward is `mistake`'s functional variant."""

    def forward(self, x):
        return mistake.impl(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            training=self.training,
            momentum=self.momentum,
            eps=self.eps,
        )

    return type(f"BatchNorm, {mistake.name}", (BatchNorm,), {"forward": forward})


# What each slip is in a module's words (notebook 02's say `training=False` for eval mode).
_IN_A_MODULE = {
    "unbiased variance to normalize": (
        "You normalize with the unbiased variance (n−1); BatchNorm normalizes with the biased "
        "batch variance (÷ n) and keeps the unbiased one only for `running_var`."
    ),
    "biased variance stored": (
        "Your `running_var` accumulates the biased batch variance; PyTorch stores the unbiased "
        "one, σ²·n/(n−1), in `running_var` (it normalizes with the biased one)."
    ),
    "swapped momentum": (
        "Your running update is m·old + (1−m)·new, the Keras/CS231n convention; PyTorch's "
        "`momentum` is the weight of the new batch: (1−m)·old + m·new."
    ),
    "running stats not updated": (
        "`running_mean` and `running_var` are not updated in training mode, so evaluation "
        "normalizes with their initial 0 and 1."
    ),
    "running stats updated in eval": (
        "Your module changes `running_mean`/`running_var` in evaluation mode (`self.training` "
        "False); there the running statistics are only read."
    ),
    "batch statistics in eval": (
        "In evaluation mode (`self.training` False) you still normalize with the batch's "
        "statistics; evaluation normalizes with `running_mean` and `running_var`."
    ),
    "per-sample statistics": (
        "Your statistics run over each sample's features (LayerNorm's axis); BatchNorm's run "
        "over the batch, for each feature (dim 0)."
    ),
    "eps argument ignored": (
        "Your module ignores the `eps` it is given (it always uses 1e-5): BatchNorm adds the "
        "ε it was constructed with, which matters when a feature's variance is close to ε."
    ),
}

MODULE_MISTAKES = tuple(
    Mistake(m.name, _IN_A_MODULE[m.name], _module_of(m), m.structural)
    for m in BATCH_NORM_MISTAKES
    if m.name in _IN_A_MODULE
)

# ---------------------------------------------------------------------------------------------
# The module built with its defaults: what `MyBatchNorm1d(num_features)` runs with

# The defaults the exercise hands out, `MyBatchNorm1d(num_features, eps=1e-5, momentum=0.1)`: the
# reference's, which the checks built with no eps or momentum compare with.
DEFAULTS = {
    name: inspect.signature(BatchNorm).parameters[name].default for name in ("eps", "momentum")
}


def _with_defaults(case: Arrays) -> Arrays:
    """`case` with no eps or momentum, so that the probe builds the module with its defaults;
    the case says them as `default eps` and `default momentum`, for the properties' words."""
    given = {k: v for k, v in case.items() if k not in DEFAULTS}
    return given | {f"default {k}": np.array(v) for k, v in DEFAULTS.items()}


def _near_the_default_eps(rng: np.random.Generator) -> Arrays:
    """Evaluation of 8 samples of 4 features whose running variance is 0.5 to 2 times the
    default eps, where ε moves the output by a factor of √1.5 to √3; the running mean and the
    deviations of the size of the running std, so that no term cancels in float32."""
    std = np.sqrt(DEFAULTS["eps"] * rng.uniform(0.5, 2.0, 4))
    mean = std * rng.standard_normal(4)
    x = mean + std * rng.standard_normal((8, 4))
    case = _bn_case(rng, [], x.astype(np.float32))
    case["running_mean"], case["running_var"] = mean.astype(np.float32), (std**2).astype(np.float32)
    return _with_defaults(case)


# ---------------------------------------------------------------------------------------------
# The network's case: the digits, split by the check's generator, and the notebook's recipe

# 600 of the 1,797 digits to train on, the other 1,197 held out; 24 SGD steps: a third of
# section 2's training (the check runs in the student's kernel), where the reference, torch's
# BatchNorm1d and a module written otherwise agree to 0.014 over 8 seeds (2 digits of 1,197 at
# lr 0.05; lr 0.1 and 72 steps spread them to 0.054), and running statistics never updated
# reach at most 0.31 against at least 0.79.
N_TRAIN = 600
RECIPE = {"lr": 0.05, "depth": 10, "width": 64, "batch": 100, "epochs": 4}


def _trained(rng: np.random.Generator) -> Arrays:
    """The digits split at random into N_TRAIN to train on and the rest to test on, pixels in
    [0, 1]; the recipe, and a seed for the initial weights and the mini-batches' order."""
    x, y = digit_arrays()
    order = rng.permutation(len(y))
    train, test = order[:N_TRAIN], order[N_TRAIN:]
    r = RECIPE
    setup = [r["depth"], r["width"], r["batch"], r["epochs"], int(rng.integers(2**31))]
    return {
        "x": x[train],
        "y": y[train],
        "x_test": x[test],
        "y_test": y[test],
        "lr": np.array(r["lr"]),
        "depth, width, batch, epochs, seed": np.array(setup),
    }


# ±0.2 of the reference's accuracy. Rounding differences move a correct module's accuracy by a
# few of the 1,197 test digits, and the slips that still normalize (a variance, the momentum) by
# at most 0.065 over 8 seeds (under a third of the tolerance); the check is for a norm useless in
# evaluation mode, which loses 0.46 or more (over twice the tolerance), so that
# neither kind sits near the tolerance on any grading seed (tests/test_checks.py).
TRAINED = {"rtol": 0.0, "atol": 0.2}

MY_BATCH_NORM_1D = Exercise(
    name="MyBatchNorm1d",
    reference=BatchNorm,
    probe=probe_my_batch_norm,
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=MODULE_MISTAKES,
    properties=(BATCH_NORM_TRAINING, *BATCH_NORM_RUNNING, evaluated_on_the_batch, default_eps),
    structure=Structure("statistics per feature, over the batch", cap=3),
    checks=(
        visible(
            0.5,
            "the table of notebook 02, (1, 3) and (5, 7), one training step: output",
            judging("training outputs", lambda rng: _bn_case(rng, [SEED_TABLE], SEED_TABLE)),
        ),
        visible(
            0.5,
            "three training steps on (64, 5) batches with weight and bias: running statistics",
            judging("running statistics", lambda rng: _bn_steps(rng, (64, 5), affine=True)),
        ),
        hidden(
            1.25,
            "batches of 4 values per feature, momentum 0.3, with weight and bias: outputs",
            judging(
                "training outputs",
                lambda rng: _bn_steps(rng, (4, 5), steps=4, momentum=0.3, affine=True),
            ),
            rtol=1e-4,
            atol=1e-4,
        ),
        hidden(
            1.25,
            "batches of 4 values per feature, momentum 0.3: running statistics",
            judging(
                "running statistics", lambda rng: _bn_steps(rng, (4, 5), steps=4, momentum=0.3)
            ),
            rtol=1e-4,
            atol=1e-4,
        ),
        hidden(
            1,
            "evaluation mode on another batch, with running statistics elsewhere than 0 and 1 "
            "and eps 1e-3: normalized with them, which it leaves unchanged",
            judging(
                "evaluation",
                lambda rng: _bn_steps(rng, (64, 3), steps=0, eval_n=5, random_start=True, eps=1e-3),
            ),
            twin=0.5,
        ),
        hidden(
            3,
            "after every hidden Linear of the 10-layer MLP, trained on 600 digits and evaluated "
            "in evaluation mode: test accuracy within 0.2 of nn.BatchNorm1d's",
            _trained,
            twin=1.5,
            **TRAINED,
        ),
        # last, so that every other check draws the inputs it drew before they were added
        visible(
            0.25,
            "built with its defaults, MyBatchNorm1d(num_features): evaluation mode where the "
            "running variance is close to the default eps",
            judging("evaluation", _near_the_default_eps),
        ),
        visible(
            0.25,
            "built with its defaults, MyBatchNorm1d(num_features): running statistics after a "
            "training step from running statistics elsewhere than 0 and 1",
            judging(
                "running statistics",
                lambda rng: _with_defaults(_bn_steps(rng, (64, 3), steps=1, random_start=True)),
            ),
        ),
    ),
)

EXERCISES = (MY_BATCH_NORM_1D,)

probes.TRUSTED.update({BatchNorm} | {m.impl for m in MODULE_MISTAKES})
