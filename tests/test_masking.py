"""grader.reference.masking and norm_utils.pad_sequences: masks, padding, and statistics that
never read the padding."""

import doctest
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

import grader.reference.masking
import norm_utils.masking
from grader.reference.functional import batch_norm
from grader.reference.masking import lengths_to_mask, masked_batch_norm, masked_mean
from norm_utils.masking import pad_sequences

LENGTHS = st.lists(st.integers(1, 5), min_size=1, max_size=4)
SEEDS = st.integers(0, 2**31 - 1)
PAD_VALUES = st.sampled_from([0.0, -1e9, float("nan"), float("inf")])


def random_batch(lengths: list[int], d: int, seed: int) -> tuple[list[Tensor], Tensor, Tensor]:
    """Sequences of the given lengths, and their padded batch (B, L, D) and mask (B, L)."""
    gen = torch.Generator().manual_seed(seed)
    seqs = [torch.randn(n, d, generator=gen) for n in lengths]
    return seqs, *pad_sequences(seqs)


def add_padding(x: Tensor, mask: Tensor, extra: int, value: float) -> tuple[Tensor, Tensor]:
    """Append ``extra`` padded positions holding ``value`` to every sequence."""
    b, _, d = x.shape
    x = torch.cat([x.masked_fill(~mask[..., None], value), torch.full((b, extra, d), value)], 1)
    return x, torch.cat([mask, torch.zeros(b, extra, dtype=torch.bool)], 1)


# ---------------------------------------------------------------------------------------------
# lengths_to_mask and pad_sequences
# ---------------------------------------------------------------------------------------------


def test_lengths_to_mask_marks_the_first_length_positions():
    expected = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    torch.testing.assert_close(lengths_to_mask([2, 0, 3]), expected)
    torch.testing.assert_close(lengths_to_mask(torch.tensor([2, 0, 3])), expected)
    assert lengths_to_mask([2, 0, 3]).dtype == torch.bool


def test_lengths_to_mask_pads_to_max_len():
    expected = torch.tensor([[True, False, False, False], [True, True, False, False]])
    torch.testing.assert_close(lengths_to_mask([1, 2], max_len=4), expected)


@pytest.mark.parametrize(
    ("lengths", "max_len", "message"),
    [
        ([2, -1], None, "lengths[1] = -1 is outside [0, max_len=2]"),
        ([2, 5], 4, "lengths[1] = 5 is outside [0, max_len=4]"),
        ([[2, 3]], None, "lengths must be 1-D (one length per sequence), got shape (1, 2)"),
        (torch.tensor(3), None, "got shape ()"),
    ],
)
def test_lengths_to_mask_rejects_bad_lengths(lengths, max_len, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        lengths_to_mask(lengths, max_len)


def test_lengths_to_mask_rejects_non_integer_lengths():
    with pytest.raises(TypeError, match="lengths must be integers"):
        lengths_to_mask([1.5, 2.0])


def test_pad_sequences_stacks_and_masks():
    seqs = [torch.ones(3, 2), 2 * torch.ones(1, 2)]
    x, mask = pad_sequences(seqs, padding_value=-7.0)
    expected = torch.tensor([[[1.0, 1.0]] * 3, [[2.0, 2.0]] + [[-7.0, -7.0]] * 2])
    torch.testing.assert_close(x, expected)
    torch.testing.assert_close(mask, lengths_to_mask([3, 1]))


def test_pad_sequences_rejects_mismatched_or_missing_sequences():
    with pytest.raises(ValueError, match=re.escape("[(3, 2), (1, 4)]")):
        pad_sequences([torch.ones(3, 2), torch.ones(1, 4)])
    with pytest.raises(ValueError, match=re.escape("[(3,)]")):
        pad_sequences([torch.ones(3)])
    with pytest.raises(ValueError, match="non-empty"):
        pad_sequences([])


# ---------------------------------------------------------------------------------------------
# masked_mean
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(lengths=LENGTHS, extra=st.integers(0, 3), pad=PAD_VALUES, seed=SEEDS)
def test_masked_mean_is_the_mean_of_the_real_tokens(lengths, extra, pad, seed):
    seqs, x, mask = random_batch(lengths, d=3, seed=seed)
    expected = torch.stack([s.mean(0) for s in seqs])  # (B, D)
    torch.testing.assert_close(masked_mean(x, mask, dim=1), expected)
    # Appending padding of any value, even NaN or inf, changes nothing.
    padded_x, padded_mask = add_padding(x, mask, extra, pad)
    torch.testing.assert_close(masked_mean(padded_x, padded_mask, dim=1), expected)


def test_masked_mean_gradient_ignores_nan_padding():
    x = torch.tensor([[1.0, 3.0, float("nan")]], requires_grad=True)
    mask = lengths_to_mask([2], max_len=3)
    masked_mean(x, mask, dim=1).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([[0.5, 0.5, 0.0]]))


def test_masked_mean_over_the_batch_dim_and_with_negative_dims():
    x = torch.arange(12.0).reshape(2, 3, 2)
    mask = torch.tensor([[True, False, True], [True, True, False]])
    expected = torch.stack([x[:, t][mask[:, t]].mean(0) for t in range(3)])  # (L, D)
    torch.testing.assert_close(masked_mean(x, mask, dim=0), expected)
    torch.testing.assert_close(masked_mean(x, mask, dim=-2), masked_mean(x, mask, dim=1))


def test_masked_mean_rejects_sequences_without_real_tokens():
    x, mask = torch.randn(5, 4, 2), lengths_to_mask([1, 4, 2, 0, 3])
    with pytest.raises(ValueError, match="sequence 3 has no real tokens"):
        masked_mean(x, mask, dim=1)


def test_masked_mean_rejects_bad_masks_and_dims():
    x = torch.randn(2, 4, 3)
    message = "mask of shape (2, 3) does not match the leading dims of input of shape (2, 4, 3)"
    with pytest.raises(ValueError, match=re.escape(message)):
        masked_mean(x, torch.ones(2, 3, dtype=torch.bool), dim=1)
    with pytest.raises(ValueError, match=re.escape("dim 2 is not covered by the mask")):
        masked_mean(x, torch.ones(2, 4, dtype=torch.bool), dim=-1)
    with pytest.raises(TypeError, match="mask must be a bool tensor"):
        masked_mean(x, torch.ones(2, 4), dim=1)


# ---------------------------------------------------------------------------------------------
# masked_batch_norm
# ---------------------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    lengths=LENGTHS.filter(lambda lengths: sum(lengths) > 1),
    extra=st.integers(0, 3),
    pad=PAD_VALUES,
    seed=SEEDS,
)
def test_masked_batch_norm_is_batch_norm_of_the_real_tokens(lengths, extra, pad, seed):
    _, x, mask = random_batch(lengths, d=3, seed=seed)
    w, b = torch.tensor([0.5, 1.0, 2.0]), torch.tensor([-1.0, 0.0, 1.0])
    expected_stats = [torch.zeros(3), torch.ones(3)]
    expected = batch_norm(x[mask], *expected_stats, w, b, training=True, momentum=0.3)
    # Invariant to how much padding is appended and what it holds.
    padded_x, padded_mask = add_padding(x, mask, extra, pad)
    stats = [torch.zeros(3), torch.ones(3)]
    y = masked_batch_norm(padded_x, padded_mask, *stats, w, b, training=True, momentum=0.3)
    torch.testing.assert_close(y[padded_mask], expected)
    torch.testing.assert_close(stats, expected_stats)
    assert torch.all(y[~padded_mask] == 0)


def test_masked_batch_norm_running_stats_use_the_unbiased_variance_of_real_tokens():
    x = torch.tensor([[[1.0], [3.0], [100.0]], [[5.0], [-50.0], [-50.0]]])  # (B=2, L=3, D=1)
    mask = lengths_to_mask([2, 1], max_len=3)  # real tokens: 1, 3, 5
    running_mean, running_var = torch.zeros(1), torch.ones(1)
    masked_batch_norm(x, mask, running_mean, running_var, training=True, momentum=1.0)
    torch.testing.assert_close(running_mean, torch.tensor([3.0]))
    torch.testing.assert_close(running_var, torch.tensor([4.0]))  # ((-2)² + 0² + 2²) / (3 - 1)


def test_masked_batch_norm_in_eval_uses_the_running_stats():
    _, x, mask = random_batch([3, 1, 2], d=2, seed=1)
    running_mean, running_var = torch.tensor([1.0, -1.0]), torch.tensor([4.0, 0.25])
    y = masked_batch_norm(x, mask, running_mean, running_var)
    expected = (x - running_mean) / torch.sqrt(running_var + 1e-5)
    torch.testing.assert_close(y[mask], expected[mask])
    torch.testing.assert_close(running_mean, torch.tensor([1.0, -1.0]))  # untouched


def test_masked_batch_norm_gradient_matches_the_packed_one():
    _, x, mask = random_batch([3, 1, 2], d=2, seed=2)
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    x_masked, x_packed = x.clone().requires_grad_(), x.clone().requires_grad_()
    masked_batch_norm(x_masked, mask, training=True).backward(grad_out)
    batch_norm(x_packed[mask], None, None, training=True).backward(grad_out[mask])
    torch.testing.assert_close(x_masked.grad, x_packed.grad)
    assert torch.all(x_masked.grad[~mask] == 0)


def test_masked_batch_norm_rejects_batches_without_real_tokens():
    x, mask = torch.randn(2, 3, 4), torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=re.escape("mask of shape (2, 3) has no real tokens")):
        masked_batch_norm(x, mask, training=True)


def test_masked_batch_norm_rejects_mismatched_shapes():
    message = "got x of shape (2, 3, 4) and mask of shape (2, 4)"
    with pytest.raises(ValueError, match=re.escape(message)):
        masked_batch_norm(torch.randn(2, 3, 4), torch.ones(2, 4, dtype=torch.bool))


@pytest.mark.parametrize("module", [grader.reference.masking, norm_utils.masking])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, extraglobs={"torch": torch})
    assert result.attempted > 0
    assert result.failed == 0
