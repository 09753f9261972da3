"""The references of notebook 02's BatchNorm backward and folding exercises against PyTorch:
`batch_norm_backward` against autograd through F.batch_norm in both modes, `fold_batch_norm`
against torch.nn.utils.fusion, and the demos' helpers (`norm_utils.gradients`,
`norm_utils.answers`)."""

import doctest

import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.utils.fusion import fuse_conv_bn_weights, fuse_linear_bn_weights

import grader.reference.fusion
import norm_utils.answers
import norm_utils.gradients
from grader.reference import batch_norm_backward, fold_batch_norm
from norm_utils.answers import yours_or
from norm_utils.gradients import autograd_gradients, numerical_grad

SEEDS = st.integers(0, 2**31 - 1)


def _draw(seed: int, *shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 6),
    c=st.integers(1, 4),
    length=st.integers(0, 3),
    training=st.booleans(),
    seed=SEEDS,
)
def test_batch_norm_backward_is_autograd_through_f_batch_norm(n, c, length, training, seed):
    shape = (n, c, length) if length else (n, c)
    x, grad_out, weight = _draw(seed, *shape), _draw(seed + 1, *shape), _draw(seed + 2, c)
    running_mean, running_var = _draw(seed + 3, c), _draw(seed + 4, c).abs() + 0.1
    for w in (weight, None):
        expected = autograd_gradients(
            lambda x, w, b: F.batch_norm(
                x, running_mean.clone(), running_var.clone(), w, b, training=training
            ),
            grad_out,
            x,
            w,
        )
        got = batch_norm_backward(grad_out, x, running_mean, running_var, w, training=training)
        for mine, want in zip(got, expected, strict=True):
            assert (mine is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(mine, want, atol=1e-10, rtol=0)


@settings(max_examples=25, deadline=None)
@given(
    out=st.integers(1, 5),
    kernel=st.lists(st.integers(1, 3), max_size=2),
    bias=st.booleans(),
    affine=st.booleans(),
    seed=SEEDS,
)
def test_fold_batch_norm_is_torch_fusion(out, kernel, bias, affine, seed):
    f32 = torch.float32
    weight = _draw(seed, out, 3, *kernel, dtype=f32)
    b = _draw(seed + 1, out, dtype=f32) if bias else None
    mean, var = _draw(seed + 2, out, dtype=f32), _draw(seed + 3, out, dtype=f32).abs() + 0.1
    gamma, beta = (_draw(seed + 4 + i, out, dtype=f32) if affine else None for i in range(2))
    if kernel:
        expected = fuse_conv_bn_weights(weight, b, mean, var, 1e-3, gamma, beta)
    else:  # fuse_linear_bn_weights has no affine=False form
        ones, zeros = torch.ones(out), torch.zeros(out)
        expected = fuse_linear_bn_weights(
            weight,
            b,
            mean,
            var,
            1e-3,
            ones if gamma is None else gamma,
            zeros if beta is None else beta,
        )
    for got, want in zip(
        fold_batch_norm(weight, b, mean, var, gamma, beta, 1e-3), expected, strict=True
    ):
        torch.testing.assert_close(got, want.detach(), atol=1e-6, rtol=1e-6)


def test_numerical_grad_agrees_with_autograd():
    x, up = _draw(0, 3, 4), _draw(1, 3, 4)
    grad_x, _, _ = autograd_gradients(lambda x, w, b: F.layer_norm(x, (4,)), up, x)
    numeric = numerical_grad(lambda t: (F.layer_norm(t, (4,)) * up).sum(), x)
    torch.testing.assert_close(numeric, grad_x, atol=1e-8, rtol=0)


def test_yours_or_uses_the_answer_when_it_is_written_and_says_which_it_used(capsys):
    def written(x):
        return x + 1

    def stub(x):
        raise NotImplementedError()

    answer = yours_or(written, lambda x: x - 1, "the library")
    assert answer(1) == 2 and answer.used == "your `written`"
    assert capsys.readouterr().out == ""
    fallback = yours_or(stub, lambda x: x - 1, "the library")
    assert [fallback(1), fallback(1)] == [0, 0]
    assert fallback.used == "the library (in place of yours)"
    assert capsys.readouterr().out == (
        "`stub` is not implemented yet: this cell uses the library instead.\n"
    )


def test_the_docstring_examples_run():
    for module in (grader.reference.fusion, norm_utils.gradients, norm_utils.answers):
        globs = {"torch": torch, "F": F}
        result = doctest.testmod(module, extraglobs=globs, optionflags=doctest.ELLIPSIS)
        assert result.attempted > 0 and result.failed == 0, module.__name__
