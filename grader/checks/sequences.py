"""Checks for notebook 03: `lengths_to_mask`, `masked_batch_norm`, `masked_mean_pool`.

One mask convention: bool, True = real token. Hidden inputs use real tokens with feature means
between 1 and 5 (std 2) and padding that is zero, garbage (mean −5, std 20) or NaN, so that any
statistic that reads the padding is off by far more than the tolerance (notebook 03 shows the
sizes: zero padding drags BatchNorm's mean towards 0 in proportion to the padded share, and naive
mean pooling of a length-2 sequence padded to 20 is off by ~0.7; docs/margins.md has each
mistake's distance from the tolerance). Every error case expects a ValueError, never a NaN
(`Check(expects=ValueError)`).

Rubrics: `lengths_to_mask` (5) gives 2 to the mask itself (one row per sequence, max_len
columns) and 1.5 to each edge (long and single-token rows, empty rows, refused lengths): an
inverted mask keeps 1, an off-by-one 1.5. `masked_batch_norm` (8) and `masked_mean_pool` (5)
give most points to statistics over the real tokens only: padding in the statistics is a wrong
structure, capped at 1.5 of 8 and 1 of 5; NaN padding through `x * mask` costs only its own
checks (0.5 of 8, 0.5 of 5). As in `batch_norm` (batch_norm.py), a scenario of
`masked_batch_norm` is judged in parts with their own points (`inputs.judging`): the outputs
4.75, the running statistics 1.75, the evaluation 1 (and the refused empty batch 0.5), so a
slip in the running average (biased, over the padding, a padded count, not in place) keeps 6.25
and batch statistics in evaluation 7; the padding and NaN checks judge the outputs alone.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from grader.checks.core import Arrays, Exercise, Structure, hidden, known_mistake, visible
from grader.checks.inputs import judging
from grader.checks.library import MASKED_MEAN, NORMALIZATIONS, SEQUENCE_MASKS, forbid
from grader.checks.variants import IGNORED_EPS, eps_ignored, with_affine
from grader.grading.sandboxed.probes import probe_mask, probe_masked_bn, probe_pool
from grader.reference import masking as ref
from normcheck.properties import MASKED_BATCH_NORM, MASKED_RUNNING, zero_padding


def _lengths_mask(lengths: np.ndarray, max_len: int) -> np.ndarray:
    return np.arange(max_len)[None, :] < lengths[:, None]


def _padded(
    rng: np.random.Generator, lengths, max_len: int | None = None, dim: int = 4, pad: str = "zero"
) -> Arrays:
    """A (B, L, D) float32 batch of real tokens (feature means 1..5, std 2) and its bool mask."""
    lengths = np.asarray(lengths)
    max_len = int(lengths.max()) if max_len is None else max_len
    means = rng.uniform(1.0, 5.0, dim)
    x = means + 2.0 * rng.standard_normal((len(lengths), max_len, dim))
    mask = _lengths_mask(lengths, max_len)
    if pad == "zero":
        x[~mask] = 0.0
    elif pad == "garbage":
        x[~mask] = rng.normal(-5.0, 20.0, ((~mask).sum(), dim))
    elif pad == "nan":  # NaN in one feature's padding, garbage in the others'
        x[~mask] = rng.normal(-5.0, 20.0, ((~mask).sum(), dim))
        x[~mask, int(rng.integers(dim))] = np.nan
    return {"x": x.astype(np.float32), "mask": mask}


# ---------------------------------------------------------------------------------------------
# lengths_to_mask


def _mask_variant(
    lengths,
    max_len=None,
    *,
    inverted=False,
    inclusive=False,
    ignore_max_len=False,
    as_numbers=False,
    validate=True,
):
    """lengths_to_mask with a switch per classic slip; all switches off is correct."""
    lengths = torch.as_tensor(lengths)
    if max_len is None or ignore_max_len:
        max_len = int(lengths.max())
    if validate and ((lengths < 0).any() or (lengths > max_len).any()):
        raise ValueError(f"lengths must lie in [0, max_len={max_len}]")
    positions = torch.arange(max_len)
    mask = positions <= lengths[:, None] if inclusive else positions < lengths[:, None]
    mask = ~mask if inverted else mask
    return mask.long() if as_numbers else mask


def _mask_case(lengths, max_len=None, **flags) -> Arrays:
    case = {"lengths": np.asarray(lengths, dtype=np.int64)}
    if max_len is not None:
        case["max_len"] = np.array(max_len)
    return case | {k: np.array(True) for k, v in flags.items() if v}


def _very_different_lengths(rng) -> Arrays:
    lengths = [1, int(rng.integers(150, 300)), int(rng.integers(2, 9)), 1]
    return _mask_case(rng.permutation(lengths))


def _with_empty_sequences(rng) -> Arrays:
    lengths = rng.integers(1, 6, 5)
    lengths[rng.choice(5, 2, replace=False)] = 0
    return _mask_case(lengths, max_len=int(lengths.max()) + int(rng.integers(1, 4)))


def _negative_length(rng) -> Arrays:
    # -1, the boundary: an answer that lets -1 through but refuses -2 must fail every run
    lengths = rng.integers(1, 6, 4)
    lengths[rng.integers(4)] = -1
    return _mask_case(lengths, max_len=6)


def _too_long(rng) -> Arrays:
    lengths = rng.integers(1, 4, 4)
    lengths[rng.integers(4)] = 5  # max_len + 1, the boundary
    return _mask_case(lengths, max_len=4)


_mask_slip = partial(known_mistake, _mask_variant)

LENGTHS_TO_MASK = Exercise(
    name="lengths_to_mask",
    reference=ref.lengths_to_mask,
    probe=probe_mask,
    forms=(("lengths", "list"), ("lengths", "Tensor")),
    forbidden=forbid(SEQUENCE_MASKS),
    mistakes=(
        _mask_slip(
            "lengths outside [0, max_len] accepted",
            "A length below 0 or above max_len is accepted silently (it just makes a row of "
            "False or is cut off); raise a ValueError that names the bad length.",
            validate=False,
        ),
        _mask_slip(
            "True marks padding",
            "Your mask is True at the padding; the course's convention is True = real token "
            "(PyTorch's key_padding_mask uses the opposite one: pass it ~mask).",
            inverted=True,
        ),
        _mask_slip(
            "off by one",
            "Your mask has one True too many per sequence: position t is real when t < length "
            "(positions count from 0).",
            inclusive=True,
        ),
        _mask_slip(
            "max_len ignored",
            "`max_len` is ignored: the mask must have max_len columns when it is given, even "
            "when it is longer than every sequence.",
            ignore_max_len=True,
        ),
        _mask_slip(
            "0/1 numbers instead of bool",
            "Your mask holds 0/1 numbers; it must be a bool tensor (x[mask] selects rows only "
            "with a bool mask; an integer one indexes rows 0 and 1).",
            as_numbers=True,
        ),
    ),
    checks=(
        visible(
            1,
            "lengths given as a list: one row per sequence, as many columns as the longest",
            lambda rng: _mask_case([3, 1, 4], as_list=True),
        ),
        visible(
            1,
            "lengths given as a tensor, with a max_len longer than every sequence",
            lambda rng: _mask_case([2, 5], max_len=7),
        ),
        hidden(1, "very different lengths in one batch", _very_different_lengths),
        hidden(
            0.5,
            "single-token sequences",
            lambda rng: _mask_case(np.ones(int(rng.integers(3, 9)), np.int64)),
        ),
        hidden(0.5, "a sequence of length 0 gives a row of False", _with_empty_sequences),
        hidden(
            0.5,
            "a negative length raises ValueError",
            _negative_length,
            twin=0.25,
            expects=ValueError,
        ),
        hidden(0.5, "a length above max_len raises ValueError", _too_long, expects=ValueError),
    ),
)

# ---------------------------------------------------------------------------------------------
# masked_batch_norm


def _masked_bn_variant(
    x,
    mask,
    running_mean=None,
    running_var=None,
    weight=None,
    bias=None,
    training=False,
    momentum=0.1,
    eps=1e-5,
    *,
    pad_in_stats=False,
    pad_in_running=False,
    biased_running=False,
    padded_count=False,
    eval_batch_stats=False,
    multiply_mask=False,
    check_empty=True,
    in_place=True,
    fixed_eps=None,
):
    """Masked BatchNorm over (B, L, D) with a switch per classic slip; all off is correct."""
    eps = eps if fixed_eps is None else fixed_eps
    if check_empty and not mask.any():
        raise ValueError("no real tokens")
    m = mask[..., None]  # (B, L, 1)
    n_real, n_all = int(mask.sum()), mask.numel()

    def stats(everything: bool):
        if everything:
            flat = x.reshape(-1, x.shape[-1])
            mean = flat.mean(0)
            return mean, ((flat - mean) ** 2).mean(0)
        if multiply_mask:  # 0 · NaN = NaN: the padding's values still reach the sums
            mean = (x * m).sum((0, 1)) / n_real
            return mean, (((x - mean) * m) ** 2).sum((0, 1)) / n_real
        real = x[mask]  # (N_real, D)
        mean = real.mean(0)
        return mean, ((real - mean) ** 2).mean(0)

    if training or running_mean is None or eval_batch_stats:
        mean, var = stats(pad_in_stats)
        if training and running_mean is not None:
            r_mean, r_var = stats(pad_in_stats or pad_in_running)
            n = n_all if (padded_count or pad_in_stats or pad_in_running) else n_real
            unbiased = r_var if biased_running else r_var * n / (n - 1)
            with torch.no_grad():
                new_mean = (1 - momentum) * running_mean + momentum * r_mean
                new_var = (1 - momentum) * running_var + momentum * unbiased
                if in_place:
                    running_mean.copy_(new_mean)
                    running_var.copy_(new_var)
                else:  # rebinding the names: the caller's tensors never change
                    running_mean, running_var = new_mean, new_var
    else:
        mean, var = running_mean, running_var
    y = with_affine((x - mean) / torch.sqrt(var + eps), weight, bias)
    return y * m if multiply_mask else torch.where(m, y, 0.0)


def _bn_scenario(
    rng,
    steps,
    max_len,
    dim=4,
    *,
    training=None,
    running=True,
    affine=False,
    pad="zero",
    random_start=False,
    momentum=0.1,
    eps=1e-5,
    **flags,
) -> Arrays:
    """One batch per step (a lengths array each, all padded to max_len), run in training unless
    `training` says otherwise; running statistics start at 0 and 1 (random with `random_start`,
    as after training on other data)."""
    batches = [_padded(rng, lengths, max_len, dim, pad) for lengths in steps]
    case = {
        "x": np.stack([b["x"] for b in batches]),
        "mask": np.stack([b["mask"] for b in batches]),
        "training": np.array([True] * len(steps) if training is None else training),
        "momentum": np.array(momentum),
        "eps": np.array(eps),
    }
    if running:
        case["running_mean"] = np.zeros(dim, np.float32)
        case["running_var"] = np.ones(dim, np.float32)
        if random_start:
            case["running_mean"] = rng.uniform(1.0, 5.0, dim).astype(np.float32)
            case["running_var"] = rng.uniform(2.0, 6.0, dim).astype(np.float32)
    if affine:
        case["weight"] = rng.normal(1.0, 0.5, dim).astype(np.float32)
        case["bias"] = rng.normal(0.0, 0.5, dim).astype(np.float32)
    return case | {k: np.array(True) for k, v in flags.items() if v}


def _appended_padding(rng) -> Arrays:
    lengths = [int(rng.integers(8, 13)), 1, int(rng.integers(3, 7))]
    return _bn_scenario(
        rng, [lengths], 4 * max(lengths), pad="garbage", affine=True, random_start=True
    )


def _extreme_batch(rng) -> Arrays:
    # A long sequence, single-token ones, and an all-padding row, in a random order.
    lengths = rng.permutation([int(rng.integers(20, 40)), 1, 1, 0, int(rng.integers(2, 5))])
    return _bn_scenario(rng, [lengths], int(lengths.max()) + 3, pad="garbage")


def _running_scenario(rng) -> Arrays:
    steps = [rng.integers(1, 9, 4) for _ in range(4)]
    return _bn_scenario(rng, steps, 10, affine=True, momentum=0.3, eps=0.1)


# The visible scenario's lengths: every step a different mask, some padding in each
THREE_STEPS = [[5, 2], [3, 6], [1, 4]]


def _eval_composition(rng) -> Arrays:
    lengths = rng.integers(1, 7, int(rng.integers(2, 6)))
    return _bn_scenario(rng, [lengths], 8, training=[False], pad="garbage", random_start=True)


_bn_slip = partial(known_mistake, _masked_bn_variant)

MASKED_BATCH_NORM = Exercise(
    name="masked_batch_norm",
    reference=ref.masked_batch_norm,
    probe=probe_masked_bn,
    properties=(MASKED_BATCH_NORM, *MASKED_RUNNING, zero_padding),
    structure=Structure("statistics per feature over the real tokens only", cap=1.5),
    rtol=1e-4,  # float32 statistics over a few hundred tokens and four steps
    atol=1e-4,
    forbidden=forbid(*NORMALIZATIONS),
    mistakes=(
        _bn_slip(
            "no error for a batch without real tokens",
            "A batch with no real token has no statistics (0/0 = NaN); raise a ValueError "
            "instead of returning NaN or updating the running statistics with it.",
            check_empty=False,
        ),
        # before the structural one, whose running statistics are the same: a check of the
        # running statistics alone says this, not that the whole structure is wrong
        _bn_slip(
            "padding included in the running statistics",
            "Your running_mean and running_var are updated from every position, padding "
            "included; evaluation then uses polluted statistics.",
            pad_in_running=True,
        ),
        _bn_slip(
            "padding included in the statistics",
            "Your statistics include the padded positions: the mean and variance must run over "
            "the real tokens only (x[mask]); the padding drags them toward its own value.",
            pad_in_stats=True,
            structural=True,
        ),
        _bn_slip(
            "padded count in the unbiased correction",
            "running_var's unbiased correction n/(n−1) counts the padded positions; n is the "
            "number of real tokens.",
            padded_count=True,
        ),
        _bn_slip(
            "biased running variance",
            "running_var is updated with the biased variance; like nn.BatchNorm1d it stores the "
            "unbiased one, n/(n−1)·σ², n being the number of real tokens.",
            biased_running=True,
        ),
        _bn_slip(
            "running statistics not updated in place",
            "running_mean and running_var are never changed for the caller: update them in "
            "place (running_mean.mul_(1 − m).add_(m·mean), or running_mean[:] = …); assigning "
            "a new tensor to the argument's name is lost when the function returns.",
            in_place=False,
        ),
        _bn_slip(
            "batch statistics in evaluation",
            "With training=False the running statistics must be used, not the statistics of the "
            "batch in front of you.",
            eval_batch_stats=True,
        ),
        _bn_slip(
            "masking by multiplication",
            "The padding's values still reach your arithmetic: x·mask keeps 0·NaN = NaN (and "
            "0·inf); select the real tokens (x[mask], torch.where) instead of multiplying.",
            multiply_mask=True,
        ),
        _bn_slip("eps argument ignored", eps_ignored("BatchNorm"), fixed_eps=IGNORED_EPS),
    ),
    checks=(
        visible(
            1,
            "one training step, no running statistics: equals BatchNorm over the real tokens",
            lambda rng: _bn_scenario(rng, [[6, 2]], 6, dim=3, running=False),
        ),
        visible(
            0.5,
            "three training steps: outputs",
            judging("outputs", lambda rng: _bn_scenario(rng, THREE_STEPS, 6, dim=3)),
        ),
        visible(
            0.5,
            "three training steps: running statistics",
            judging("running statistics", lambda rng: _bn_scenario(rng, THREE_STEPS, 6, dim=3)),
        ),
        hidden(
            0.75,
            "invariant to appended padding (4× the longest sequence, any padding values)",
            judging("outputs", _appended_padding),
        ),
        hidden(
            0.25,
            "one training step from running statistics elsewhere than 0 and 1, padding appended: "
            "running statistics",
            judging("running statistics", _appended_padding),
        ),
        hidden(
            1,
            "very different lengths, single-token sequences and an all-padding row",
            judging("outputs", _extreme_batch),
        ),
        hidden(
            0.5,
            "batches with different masks, momentum 0.3 and eps 0.1: outputs",
            judging("outputs", _running_scenario),
            twin=0.25,  # the student's own check() sees an `eps` ignored
        ),
        hidden(
            1,
            "running statistics over real tokens only, across batches with different masks, "
            "momentum 0.3",
            judging("running statistics", _running_scenario),
        ),
        hidden(
            1,
            "evaluation: a token's output does not depend on the rest of the batch, and the "
            "running statistics are left unchanged",
            judging("evaluation", _eval_composition),
            twin=0.25,
        ),
        hidden(
            0.5,
            "NaN padding never reaches the output",
            judging(
                "outputs", lambda rng: _bn_scenario(rng, [rng.integers(1, 7, 3)], 8, pad="nan")
            ),
            twin=0.25,
        ),
        hidden(
            0.5,
            "the output is 0 at padded positions",
            judging(
                "outputs",
                lambda rng: _bn_scenario(
                    rng, [rng.integers(1, 7, 3)], 8, pad="garbage", affine=True, grade_padding=True
                ),
            ),
        ),
        hidden(
            0.5,
            "a batch with no real tokens raises ValueError",
            lambda rng: _bn_scenario(rng, [np.zeros(3, np.int64)], 5),
            twin=0.25,
            expects=ValueError,
        ),
    ),
)

# ---------------------------------------------------------------------------------------------
# masked_mean_pool


def _pool_variant(
    h, mask, *, include_padding=False, divide_by_length=False, multiply_mask=False, empty="error"
):
    """Mean over time with a switch per classic slip; all off is correct."""
    count = mask.sum(1, keepdim=True)  # (B, 1)
    if empty == "error" and (count == 0).any():
        raise ValueError("a sequence with no real tokens has no mean")
    if include_padding:
        return h.mean(1)
    m = mask[..., None]
    total = (h * m).sum(1) if multiply_mask else torch.where(m, h, 0.0).sum(1)
    if divide_by_length:
        return total / h.shape[1]
    return total / (count.clamp(min=1) if empty == "zero" else count)


def _pool_case(rng, lengths, max_len=None, pad="garbage", **flags) -> Arrays:
    return _padded(rng, lengths, max_len, dim=5, pad=pad) | {
        k: np.array(True) for k, v in flags.items() if v
    }


def _pool_appended(rng) -> Arrays:
    lengths = rng.integers(1, 6, 4)
    return _pool_case(rng, lengths, 5 * int(lengths.max()))


def _pool_empty_row(rng) -> Arrays:
    lengths = rng.integers(1, 6, 4)
    lengths[rng.integers(4)] = 0
    return _pool_case(rng, lengths, 6, pad="zero")


_pool_slip = partial(known_mistake, _pool_variant)

MASKED_MEAN_POOL = Exercise(
    name="masked_mean_pool",
    reference=partial(ref.masked_mean, dim=1),
    probe=probe_pool,
    forbidden=forbid(MASKED_MEAN, own=("masked_mean_pool",)),
    structure=Structure("a mean over each sequence's real tokens only", cap=1),
    mistakes=(
        _pool_slip(
            "empty sequence gives NaN",
            "A sequence with no real tokens gives 0/0 = NaN silently; raise a ValueError that "
            "says which sequence is empty.",
            empty="nan",
        ),
        _pool_slip(
            "empty sequence hidden by clamping the count",
            "Clamping the token count to at least 1 turns a sequence with no real tokens into a "
            "silent vector of zeros; raise a ValueError instead.",
            empty="zero",
        ),
        _pool_slip(
            "padding included in the mean",
            "Your pooled vector includes the padded positions (the naive h.mean(1)); average "
            "over the real tokens only.",
            include_padding=True,
            structural=True,
        ),
        _pool_slip(
            "divided by the padded length",
            "You sum the real tokens but divide by the padded length L; divide by each "
            "sequence's number of real tokens, mask.sum(1).",
            divide_by_length=True,
            structural=True,
        ),
        _pool_slip(
            "masking by multiplication",
            "The padding's values still reach your sum: h·mask keeps 0·NaN = NaN; select the "
            "real tokens with torch.where(mask[..., None], h, 0) instead of multiplying.",
            multiply_mask=True,
        ),
    ),
    checks=(
        visible(
            1,
            "the mean over the real tokens of a (2, 5, 5) batch with values in its padding",
            lambda rng: _pool_case(rng, [5, 2]),
        ),
        hidden(
            1,
            "very different lengths, garbage in the padding",
            lambda rng: _pool_case(rng, rng.permutation([1, int(rng.integers(100, 200)), 3])),
        ),
        hidden(1, "invariant to appended padding (5× the longest sequence)", _pool_appended),
        hidden(
            0.5,
            "single-token sequences give that token",
            lambda rng: _pool_case(rng, np.ones(3, np.int64), int(rng.integers(2, 6))),
        ),
        hidden(
            0.5,
            "NaN padding never reaches the result",
            lambda rng: _pool_case(rng, rng.integers(1, 7, 3), 8, pad="nan"),
            twin=0.25,
        ),
        hidden(
            1,
            "a sequence with no real tokens raises ValueError (not NaN)",
            _pool_empty_row,
            twin=0.5,
            expects=ValueError,
        ),
    ),
)

EXERCISES = (LENGTHS_TO_MASK, MASKED_BATCH_NORM, MASKED_MEAN_POOL)
