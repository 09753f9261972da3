"""Checks for notebook 02 (BatchNorm vs LayerNorm): `batch_norm`, `batch_norm_from_keras`,
`predict` (`batch_norm_backward` and `fold_batch_norm` have their own modules).

The stateful exercises are judged on whole scenarios, not single calls: `batch_norm` runs
several training steps on distinct batches and then one evaluation call, and the outputs and
the running statistics after every call are compared with `F.batch_norm` (what `nn.BatchNorm1d`
calls). A scenario is judged in parts, each a check with its own points (`inputs.judging`): the
training outputs (the normalization), the running statistics (the moving average) and the
evaluation, which starts from running statistics the case gives, not from the ones the
student's training left. A slip in the running average then costs the running statistics'
points and not the outputs' (tests/test_checks.py pins each slip to its part). Effect sizes the
hidden inputs rely on, far above the 1e-5 tolerance for any seed:

- 4 values per channel: normalizing with the unbiased variance scales outputs by √(3/4) (13 %);
  storing the biased variance moves `running_var` by m·σ²/3 (≈ 0.03 at m = 0.1);
- the swapped momentum convention gives the new batch weight 1 − m instead of m (the same at
  m = 0.5: the square batch's check cannot tell them apart);
- a square (N = C) batch or an (N, L, C)-confusable (N, C, L = C) batch lets the wrong-axis slips
  run silently, so they are named rather than crash.

Rubric of `batch_norm` (10; points follow how central a property is): the training outputs 5
(the channel axis, over N and L, on (N, C, L) batches 3; the table of section 1, the few values
that tell the biased variance and the `eps` given 2), the running statistics 3 (which variance
is stored and the momentum's weight 1.75 on few values, the moving average on large batches
1.25),
the evaluation 2 (normalized with the running statistics, which it leaves alone). A slip in a
right structure costs only its own checks, because the checks of the structure use ≥ 4096
values per channel, where the n−1 slip is inside their tolerance (`WIDE`): either variance slip
keeps 8.25, a swapped momentum or running statistics never updated about 7, batch statistics in
evaluation 8. Statistics over other sets than each channel's are a wrong structure, capped at 2
(its evaluation, right, is all it keeps).

Rubric of `batch_norm_from_keras` (4): the port evaluates as the Keras layer did 1.75 (momentum
0.9 and 0.99, and an ε other than Keras's default), and trains on as Keras averages 2.25 (its
running_mean under three momenta 1.75, its running_var 0.5). Each slip costs what it breaks: the
momentum passed unconverted only the training on (keeps 1.75); PyTorch's default ε only the
evaluation (2.25), Keras's ε hard-coded the one check with another ε (3.5); γ and β not copied
the evaluation (2.25); the moving variance rescaled by n/(n−1) the evaluation and running_var
(1.75); buffers left at 0 and 1 everything. The moving variances span 1e-3 to 1, so that ε moves
the output of the smallest channel by far more than the tolerance and n/(n−1) that of the
largest.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.core import (
    WIDE,
    Arrays,
    Check,
    Exercise,
    Mistake,
    Structure,
    hidden,
    known_mistake,
    visible,
)
from grader.checks.inputs import judging
from grader.checks.library import NORMALIZATIONS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored, with_affine
from grader.grading.sandboxed.probes import (
    probe_batch_norm,
    probe_batch_norm_from_keras,
    probe_predict,
)
from normcheck.properties import (
    BATCH_NORM_RUNNING,
    BATCH_NORM_TRAINING,
    evaluated_on_the_batch,
)

# ---------------------------------------------------------------------------------------------
# batch_norm: running statistics with exact PyTorch semantics


def _batch_norm_variant(
    x,
    running_mean,
    running_var,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
    *,
    norm_correction=0,
    store_correction=1,
    swapped_momentum=False,
    update=True,
    update_in_eval=False,
    batch_stats_in_eval=False,
    axis="channel",
    fixed_eps=None,
):
    """One batch norm with a switch per classic mistake; all switches at defaults is correct."""
    eps = eps if fixed_eps is None else fixed_eps
    channel = (1, -1, *[1] * (x.dim() - 2))  # a (C,) tensor viewed against (N, C, *)
    if axis == "channel":  # every dim but 1: the channel's values over N (and L)
        dims, shape = (0, *range(2, x.dim())), channel
    elif axis == "sample":  # every dim but 0: one sample's features, LayerNorm's set
        dims, shape = tuple(range(1, x.dim())), (-1, *[1] * (x.dim() - 1))
    else:  # "last": channels taken as the last dim, the (N, L, C) reading of (N, C, L)
        dims, shape = tuple(range(x.dim() - 1)), (*[1] * (x.dim() - 1), -1)
    mean = x.mean(dims)
    biased = (x - mean.reshape(shape)).square().mean(dims)
    n = x.numel() // mean.numel()
    unbiased = biased * n / (n - 1) if n > 1 else torch.full_like(biased, float("nan"))
    if training or batch_stats_in_eval:
        mu = mean.reshape(shape)
        var = (unbiased if norm_correction else biased).reshape(shape)
    else:
        mu, var = running_mean.reshape(channel), running_var.reshape(channel)
    if (training and update) or update_in_eval:
        new = 1 - momentum if swapped_momentum else momentum
        stored = unbiased if store_correction else biased
        with torch.no_grad():
            running_mean.mul_(1 - new).add_(new * mean)
            running_var.mul_(1 - new).add_(new * stored)
    return with_affine((x - mu) / torch.sqrt(var + eps), weight, bias, channel)


_slip = partial(known_mistake, _batch_norm_variant)

BATCH_NORM_MISTAKES = (
    _slip(
        "unbiased variance to normalize",
        "You normalize with the unbiased variance (n−1); BatchNorm normalizes with the biased "
        "batch variance (÷ n) and keeps the unbiased one only for `running_var`.",
        norm_correction=1,
    ),
    _slip(
        "biased variance stored",
        "Your `running_var` accumulates the biased batch variance; PyTorch stores the unbiased "
        "one, σ²·n/(n−1), in `running_var` (it normalizes with the biased one).",
        store_correction=0,
    ),
    _slip(
        "swapped momentum",
        "Your running update is m·old + (1−m)·new, the Keras/CS231n convention; PyTorch's "
        "`momentum` is the weight of the new batch: (1−m)·old + m·new.",
        swapped_momentum=True,
    ),
    _slip(
        "running stats not updated",
        "`running_mean` and `running_var` are not updated in training: they must be changed in "
        "place (e.g. `running_mean.mul_(1 - m).add_(m * mean)`), not rebound to new tensors.",
        update=False,
    ),
    _slip(
        "running stats updated in eval",
        "Your evaluation call changes `running_mean`/`running_var`; with `training=False` the "
        "running statistics are only read, never updated.",
        update_in_eval=True,
    ),
    _slip(
        "batch statistics in eval",
        "With `training=False` you still normalize with the batch statistics; evaluation "
        "normalizes with `running_mean` and `running_var` (and leaves them unchanged).",
        batch_stats_in_eval=True,
    ),
    _slip(
        "per-sample statistics",
        "Your statistics run over each sample's features (LayerNorm's axis); BatchNorm's run "
        "over the batch for each channel (every dim except dim 1).",
        axis="sample",
        structural=True,
    ),
    _slip(
        "channels taken as the last dim",
        "Your statistics treat the last dim as the channels, as if the input were (N, L, C); "
        "BatchNorm's channels are dim 1 of an (N, C) or (N, C, L) input.",
        axis="last",
        structural=True,
    ),
    _slip("eps argument ignored", eps_ignored("BatchNorm"), fixed_eps=IGNORED_EPS),
)


def _bn_case(
    rng,
    batches: list[np.ndarray],
    x_eval: np.ndarray,
    *,
    affine: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    random_start: bool = False,
) -> Arrays:
    c = x_eval.shape[1]
    case: Arrays = {f"training batch {i + 1}": b for i, b in enumerate(batches)}
    case["evaluation batch"] = x_eval
    dtype = x_eval.dtype
    if random_start:
        case["running_mean"] = rng.normal(0.0, 2.0, c).astype(dtype)
        case["running_var"] = rng.uniform(0.5, 3.0, c).astype(dtype)
    else:
        case["running_mean"] = np.zeros(c, dtype)
        case["running_var"] = np.ones(c, dtype)
    if affine:
        case["weight"] = rng.uniform(0.5, 1.5, c).astype(dtype)  # never near 0
        case["bias"] = rng.normal(0.0, 0.5, c).astype(dtype)
    case["momentum"], case["eps"] = np.array(momentum), np.array(eps)
    return case


def _shifted(rng, *shape, dtype=np.float32) -> np.ndarray:
    """Channels with their own mean and scale, so the running statistics visibly move."""
    c = shape[1]
    loc = rng.normal(0.0, 3.0, c).reshape(1, c, *[1] * (len(shape) - 2))
    scale = rng.uniform(0.5, 3.0, c).reshape(1, c, *[1] * (len(shape) - 2))
    return (loc + scale * rng.standard_normal(shape)).astype(dtype)


SEED_TABLE = np.array([[1.0, 3.0], [5.0, 7.0]], np.float32)


def _bn_steps(rng, shape, steps=3, eval_n=None, **kwargs) -> Arrays:
    batches = [_shifted(rng, *shape) for _ in range(steps)]
    x_eval = _shifted(rng, eval_n or shape[0], *shape[1:])
    return _bn_case(rng, batches, x_eval, **kwargs)


def _scenario(
    run: Callable[..., Check],
    description: str,
    case,
    training: float,
    running: float,
    twins: tuple[float, float] = (0, 0),
    **options,
) -> tuple[Check, ...]:
    """A training scenario judged as two checks, `visible` or `hidden` as `run` says: its
    outputs (the normalization) and its running statistics (the moving average), each with its
    own points and the share of them its visible twin takes, if any (`twins`)."""
    return tuple(
        run(points, f"{description}: {words}", judging(part, case), twin=twin, **options)
        for part, words, points, twin in (
            ("training outputs", "outputs", training, twins[0]),
            ("running statistics", "running statistics", running, twins[1]),
        )
    )


def _table_evaluated(rng) -> Arrays:
    """Evaluation on the table with the running statistics one training step left (section 2)."""
    case = _bn_case(rng, [], SEED_TABLE)
    case["running_mean"] = np.array([0.3, 0.5], np.float32)
    case["running_var"] = np.array([1.7, 1.7], np.float32)
    return case


BATCH_NORM = Exercise(
    name="batch_norm",
    reference=F.batch_norm,
    probe=probe_batch_norm,
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=BATCH_NORM_MISTAKES,
    properties=(BATCH_NORM_TRAINING, *BATCH_NORM_RUNNING, evaluated_on_the_batch),
    structure=Structure("statistics per channel, dim 1, over every other dim", cap=2),
    forms=(("x", "2-d"), ("x", "3-d")),
    checks=(
        *_scenario(
            visible,
            "the table of section 1, (1, 3) and (5, 7), one training step",
            lambda rng: _bn_case(rng, [SEED_TABLE], SEED_TABLE),
            training=0.5,
            running=0.5,
        ),
        visible(
            0.5,
            "the table evaluated with the running statistics that step leaves",
            judging("evaluation", _table_evaluated),
        ),
        *_scenario(
            visible,
            "three training steps on distinct (16, 4, 256) batches with weight and bias",
            lambda rng: _bn_steps(rng, (16, 4, 256), affine=True),
            training=1.5,
            running=0.5,
            **WIDE,
        ),
        *_scenario(
            hidden,
            "(N, C, L) input with L = C: statistics per channel over N and L, three steps",
            lambda rng: _bn_steps(rng, (1024, 4, 4)),
            training=1.5,
            running=0.5,
            twins=(0.5, 0),
            **WIDE,
        ),
        *_scenario(
            hidden,
            "batches of 4 values per channel, momentum 0.3 (which variance goes where?)",
            lambda rng: _bn_steps(rng, (4, 5), steps=4, affine=True, momentum=0.3),
            training=1,
            running=1,
            twins=(0.25, 0.25),
            # four steps of float32 running statistics: a correct answer's rounding reaches
            # 7e-6 on some CPUs; storing the wrong variance moves them by a third
            rtol=1e-4,
            atol=1e-4,
        ),
        hidden(
            0.25,
            "running statistics that start elsewhere than 0 and 1, two steps",
            judging(
                "running statistics",
                lambda rng: _bn_steps(rng, (64, 3, 64), steps=2, random_start=True),
            ),
            **WIDE,
        ),
        *_scenario(
            hidden,
            "a square (5, 5) batch, momentum 0.5 and eps 1e-3",
            lambda rng: _bn_steps(rng, (5, 5), affine=True, momentum=0.5, eps=1e-3),
            training=0.5,
            running=0.25,
            twins=(0.25, 0),  # the student's own check() sees an `eps` ignored
        ),
        hidden(
            0.75,
            "evaluation on another batch with running statistics elsewhere than 0 and 1: "
            "normalized with them, which it leaves unchanged",
            judging(
                "evaluation",
                lambda rng: _bn_steps(rng, (64, 3, 64), steps=0, eval_n=5, random_start=True),
            ),
        ),
        hidden(
            0.75,
            "evaluation on a single sample uses the running statistics",
            judging(
                "evaluation",
                lambda rng: _bn_steps(rng, (4096, 4), steps=0, eval_n=1, random_start=True),
            ),
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# batch_norm_from_keras: a layer trained under the Keras / CS231n convention, ported to PyTorch's


def _from_keras_variant(
    gamma,
    beta,
    moving_mean,
    moving_variance,
    momentum=0.99,
    epsilon=1e-3,
    batch_size=32,
    *,
    momentum_converted=True,
    fixed_eps=None,
    buffers_copied=True,
    affine_copied=True,
    unbiased_variance=False,
):
    """The port with a switch per classic slip; all switches at defaults is correct."""
    layer = nn.BatchNorm1d(
        gamma.numel(),
        eps=epsilon if fixed_eps is None else fixed_eps,
        momentum=1.0 - momentum if momentum_converted else momentum,
    )
    rescale = batch_size / (batch_size - 1) if unbiased_variance else 1.0
    with torch.no_grad():
        if affine_copied:
            layer.weight.copy_(gamma)
            layer.bias.copy_(beta)
        if buffers_copied:
            layer.running_mean.copy_(moving_mean)
            layer.running_var.copy_(moving_variance * rescale)
    return layer


_port_slip = partial(known_mistake, _from_keras_variant)


def _keras_case(
    rng, part: str, momentum: float, epsilon: float = 1e-3, batch_size: int = 8, c: int = 6
) -> Arrays:
    """A trained Keras layer's weights, a batch to evaluate and three batches to train on. The
    moving variances span 1e-3 to 1: ε matters on the smallest, n/(n−1) on the largest. The
    means lie a few spreads from 0, so that float32's x − mean keeps its digits on any CPU."""
    f32 = np.float32
    moving_variance = rng.permutation(np.geomspace(1e-3, 1.0, c)) * rng.uniform(0.8, 1.2, c)
    spread = np.sqrt(moving_variance)
    moving_mean = spread * rng.normal(0.0, 3.0, c)
    shifted = moving_mean + spread * rng.uniform(2.0, 4.0, c)  # the new batches' means moved
    return {
        "gamma": rng.uniform(0.5, 2.0, c).astype(f32),
        "beta": rng.normal(0.0, 1.0, c).astype(f32),
        "moving_mean": moving_mean.astype(f32),
        "moving_variance": moving_variance.astype(f32),
        "momentum": np.array(momentum),
        "epsilon": np.array(epsilon),
        "batch_size": np.array(batch_size),
        "evaluation batch": (moving_mean + 2 * spread * rng.standard_normal((16, c))).astype(f32),
        "training batches": (shifted + spread * rng.standard_normal((3, batch_size, c))).astype(
            f32
        ),
        "judged": np.array(part),
    }


BATCH_NORM_FROM_KERAS = Exercise(
    name="batch_norm_from_keras",
    reference=_from_keras_variant,
    probe=probe_batch_norm_from_keras,
    mistakes=(
        _port_slip(
            "momentum not converted",
            "Your layer's `momentum` is the Keras momentum; Keras's weights the old running "
            "value, PyTorch's the new batch, so the port needs 1 − m (the buffers jump to the "
            "last batch otherwise).",
            momentum_converted=False,
        ),
        _port_slip(
            "PyTorch's default eps",
            "Your layer keeps PyTorch's default eps (1e-5); the Keras layer normalized with its "
            "own `epsilon` (1e-3 by default), which matters where a running variance is small.",
            fixed_eps=1e-5,
        ),
        _port_slip(
            "eps argument ignored",
            "Your layer uses Keras's default ε 1e-3 whatever `epsilon` it is given.",
            fixed_eps=1e-3,
        ),
        _port_slip(
            "running statistics not copied",
            "Your layer starts from PyTorch's fresh buffers (0 and 1); copy `moving_mean` and "
            "`moving_variance` into `running_mean` and `running_var`.",
            buffers_copied=False,
        ),
        _port_slip(
            "gamma and beta not copied",
            "Your layer keeps PyTorch's initial weight 1 and bias 0; copy γ into `weight` and β "
            "into `bias`.",
            affine_copied=False,
        ),
        _port_slip(
            "moving variance rescaled by n/(n−1)",
            "You rescale the moving variance by n/(n−1) as if to make it unbiased; evaluation "
            "divides by √(running_var + ε) whatever built it, and the Keras layer divided by "
            "its moving variance as stored: copy it unchanged.",
            unbiased_variance=True,
        ),
    ),
    checks=(
        visible(
            0.75,
            "momentum 0.9 (CS231n's), ε 1e-3, trained on batches of 8: evaluation",
            lambda rng: _keras_case(rng, "evaluation", 0.9),
        ),
        visible(
            0.5,
            "momentum 0.9, then three training steps in PyTorch: running_mean",
            lambda rng: _keras_case(rng, "running_mean", 0.9),
        ),
        hidden(
            0.5,
            "Keras's default momentum 0.99, batches of 32: evaluation",
            lambda rng: _keras_case(rng, "evaluation", 0.99, batch_size=32),
        ),
        hidden(
            0.5,
            "momentum 0.99, then three training steps: running_mean",
            lambda rng: _keras_case(rng, "running_mean", 0.99, batch_size=32),
        ),
        hidden(
            0.5,
            "momentum 0.99, then three training steps: running_var",
            lambda rng: _keras_case(rng, "running_var", 0.99, batch_size=32),
        ),
        hidden(
            0.5,
            "another ε given (1e-2): evaluation",
            lambda rng: _keras_case(rng, "evaluation", 0.99, epsilon=1e-2),
            twin=0.25,  # the student's own check() sees Keras's ε hard-coded too
        ),
        hidden(
            0.75,
            "another Keras momentum, then three training steps: running_mean",
            lambda rng: _keras_case(rng, "running_mean", float(rng.uniform(0.55, 0.85))),
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# predict: evaluation outputs without touching the buffers (no_grad is not eval)


def _predict_reference(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        y = model(x)
    model.train(was_training)
    return y


def _predict_no_grad(model, x):
    with torch.no_grad():
        return model(x)


def _predict_not_restored(model, x):
    model.eval()
    with torch.no_grad():
        return model(x)


def _predict_with_graph(model, x):
    was_training = model.training
    model.eval()
    y = model(x)
    model.train(was_training)
    return y


def _predict_back_to_train(model, x):
    model.eval()
    with torch.no_grad():
        y = model(x)
    model.train()
    return y


def _predict_case(rng, n: int, training: bool) -> Arrays:
    d, h = 5, 6
    f32 = np.float32
    return {
        "w1": rng.normal(0, 0.5, (h, d)).astype(f32),
        "b1": rng.normal(0, 0.5, h).astype(f32),
        "gamma": rng.uniform(0.5, 1.5, h).astype(f32),
        "beta": rng.normal(0, 0.3, h).astype(f32),
        # running statistics far from any single batch's, as after training on other data
        "running_mean": rng.normal(0, 1.5, h).astype(f32),
        "running_var": rng.uniform(2.0, 4.0, h).astype(f32),
        "tracked": np.array(100),
        "w2": rng.normal(0, 0.5, (3, h)).astype(f32),
        "b2": rng.normal(0, 0.5, 3).astype(f32),
        "training": np.array(training),
        "x": rng.standard_normal((n, d)).astype(f32),
    }


PREDICT = Exercise(
    name="predict",
    reference=_predict_reference,
    probe=probe_predict,
    mistakes=(
        Mistake(
            "no_grad taken for eval",
            "`torch.no_grad()` only stops gradient tracking: in train mode BatchNorm still "
            "normalizes with the batch statistics and updates its running buffers; call "
            "`model.eval()` for evaluation.",
            _predict_no_grad,
        ),
        Mistake(
            "mode not restored",
            "The model is left in eval mode; put it back in the mode it was in "
            "(`model.train(was_training)`), or the next training step silently stops updating "
            "BatchNorm's statistics.",
            _predict_not_restored,
        ),
        Mistake(
            "autograd graph built",
            "Your outputs carry an autograd graph; evaluation also needs `torch.no_grad()` (or "
            "`torch.inference_mode()`) — not for BatchNorm's sake, for memory and speed.",
            _predict_with_graph,
        ),
        Mistake(
            "always back to train mode",
            "A model that was already in eval mode comes back in train mode; restore the mode "
            "it was in (`model.training` before the call), not always `train()`.",
            _predict_back_to_train,
        ),
    ),
    checks=(
        visible(
            2,
            "a model in train mode: outputs from the running statistics, buffers untouched",
            lambda rng: _predict_case(rng, 8, training=True),
        ),
        hidden(
            1,
            "a model already in eval mode stays in eval mode",
            lambda rng: _predict_case(rng, 8, training=False),
            twin=0.5,
        ),
        hidden(
            1,
            "a model in train mode, asked about a single sample",
            lambda rng: _predict_case(rng, 1, training=True),
        ),
    ),
)

EXERCISES = (BATCH_NORM, BATCH_NORM_FROM_KERAS, PREDICT)
