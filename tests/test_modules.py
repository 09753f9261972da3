"""grader.reference.modules.BatchNorm against torch.nn.BatchNorm1d, step by step."""

import doctest
import re

import pytest
import torch
from torch import Tensor, nn

import grader.reference.modules
from grader.reference.modules import BatchNorm

BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def batches(shape: tuple[int, ...], count: int) -> list[Tensor]:
    """Distinct batches with different means and scales, so every update is visible."""
    gen = torch.Generator().manual_seed(0)
    return [(k + 1) * torch.randn(shape, generator=gen) + k for k in range(count)]


def twins(**kwargs) -> tuple[BatchNorm, nn.BatchNorm1d]:
    ours, theirs = BatchNorm(3, **kwargs), nn.BatchNorm1d(3, **kwargs)
    if theirs.affine:  # non-trivial parameters, the same in both
        with torch.no_grad():
            for module in (ours, theirs):
                module.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
                module.bias.copy_(torch.tensor([-1.0, 0.0, 1.0]))
    return ours, theirs


def assert_same_state(ours: BatchNorm, theirs: nn.BatchNorm1d) -> None:
    for name in BUFFERS:
        actual, expected = getattr(ours, name), getattr(theirs, name)
        if expected is None:
            assert actual is None
        else:
            torch.testing.assert_close(actual, expected, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 5)])
@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("track_running_stats", [True, False])
def test_training_then_eval_matches_torch(shape, momentum, affine, track_running_stats):
    ours, theirs = twins(momentum=momentum, affine=affine, track_running_stats=track_running_stats)
    train_batches, eval_batch = batches(shape, 4), batches(shape, 5)[-1]
    for x in train_batches:
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)
        assert_same_state(ours, theirs)
    ours.eval()
    theirs.eval()
    torch.testing.assert_close(ours(eval_batch), theirs(eval_batch), atol=1e-6, rtol=1e-6)
    assert_same_state(ours, theirs)
    if track_running_stats:
        assert ours.num_batches_tracked.item() == 4
        assert ours.num_batches_tracked.dtype == torch.long


def test_momentum_none_is_the_cumulative_average():
    ours = BatchNorm(3, momentum=None)
    train_batches = batches((8, 3), 4)
    for x in train_batches:
        ours(x)
    # With weights 1/k, the running mean is the plain average of the batch means.
    batch_means = torch.stack([x.mean(0) for x in train_batches])
    torch.testing.assert_close(ours.running_mean, batch_means.mean(0))
    batch_vars = torch.stack([x.var(0, correction=1) for x in train_batches])
    torch.testing.assert_close(ours.running_var, batch_vars.mean(0))


def test_parameter_gradients_match_torch():
    ours, theirs = twins()
    x = batches((6, 3, 4), 1)[0]
    grad_out = torch.randn(x.shape, generator=torch.Generator().manual_seed(1))
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours(x_ours).backward(grad_out)
    theirs(x_theirs).backward(grad_out)
    torch.testing.assert_close(x_ours.grad, x_theirs.grad)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    torch.testing.assert_close(ours.bias.grad, theirs.bias.grad)


def test_single_sample_without_length_cannot_train():
    ours = BatchNorm(3)
    message = "Expected more than 1 value per channel when training, got input size (1, 3)"
    with pytest.raises(ValueError, match=re.escape(message)):
        ours(torch.randn(1, 3))
    with pytest.raises(ValueError, match="Expected more than 1 value per channel"):
        nn.BatchNorm1d(3)(torch.randn(1, 3))


def test_single_sample_with_length_trains():
    ours, theirs = twins()
    x = batches((1, 3, 5), 1)[0]  # N = 1, but 5 values per channel
    torch.testing.assert_close(ours(x), theirs(x))
    assert_same_state(ours, theirs)


def test_single_sample_in_eval():
    ours, theirs = twins()
    for x in batches((8, 3), 2):
        ours(x)
        theirs(x)
    ours.eval()
    theirs.eval()
    x = batches((1, 3), 1)[0]
    torch.testing.assert_close(ours(x), theirs(x))


def test_no_grad_in_train_mode_still_updates_running_stats():
    ours, theirs = twins()
    x = batches((8, 3), 1)[0]
    with torch.no_grad():
        ours(x)
        theirs(x)
    assert_same_state(ours, theirs)
    assert ours.num_batches_tracked.item() == 1
    assert not torch.equal(ours.running_mean, torch.zeros(3))


def test_state_dict_is_interchangeable_with_torch():
    ours, theirs = twins()
    for x in batches((8, 3), 3):
        theirs(x)
    ours.load_state_dict(theirs.state_dict())
    assert_same_state(ours, theirs)
    assert ours.state_dict().keys() == theirs.state_dict().keys()


def test_switched_off_parameters_and_buffers_are_none():
    module = BatchNorm(3, affine=False, track_running_stats=False)
    assert module.weight is None
    assert module.bias is None
    assert all(getattr(module, name) is None for name in BUFFERS)
    assert list(module.parameters()) == []
    assert module.state_dict() == {}


def test_repr_shows_the_configuration():
    assert repr(BatchNorm(3, momentum=None)) == (
        "BatchNorm(3, eps=1e-05, momentum=None, affine=True, track_running_stats=True)"
    )


def test_docstring_examples_run():
    result = doctest.testmod(grader.reference.modules, extraglobs={"torch": torch})
    assert result.attempted > 0
    assert result.failed == 0
