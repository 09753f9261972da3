"""grader.reference.functional against torch.nn.functional: values, gradients, numerics, errors."""

import doctest
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import grader.reference.functional
from grader.reference.functional import (
    batch_norm,
    layer_norm,
    layer_norm_backward,
)

TOL = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
}
# Gradients of tiny groups are ill-conditioned: with two close values, rstd grows up to
# 1/sqrt(eps) ≈ 316 and the backward pass cancels terms of that size, so in float32 both torch and
# the reference are off by ~1e-3 from float64. The float64 comparisons are the tight ones.
GRAD_TOL = {
    torch.float32: {"atol": 1e-3, "rtol": 1e-3},
    torch.float64: {"atol": 1e-9, "rtol": 1e-9},
}
DTYPES = st.sampled_from([torch.float32, torch.float64])
SEEDS = st.integers(0, 2**31 - 1)
# A norm over the trailing dimensions: the leading dimensions and the normalized shape
LEAD = st.lists(st.integers(1, 3), max_size=2)
NORMALIZED = st.lists(st.integers(1, 5), min_size=1, max_size=3)


def randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> Tensor:
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def value_and_grads(fn, *inputs: Tensor | None, grad_out: Tensor) -> list[Tensor | None]:
    """``fn(*inputs)`` followed by the gradients of ``(fn(*inputs) * grad_out).sum()``."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    out.backward(grad_out)
    return [out.detach()] + [None if leaf is None else leaf.grad for leaf in leaves]


OURS = grader.reference.functional


def assert_matches_torch(call, *inputs: Tensor | None) -> None:
    """Same output and same input gradients (``inputs[0]`` is x) through ``call(f, *inputs)``
    with ``f`` the reference's functional module and with ``torch.nn.functional``: the
    reference mirrors torch's names and signatures."""
    x = inputs[0]
    grad_out = randn(*x.shape, dtype=x.dtype, seed=99)
    expected = value_and_grads(lambda *t: call(F, *t), *inputs, grad_out=grad_out)
    actual = value_and_grads(lambda *t: call(OURS, *t), *inputs, grad_out=grad_out)
    torch.testing.assert_close(actual[0], expected[0], **TOL[x.dtype])
    for a, e in zip(actual[1:], expected[1:], strict=True):
        torch.testing.assert_close(a, e, **GRAD_TOL[x.dtype])


def maybe(t: Tensor, keep: bool) -> Tensor | None:
    return t if keep else None


def x_weight_bias(
    shape: list[int], params: list[int], affine: bool, dtype: torch.dtype, seed: int
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """x of ``shape``, and a weight and a bias of shape ``params`` (None unless ``affine``)."""
    x = randn(*shape, dtype=dtype, seed=seed)
    w = maybe(randn(*params, dtype=dtype, seed=seed + 1), affine)
    b = maybe(randn(*params, dtype=dtype, seed=seed + 2), affine)
    return x, w, b


# ---------------------------------------------------------------------------------------------
# Against torch, on random shapes and dtypes
# ---------------------------------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(lead=LEAD, normalized=NORMALIZED, affine=st.booleans(), dtype=DTYPES, seed=SEEDS)
def test_layer_norm_matches_torch(lead, normalized, affine, dtype, seed):
    x, w, b = x_weight_bias([*lead, *normalized], normalized, affine, dtype, seed)
    shape = tuple(normalized)
    assert_matches_torch(lambda f, x, w, b: f.layer_norm(x, shape, w, b), x, w, b)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(2, 5),
    c=st.integers(1, 4),
    trailing=st.lists(st.integers(1, 4), max_size=2),
    affine=st.booleans(),
    momentum=st.sampled_from([0.1, 0.5, 1.0]),
    dtype=DTYPES,
    seed=SEEDS,
)
def test_batch_norm_training_matches_torch(n, c, trailing, affine, momentum, dtype, seed):
    x, w, b = x_weight_bias([n, c, *trailing], [c], affine, dtype, seed)
    ours_stats = [randn(c, dtype=dtype, seed=seed + 3), randn(c, dtype=dtype, seed=seed + 4).exp()]
    torch_stats = [s.clone() for s in ours_stats]
    stats = {OURS: ours_stats, F: torch_stats}
    assert_matches_torch(
        lambda f, x, w, b: f.batch_norm(x, *stats[f], w, b, training=True, momentum=momentum),
        *(x, w, b),
    )
    # value_and_grads ran each function once, so each running statistic was updated once.
    for ours, theirs in zip(ours_stats, torch_stats, strict=True):
        torch.testing.assert_close(ours, theirs, **TOL[dtype])


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 4),
    c=st.integers(1, 4),
    trailing=st.lists(st.integers(1, 4), max_size=2),
    dtype=DTYPES,
    seed=SEEDS,
)
def test_batch_norm_eval_matches_torch(n, c, trailing, dtype, seed):
    x, w, b = x_weight_bias([n, c, *trailing], [c], True, dtype, seed)
    mean, var = randn(c, dtype=dtype, seed=seed + 3), randn(c, dtype=dtype, seed=seed + 4).exp()
    assert_matches_torch(
        lambda f, x, w, b: f.batch_norm(x, mean, var, w, b, training=False), x, w, b
    )


@settings(max_examples=25, deadline=None)
@given(lead=LEAD, normalized=NORMALIZED, affine=st.booleans(), seed=SEEDS)
def test_layer_norm_backward_matches_autograd(lead, normalized, affine, seed):
    dtype = torch.float64
    x, w, b = x_weight_bias([*lead, *normalized], normalized, affine, dtype, seed)
    grad_out = randn(*x.shape, dtype=dtype, seed=seed + 3)
    shape = tuple(normalized)
    _, *expected = value_and_grads(
        lambda x, w, b: F.layer_norm(x, shape, w, b), x, w, b, grad_out=grad_out
    )
    actual = layer_norm_backward(grad_out, x, shape, w)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, atol=1e-10, rtol=0)


# ---------------------------------------------------------------------------------------------
# Hard inputs
# ---------------------------------------------------------------------------------------------


def naive_layer_norm(x: Tensor, d: int, eps: float = 1e-5) -> Tensor:
    """The one-pass variance E[x²] − E[x]²: what the reference must never do."""
    mean = x.mean(-1, keepdim=True)
    var = x.square().mean(-1, keepdim=True) - mean.square()
    return (x - mean) * torch.rsqrt(var + eps)


def max_error(y: Tensor, truth: Tensor) -> float:
    return torch.nan_to_num((y.double() - truth).abs(), nan=float("inf")).max().item()


SHIFTED_NORMS = {
    "layer_norm": (lambda x: layer_norm(x, 32), lambda x: F.layer_norm(x, (32,))),
    "batch_norm": (
        lambda x: batch_norm(x, None, None, training=True),
        lambda x: F.batch_norm(x, None, None, training=True),
    ),
}


FLOAT32_ULP_AT_1E4 = 2.0**-10  # float32 values in [8192, 16384) are 2**-10 apart


@pytest.mark.parametrize("name", SHIFTED_NORMS)
@pytest.mark.parametrize("offset", [0.0, 1e2, 1e3, 1e4])
@pytest.mark.parametrize("seed", range(3))
def test_float32_output_is_the_float64_result_rounded_once(name, offset, seed):
    ours, theirs = SHIFTED_NORMS[name]
    x = (offset + randn(16, 8, 32, dtype=torch.float64, seed=seed)).float()  # std 1
    # Float64 ground truth on the same float32 values. A norm that subtracts a mean gets them
    # shifted back by the offset, exactly (they are multiples of their ulp): the same result
    # without float64 cancellation, which in torch's no-SIMD kernels (1e-12 at offset 1e4) is
    # enough to move a float32 rounding.
    truth = theirs(x.double() - offset)
    out = ours(x)
    assert out.dtype == torch.float32
    # Correctly rounded, element by element: no float32 result, torch's included, is closer.
    assert torch.equal(out, truth.float())
    assert max_error(out, truth) <= max_error(theirs(x), truth)


def test_shifted_input_accuracy_test_catches_the_one_pass_variance():
    x = (1e4 + randn(16, 8, 32, dtype=torch.float64, seed=0)).float()
    truth = F.layer_norm(x.double(), (32,))
    torch_error = max_error(F.layer_norm(x, (32,)), truth)
    # The criteria of the test above, applied to the formula they are there to forbid.
    naive_error = max_error(naive_layer_norm(x, 32), truth)
    assert naive_error > FLOAT32_ULP_AT_1E4
    assert naive_error > 100 * torch_error


def test_variance_near_eps_matches_torch():
    x = randn(4, 6, 5, seed=5) * 1e-3  # var ≈ 1e-6, below eps = 1e-5
    torch.testing.assert_close(layer_norm(x, 5), F.layer_norm(x, (5,)))
    torch.testing.assert_close(
        batch_norm(x, None, None, training=True), F.batch_norm(x, None, None, training=True)
    )


@pytest.mark.parametrize("value", [0.0, 0.1, -3.7, 1e4])
def test_constant_rows_give_the_bias(value):
    w, b = randn(7, seed=1), randn(7, seed=2)
    x = torch.full((3, 7), value)
    torch.testing.assert_close(layer_norm(x, 7, w, b), b.expand(3, 7), atol=1e-5, rtol=0)
    torch.testing.assert_close(layer_norm(x, 7, w, b), F.layer_norm(x, (7,), w, b))


def test_single_feature_gives_the_bias():
    x, w, b = randn(4, 1, seed=1), randn(1, seed=2), randn(1, seed=3)
    torch.testing.assert_close(layer_norm(x, 1, w, b), b.expand(4, 1))
    assert_matches_torch(lambda f, x, w, b: f.layer_norm(x, (1,), w, b), x, w, b)


def test_batch_norm_with_two_samples_matches_torch():
    x = randn(2, 3, seed=7)  # unbiased variance = 2 × biased: the n / (n - 1) factor at its largest
    ours_stats, torch_stats = [torch.zeros(3), torch.ones(3)], [torch.zeros(3), torch.ones(3)]
    torch.testing.assert_close(
        batch_norm(x, *ours_stats, training=True), F.batch_norm(x, *torch_stats, training=True)
    )
    torch.testing.assert_close(ours_stats, torch_stats)


@pytest.mark.parametrize("normalized", [(3, 4), (2, 3, 4)])
def test_layer_norm_over_several_trailing_dims(normalized):
    x = randn(5, *normalized, seed=1)
    w, b = randn(*normalized, seed=2), randn(*normalized, seed=3)
    y = layer_norm(x, normalized, w, b)
    torch.testing.assert_close(y, F.layer_norm(x, normalized, w, b))
    # The statistics are joint over all normalized dims: the same as flattening them into one.
    flat = layer_norm(x.reshape(5, -1), w.numel(), w.flatten(), b.flatten())
    torch.testing.assert_close(y, flat.reshape(y.shape))


def test_layer_norm_accepts_int_and_any_sequence_as_normalized_shape():
    x = randn(3, 4, seed=1)
    expected = F.layer_norm(x, (4,))
    for normalized_shape in (4, (4,), [4], torch.Size([4])):
        torch.testing.assert_close(layer_norm(x, normalized_shape), expected)


def test_batch_norm_on_nlc_input_with_l_not_c_names_the_fix():
    x = randn(8, 4, 5)  # (N, L=4, C=5): channels last, but batch_norm reads dim 1 as C
    message = (
        "running_mean has 5 elements but input has C=4 channels (input shape (8, 4, 5)); "
        "for (N, L, C) sequences, transpose to (N, C, L)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        batch_norm(x, torch.zeros(5), torch.ones(5), training=True)


def test_batch_norm_on_nlc_input_with_l_equal_c_silently_differs():
    """The pitfall: with L == C nothing fails, but the statistics are per position, not feature."""
    x_nlc = randn(8, 4, 4)  # (N, L=4, C=4)
    correct = batch_norm(x_nlc.transpose(1, 2), None, None, training=True).transpose(1, 2)
    misused = batch_norm(x_nlc, None, None, training=True)
    assert not torch.allclose(misused, correct, atol=1e-2)
    # It is the layout that is wrong, not the implementation: torch does exactly the same.
    torch.testing.assert_close(misused, F.batch_norm(x_nlc, None, None, training=True))


def test_batch_norm_running_stats_carry_no_autograd_history():
    x = randn(4, 3, seed=1).requires_grad_()
    w = torch.ones(3, requires_grad=True)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    batch_norm(x, running_mean, running_var, w, training=True).sum().backward()
    for stat in (running_mean, running_var):
        assert not stat.requires_grad
        assert stat.grad_fn is None
    assert not torch.equal(running_mean, torch.zeros(3))  # ...and they were updated


def test_batch_norm_without_running_stats_uses_batch_stats_even_in_eval():
    x = randn(6, 3, 4, seed=1)
    torch_module = nn.BatchNorm1d(3, affine=False, track_running_stats=False).eval()
    torch.testing.assert_close(batch_norm(x, None, None, training=False), torch_module(x))
    torch.testing.assert_close(
        batch_norm(x, None, None, training=False), batch_norm(x, None, None, training=True)
    )


@pytest.mark.parametrize("shape", [(1, 3), (1, 3, 1)])
@pytest.mark.parametrize("running", [True, False])
def test_batch_norm_needs_more_than_one_value_per_channel(shape, running):
    x = randn(*shape)
    stats = (torch.zeros(3), torch.ones(3)) if running else (None, None)
    message = f"Expected more than 1 value per channel when training, got input size {shape}"
    with pytest.raises(ValueError, match=re.escape(message)):
        batch_norm(x, *stats, training=True)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        F.batch_norm(x, *stats, training=True)


def test_batch_norm_one_sample_with_length_trains():
    x = randn(1, 3, 5, seed=1)  # N = 1 but N * L = 5 values per channel
    ours_stats, torch_stats = [torch.zeros(3), torch.ones(3)], [torch.zeros(3), torch.ones(3)]
    torch.testing.assert_close(
        batch_norm(x, *ours_stats, training=True), F.batch_norm(x, *torch_stats, training=True)
    )
    torch.testing.assert_close(ours_stats, torch_stats)


# ---------------------------------------------------------------------------------------------
# Errors name the shapes involved
# ---------------------------------------------------------------------------------------------


def test_layer_norm_rejects_a_normalized_shape_that_is_not_trailing():
    message = "normalized_shape (4,) does not match the trailing dims of input of shape (2, 3, 5)"
    with pytest.raises(ValueError, match=re.escape(message)):
        layer_norm(randn(2, 3, 5), (4,))
    with pytest.raises(ValueError, match=re.escape("normalized_shape (2, 3, 5, 1)")):
        layer_norm(randn(2, 3, 5), (2, 3, 5, 1))  # longer than the input
    with pytest.raises(ValueError, match="at least one dimension"):
        layer_norm(randn(2, 3), ())


@pytest.mark.parametrize("param", ["weight", "bias"])
def test_layer_norm_rejects_affine_parameters_of_the_wrong_shape(param):
    message = f"{param} of shape (5,) does not match normalized_shape (3, 5)"
    with pytest.raises(ValueError, match=re.escape(message)):
        layer_norm(randn(2, 3, 5), (3, 5), **{param: torch.ones(5)})


def test_layer_norm_backward_checks_its_shapes():
    with pytest.raises(ValueError, match=re.escape("grad_out of shape (2, 3) does not match")):
        layer_norm_backward(randn(2, 3), randn(2, 4), 4)


def test_layer_norm_backward_without_weight_returns_no_parameter_gradients():
    grad_x, grad_weight, grad_bias = layer_norm_backward(randn(2, 4), randn(2, 4, seed=1), 4)
    assert grad_x.shape == (2, 4)
    assert grad_weight is None
    assert grad_bias is None


def test_batch_norm_rejects_bad_inputs():
    with pytest.raises(ValueError, match=re.escape("got shape (4,)")):
        batch_norm(randn(4), None, None, training=True)
    with pytest.raises(ValueError, match="both be tensors or both be None"):
        batch_norm(randn(4, 3), torch.zeros(3), None, training=True)
    with pytest.raises(ValueError, match=re.escape("bias has 2 elements but input has C=3")):
        batch_norm(randn(4, 3), None, None, bias=torch.ones(2), training=True)
    with pytest.raises(ValueError, match=re.escape("weight has shape (3, 1)")):
        batch_norm(randn(4, 3), None, None, torch.ones(3, 1), training=True)


def test_docstring_examples_run():
    result = doctest.testmod(grader.reference.functional, extraglobs={"torch": torch})
    assert result.attempted > 0
    assert result.failed == 0
