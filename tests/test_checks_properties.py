"""Wrong answers that no known mistake matches are still explained by what their output gets
wrong (normcheck/properties.py and the blocks' residual structure in placement.py): a shape
read against the inputs, a running average's weights, a variance's facts, a momentum's
convention, a per-row factor, NaN where the output is finite, a residual combination, a refusal
that returned values. Each answer below is unseen (not one of the exercises' mistakes)."""

from __future__ import annotations

import re
from functools import partial

import numpy as np
import pytest
import torch
from conftest import SEEDS
from test_checks import _course_text

from grader.checks import EXERCISES, run
from grader.checks.batch_norm import _batch_norm_variant
from grader.checks.core import Check, Exercise, hidden, judge, prepare, visible
from grader.checks.layer_norm import _backward_variant, _layer_norm_variant
from grader.checks.sequences import _mask_variant, _masked_bn_variant
from grader.grading.sandboxed import probes
from grader.grading.sandboxed.calling import trailing_dims
from grader.reference.blocks import PostLNBlock, PreLNBlock
from normcheck.gradients import PATHS, layer_norm_paths


def _weight_alone(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    y = _layer_norm_variant(x, normalized_shape, eps=eps)
    return y if weight is None else weight  # the weight replaces the output


def _root_of_var_minus_eps(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = trailing_dims(normalized_shape)
    centred = x - x.mean(dims, keepdim=True)
    y = centred / ((centred**2).mean(dims, keepdim=True) - eps).sqrt()
    return y if weight is None else y * weight + bias


def _var_last_dim(x, dim=-1):
    return ((x - x.mean(-1, keepdim=True)) ** 2).mean(-1)


def _mean_square(x, dim=-1):
    return (x * x).mean(dim)


def _half_momentum_batch_norm(*args, momentum=0.1, **kwargs):
    return _batch_norm_variant(*args, momentum=momentum / 2, **kwargs)


def _half_momentum_masked(*args, momentum=0.1, **kwargs):
    return _masked_bn_variant(*args, momentum=momentum / 2, **kwargs)


def _pool_over_features(h, mask):
    return torch.where(mask[..., None], h, 0.0).sum(2) / mask.sum(1, keepdim=True)


def _pool_sum(h, mask):
    return torch.where(mask[..., None], h, 0.0).sum(1)


def _backward_without_rstd(grad_out, x, normalized_shape, weight=None, eps=1e-5):
    grad_x, grad_weight, grad_bias = _backward_variant(grad_out, x, normalized_shape, weight, eps)
    dims = trailing_dims(normalized_shape)
    sigma = (x.var(dims, keepdim=True, correction=0) + eps).sqrt()
    return grad_x * sigma, grad_weight, grad_bias


def _backward_gradients_of_a_missing_weight(grad_out, x, normalized_shape, weight=None, eps=1e-5):
    if weight is None:  # gradients for a weight of ones, where None is promised
        weight = torch.ones(x.shape[-len(trailing_dims(normalized_shape)) :], dtype=x.dtype)
    return _backward_variant(grad_out, x, normalized_shape, weight, eps)


def _centered_over_the_last_dim(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = trailing_dims(normalized_shape)
    centred = x - x.mean(-1, keepdim=True)  # the mean over the last dim, the variance over all
    y = centred / ((centred**2).mean(dims, keepdim=True) + eps).sqrt()
    return y if weight is None else y * weight + bias


def _about_the_last_dims_mean(x, dim=-1):
    return ((x - x.mean(-1, keepdim=True)) ** 2).mean(dim)


def _pool_upside_down(h, mask):
    return mask.sum(1, keepdim=True) / torch.where(mask[..., None], h, 0.0).sum(1)


def _backward_with_terms(mean_term=1.0, spread_term=1.0, affine="right"):
    """The closed form with each of grad_x's terms through μ and σ taken `…_term` times, and
    grad_weight right, replaced by grad_bias's formula or grad_out divided by x̂ summed."""

    def backward(grad_out, x, normalized_shape, weight=None, eps=1e-5):
        dims = trailing_dims(normalized_shape)
        rstd = (x.var(dims, keepdim=True, correction=0) + eps).rsqrt()
        x_hat = (x - x.mean(dims, keepdim=True)) * rstd
        g = grad_out * weight if weight is not None else grad_out
        through_mean = g.mean(dims, keepdim=True)
        through_spread = x_hat * (g * x_hat).mean(dims, keepdim=True)
        grad_x = rstd * (g - mean_term * through_mean - spread_term * through_spread)
        if weight is None:
            return grad_x, None, None
        lead = tuple(range(x.dim() - len(dims)))
        summed = {"right": grad_out * x_hat, "bias's": grad_out, "divided": grad_out / x_hat}
        return grad_x, summed[affine].sum(lead), grad_out.sum(lead)

    return backward


UNSEEN = [
    ("layer_norm", _centered_over_the_last_dim, "has mean 0 over the last dim only"),
    ("stable_var", _about_the_last_dims_mean, "deviations from the mean along another dim"),
    ("masked_mean_pool", _pool_upside_down, "1 / the correct value"),
    (
        "layer_norm_backward",
        _backward_with_terms(mean_term=0),
        "`grad_x` misses the term through the mean μ",
    ),
    (
        "layer_norm_backward",
        _backward_with_terms(spread_term=-1),
        "takes the term through the spread σ -1 times, not once",
    ),
    (
        "layer_norm_backward",
        _backward_with_terms(mean_term=0, spread_term=2),
        "misses the term through the mean μ; it takes the term through the spread σ 2 times",
    ),
    (
        "layer_norm_backward",
        _backward_with_terms(affine="bias's"),
        "`grad_weight` is Σ grad_out, where Σ grad_out·x̂ belongs",
    ),
    (
        "layer_norm_backward",
        _backward_with_terms(affine="divided"),
        "than any Σ grad_out·x̂ can be",
    ),
    ("layer_norm", _weight_alone, "has the shape of `weight` alone"),
    ("layer_norm", _root_of_var_minus_eps, "NaN or infinite in every position"),
    ("stable_var", _var_last_dim, "is `x` reduced over dim 1, where dim 0 should be reduced"),
    ("stable_var", _mean_square, "not measured from the values' own mean"),
    ("batch_norm", _half_momentum_batch_norm, "with weight 0.05, not momentum = 0.1"),
    ("masked_batch_norm", _half_momentum_masked, "with weight 0.05, not momentum = 0.1"),
    ("masked_mean_pool", _pool_over_features, "reduced over dim 2, where dim 1 should be"),
    ("layer_norm_backward", _backward_without_rstd, "1/σ is missing or wrong in that term"),
    ("masked_mean_pool", _pool_sum, "a factor that changes from row to row"),
    (
        "layer_norm_backward",
        _backward_gradients_of_a_missing_weight,
        "are None: no, where the exercise asks for yes",
    ),
    (
        "lengths_to_mask",
        partial(_mask_variant, validate=False, inclusive=True),
        "returned values on inputs it must refuse: raise ValueError",
    ),
]


@pytest.mark.parametrize(
    ("name", "answer", "words"), UNSEEN, ids=[f"{n}-{w[:30]}" for n, _, w in UNSEEN]
)
def test_an_unseen_wrong_answer_is_explained_by_a_property_of_its_output(name, answer, words):
    for seed in SEEDS[:3]:
        verdict = run(EXERCISES[name], answer, hidden=True, seed=seed, source="")
        assert verdict.score < EXERCISES[name].points
        explained = [o for o in verdict.outcomes if words in o.problem and o.mistake is None]
        assert explained and all(o.finding for o in explained), verdict.render()
    _speaks_the_courses_words(name, verdict.render())


@pytest.mark.parametrize("normalized", [(7,), (3, 5)])
@pytest.mark.parametrize("weight", [True, False])
def test_the_numerical_paths_of_layer_norms_gradient_sum_to_autograds(normalized, weight):
    """The three paths measured by finite differences add up to the gradient autograd takes of
    Σ grad_out·LN(x), and none of them is 0: each is a real term a grad_x can miss."""
    rng = np.random.default_rng(3)
    shape = (4, *normalized)
    a = {
        "x": rng.normal(2.0, 0.5, shape),
        "grad_out": rng.standard_normal(shape),
        "normalized_shape": np.array(normalized),
        "eps": np.array(1e-3),
    }
    if weight:
        a["weight"] = rng.normal(1.0, 0.5, normalized)
    x = torch.from_numpy(a["x"]).requires_grad_(True)
    w = torch.from_numpy(a["weight"]) if weight else None
    y = torch.nn.functional.layer_norm(x, normalized, w, None, 1e-3)
    (y * torch.from_numpy(a["grad_out"])).sum().backward()
    paths = layer_norm_paths(a)
    assert list(paths) == list(PATHS)
    np.testing.assert_allclose(sum(paths.values()), x.grad.numpy(), rtol=1e-6, atol=1e-8)
    assert all(np.abs(p).max() > 1e-3 for p in paths.values())


def _speaks_the_courses_words(name: str, feedback: str) -> None:
    """Every name feedback writes as code is one the exercise's notebook uses."""
    text = _course_text(name)
    unknown = {n for n in re.findall(r"`([^`]+)`", feedback) if n not in text}
    assert not unknown, f"{unknown} is not a name the notebook uses"


def _post_ln_subtracting(self, x):
    x = self.norm1(x - self._sa_block(x, None, None))
    return self.norm2(x + self._ff_block(x))


def _pre_ln_subtracting(self, x):
    x = x + self._sa_block(self.norm1(x), None, None)
    return x - self._ff_block(self.norm2(x))


def _pre_ln_without_attention(self, x):
    return x + self._ff_block(self.norm2(x))


def _post_ln_attending_across_the_batch(self, x):
    mixed = self._sa_block(x.transpose(0, 1), None, None).transpose(0, 1)  # over B, not T
    x = self.norm1(x + mixed)
    return self.norm2(x + self._ff_block(x))


BLOCKS = [
    ("PostLNBlock", PostLNBlock, _post_ln_subtracting, "what norm1 receives is x − F₁(x)"),
    ("PreLNBlock", PreLNBlock, _pre_ln_subtracting, "`output` is u − F₂(LN₂(u))"),
    ("PreLNBlock", PreLNBlock, _pre_ln_without_attention, "`norm1` is called 0 times"),
    (
        "PostLNBlock",
        PostLNBlock,
        _post_ln_attending_across_the_batch,
        "samples are mixed across the batch",
    ),
]


@pytest.mark.parametrize(
    ("name", "base", "forward", "words"), BLOCKS, ids=[w[:30] for *_, w in BLOCKS]
)
def test_a_wrong_residual_structure_is_said_as_the_combination_it_is(
    monkeypatch, name, base, forward, words
):
    block = type("Wrong", (base,), {"forward": forward})
    # built on the course's block for brevity; trusted like the mistakes, not refused as a copy
    monkeypatch.setattr(probes, "TRUSTED", probes.TRUSTED | {block})
    verdict = run(EXERCISES[name], block, hidden=True, seed=0, source="")
    explained = [o for o in verdict.outcomes if words in o.problem and o.mistake is None]
    assert explained and all(o.finding for o in explained), verdict.render()
    _speaks_the_courses_words(name, verdict.render())


def test_a_check_that_expects_an_exception_passes_only_on_that_exception():
    def refuse_negative(x):
        if x < 0:
            raise ValueError("negative")
        return torch.tensor(float(x))

    exercise = Exercise(
        name="root",
        reference=refuse_negative,
        probe=lambda answer, a: {"y": answer(float(a["x"]))},
        checks=(
            Check(
                "a negative x raises ValueError",
                lambda rng: {"x": np.array(-1.0)},
                1,
                expects=ValueError,
            ),
        ),
    )
    assert run(exercise, refuse_negative, hidden=True, seed=0, source="").passed
    returned = run(exercise, lambda x: torch.tensor(0.0), hidden=True, seed=0, source="")
    assert "returned values on inputs it must refuse" in returned.render()

    def other_error(x):
        raise TypeError("no")

    other = run(exercise, other_error, hidden=True, seed=0, source="")
    assert not other.passed and "TypeError" in other.render()


def test_an_unimplemented_stub_is_said_once_with_checks_that_expect_an_exception():
    def stub(lengths, max_len=None):
        raise NotImplementedError

    text = run(EXERCISES["lengths_to_mask"], stub, hidden=True, seed=0, source="").render()
    assert text.count("not implemented yet") == 1 and "raises ValueError" not in text, text


def test_a_check_without_its_own_tolerance_takes_the_exercises():
    checks = (Check("own", dict, 1, rtol=0.5, atol=0.5), Check("default", dict, 1))
    exercise = Exercise("e", None, dict, checks, rtol=1e-3, atol=1e-2)
    assert [(c.rtol, c.atol) for c in exercise.checks] == [(0.5, 0.5), (1e-3, 1e-2)]


def test_a_hidden_check_with_a_twin_is_split_into_a_visible_twin_and_the_rest():
    """The twin comes first, on the same inputs and tolerance, and takes its share of the
    points; the exercise's total is unchanged. A twin needs a hidden check and a share."""
    twinned = hidden(1.5, "pitfall", dict, twin=0.5, rtol=0.1)
    exercise = Exercise("e", None, dict, (visible(1, "plain", dict), twinned))
    assert [(c.description, c.points, c.hidden, c.rtol) for c in exercise.checks] == [
        ("plain", 1, False, 1e-5),
        ("pitfall", 0.5, False, 0.1),
        ("pitfall", 1.0, True, 0.1),
    ]
    assert exercise.points == 2.5 and not any(c.twin for c in exercise.checks)
    for wrong in (visible(1, "shown", dict, twin=0.5), hidden(1, "all of it", dict, twin=1)):
        with pytest.raises(ValueError, match="a visible twin needs"):
            Exercise("e", None, dict, (wrong,))


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_outputs_of_infinities_are_judged_not_crashed_on(name):
    """A property's arithmetic on a hostile output (inf, −inf, huge) never breaks the judge."""
    exercise = EXERCISES[name]
    # Computed once and shared by the three judgements, as a grading run shares them.
    ready = prepare(exercise, hidden=True, seed=0)
    for value in (np.inf, -np.inf, 1e308):
        outputs = [
            {k: np.full_like(w, value, dtype=np.float64) for k, w in e.want.items()}
            for e in ready.expected
        ]
        verdict = judge(exercise, ready.planned, outputs, expected=ready.expected)
        assert verdict.score < exercise.points
