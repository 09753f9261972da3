"""Reference implementations of the normalization layers taught in this course.

Each function mirrors its namesake in :mod:`torch.nn.functional` (name, argument order,
defaults and semantics), so that student exercises can be graded against it and it can be
tested against PyTorch. The code is written to be read next to the formula: every norm names
its intermediates ``mean``, ``var``, ``rstd`` (reciprocal standard deviation) and ``x_hat``.

All means and variances come from one helper, :func:`_moments`, which never uses the
cancellation-prone one-pass formula E[x²] − E[x]². The statistics and the normalization are
computed in float64 and rounded once, to the input's dtype, at the end: the reference is the
oracle student code is graded against, so it must be at least as accurate as what it judges
(PyTorch's float32 kernels included, see bench/numerics.py).
"""

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "batch_norm",
    "batch_norm_backward",
    "layer_norm",
    "layer_norm_backward",
]


# ---------------------------------------------------------------------------------------------
# Private helpers
# ---------------------------------------------------------------------------------------------


def _moments(x: Tensor, dims: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """Mean and biased variance of ``x`` over ``dims`` (kept as size-1 dims), in float64.

    Float64 moments make every later step (``x - mean``, the product with ``rstd``, the
    affine map) promote to float64 too, so a float32 input is rounded only once, at the end.

    Two passes: the mean first, then the mean of squared deviations from it. The one-pass
    formula E[x²] − E[x]² subtracts two nearly equal large numbers: in float32, with |mean| = 1e4
    and std = 1, it loses every digit of the variance and can even return a negative one.

    Between the passes the mean is refined once by the mean of the residuals ``x - mean``. A
    sum of many values near 1e4 is off by a few ulps, while ``x - mean`` is exact for ``x``
    close to ``mean`` (Sterbenz lemma), so the correction is itself accurate. It matters for
    float64 input, whose sums have no wider type to run in.
    """
    x = x.to(torch.float64)
    mean = x.mean(dim=dims, keepdim=True)
    mean = mean + (x - mean).mean(dim=dims, keepdim=True)
    var = (x - mean).square().mean(dim=dims, keepdim=True)
    return mean, var


def _normalized_dims(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None,
    bias: Tensor | None,
) -> tuple[int, ...]:
    """Check ``normalized_shape`` and the affine parameters against ``x``; return its dims.

    The dims are negative, e.g. ``(-2, -1)`` for a two-dim ``normalized_shape``.
    """
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape:
        raise ValueError("normalized_shape must have at least one dimension, got ()")
    if tuple(x.shape[-len(shape) :]) != shape:
        raise ValueError(
            f"normalized_shape {shape} does not match the trailing dims of input of shape "
            f"{tuple(x.shape)}"
        )
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None and tuple(param.shape) != shape:
            raise ValueError(
                f"{name} of shape {tuple(param.shape)} does not match normalized_shape {shape}"
            )
    return tuple(range(-len(shape), 0))


def _check_channels(x: Tensor, **per_channel: Tensor | None) -> None:
    """Check that ``x`` is (N, C, *) and that every per-channel tensor given (by its parameter's
    name) has shape (C,)."""
    if x.dim() < 2:
        raise ValueError(f"expected input of shape (N, C) or (N, C, *), got shape {tuple(x.shape)}")
    if (per_channel.get("running_mean") is None) != (per_channel.get("running_var") is None):
        raise ValueError("running_mean and running_var must both be tensors or both be None")
    num_channels = x.shape[1]
    for name, t in per_channel.items():
        if t is not None and tuple(t.shape) != (num_channels,):
            size = f"{t.numel()} elements" if t.dim() == 1 else f"shape {tuple(t.shape)}"
            # The classic cause: a (N, L, C) sequence batch, whose dim 1 is L, not C.
            hint = "; for (N, L, C) sequences, transpose to (N, C, L)" if x.dim() == 3 else ""
            raise ValueError(
                f"{name} has {size} but input has C={num_channels} channels "
                f"(input shape {tuple(x.shape)}){hint}"
            )


def _per_channel(t: Tensor | None, ndim: int) -> Tensor | None:
    """View a (C,) tensor as (1, C, 1, ..., 1) so that it broadcasts against (N, C, *) input."""
    return None if t is None else t.view(1, -1, *[1] * (ndim - 2))


def _affine(x_hat: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """``x_hat * weight + bias``, skipping whichever parameter is None."""
    y = x_hat if weight is None else x_hat * weight
    return y if bias is None else y + bias


@torch.no_grad()  # running statistics are state, not part of the autograd graph
def _update_running_stats(
    running_mean: Tensor, running_var: Tensor, mean: Tensor, var: Tensor, n: int, momentum: float
) -> None:
    """In place: ``running = (1 - momentum) * running + momentum * batch``, for (C,) tensors.

    ``var`` is the biased variance of ``n`` values; the running variance stores the unbiased
    one, ``var * n / (n - 1)``, as PyTorch does.
    """
    running_mean.mul_(1 - momentum).add_(momentum * mean)
    running_var.mul_(1 - momentum).add_(momentum * var * n / (n - 1))


def _normalization_backward(
    grad_out: Tensor, x: Tensor, dims: tuple[int, ...], weight: Tensor | None, eps: float
) -> tuple[Tensor, Tensor]:
    """``(grad_x, x_hat)`` of a normalization whose statistics run over ``dims``, in float64;
    ``weight`` broadcasts against ``x`` (or is None). The two subtracted means are the paths
    through the mean and through the variance."""
    if grad_out.shape != x.shape:
        raise ValueError(
            f"grad_out of shape {tuple(grad_out.shape)} does not match input of shape "
            f"{tuple(x.shape)}"
        )
    mean, var = _moments(x, dims)
    rstd = torch.rsqrt(var + eps)
    x_hat = (x - mean) * rstd
    g = grad_out if weight is None else grad_out * weight
    grad_x = rstd * (
        g - g.mean(dim=dims, keepdim=True) - x_hat * (g * x_hat).mean(dim=dims, keepdim=True)
    )
    return grad_x, x_hat


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def layer_norm(
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    r"""Apply Layer Normalization over the trailing ``len(normalized_shape)`` dims of the input.

    See `Layer Normalization <https://arxiv.org/abs/1607.06450>`__ (Ba et al., 2016).

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The mean and variance are taken separately for every sample over the last
    ``len(normalized_shape)`` dims. The variance is biased (divides by :math:`n`, not
    :math:`n - 1`), as in PyTorch. Unlike :func:`torch.nn.functional.layer_norm`, an ``int``
    ``normalized_shape`` is accepted (as :class:`torch.nn.LayerNorm` does).

    Args:
        x: input tensor.
        normalized_shape: the trailing shape to normalize over, an ``int`` or a sequence.
        weight: :math:`\gamma`, of shape ``normalized_shape``; ``None`` means 1.
        bias: :math:`\beta`, of shape ``normalized_shape``; ``None`` means 0.
        eps: added to the variance for numerical stability.

    Shape:
        - Input: :math:`(*, \text{normalized\_shape}[0], \text{normalized\_shape}[1], \ldots)`
        - Output: same shape as the input.

    Example::

        >>> x = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0]])
        >>> layer_norm(x, 3)
        tensor([[-1.2247,  0.0000,  1.2247],
                [-1.2247,  0.0000,  1.2247]])
    """
    dims = _normalized_dims(x, normalized_shape, weight, bias)
    mean, var = _moments(x, dims)
    rstd = torch.rsqrt(var + eps)
    x_hat = (x - mean) * rstd
    return _affine(x_hat, weight, bias).to(x.dtype)


def batch_norm(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    r"""Apply Batch Normalization for each channel across the batch (and length) dims.

    See `Batch Normalization <https://arxiv.org/abs/1502.03167>`__ (Ioffe & Szegedy, 2015).

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    The statistics of channel :math:`c` are taken over every dim except dim 1, i.e. over the
    :math:`n = N \cdot L` values ``x[:, c]``. In training the batch statistics are used, with
    the biased variance, and the running statistics (if given) are updated in place:

    .. math::
        \hat{\mu} \leftarrow (1 - m)\,\hat{\mu} + m\,\mu_B, \qquad
        \hat{\sigma}^2 \leftarrow (1 - m)\,\hat{\sigma}^2 + m\,\frac{n}{n - 1}\,\sigma_B^2

    so ``running_var`` stores the *unbiased* variance. In evaluation the running statistics
    are used instead.

    .. note::
        If ``running_mean`` and ``running_var`` are ``None``, the batch statistics are used even
        when ``training=False``: this is what :class:`torch.nn.BatchNorm1d` does with
        ``track_running_stats=False`` (:func:`torch.nn.functional.batch_norm` itself raises).

    Args:
        x: input tensor.
        running_mean: running mean of shape (C,), updated in place in training, or ``None``.
        running_var: running (unbiased) variance of shape (C,), or ``None``.
        weight: :math:`\gamma`, of shape (C,); ``None`` means 1.
        bias: :math:`\beta`, of shape (C,); ``None`` means 0.
        training: use (and track) batch statistics rather than the running ones.
        momentum: the weight :math:`m` of the current batch in the running statistics.
        eps: added to the variance for numerical stability.

    Shape:
        - Input: :math:`(N, C)` or :math:`(N, C, L)`; generally :math:`(N, C, *)`.
        - Output: same shape as the input.

    Example::

        >>> x = torch.tensor([[1.0, 10.0], [3.0, 30.0]])  # (N=2, C=2)
        >>> running_mean, running_var = torch.zeros(2), torch.ones(2)
        >>> batch_norm(x, running_mean, running_var, training=True)
        tensor([[-1.0000, -1.0000],
                [ 1.0000,  1.0000]])
        >>> running_mean  # 0.9 * 0 + 0.1 * [2, 20]
        tensor([0.2000, 2.0000])
        >>> running_var  # 0.9 * 1 + 0.1 * [2, 200], the unbiased batch variances
        tensor([ 1.1000, 20.9000])
    """
    _check_channels(x, running_mean=running_mean, running_var=running_var, weight=weight, bias=bias)
    if training or running_mean is None:
        n = x.numel() // x.shape[1]  # values per channel
        if n == 1:  # the batch variance of a single value is 0: nothing to normalize with
            raise ValueError(
                "Expected more than 1 value per channel when training, "
                f"got input size {tuple(x.shape)}"
            )
        mean, var = _moments(x, dims=(0, *range(2, x.dim())))  # (1, C, 1, ..., 1)
        if training and running_mean is not None:
            _update_running_stats(
                running_mean, running_var, mean.flatten(), var.flatten(), n, momentum
            )
    else:
        mean = _per_channel(running_mean, x.dim()).to(torch.float64)
        var = _per_channel(running_var, x.dim()).to(torch.float64)
    rstd = torch.rsqrt(var + eps)
    x_hat = (x - mean) * rstd
    return _affine(x_hat, _per_channel(weight, x.dim()), _per_channel(bias, x.dim())).to(x.dtype)


def layer_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    normalized_shape: int | Sequence[int],
    weight: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    r"""Gradients of :func:`layer_norm` in closed form, without autograd.

    With :math:`\hat{x} = (x - \mu) \cdot \mathrm{rstd}` and :math:`g = \partial L / \partial y
    \cdot \gamma`, and means :math:`\langle\cdot\rangle` over the normalized dims:

    .. math::
        \frac{\partial L}{\partial x} = \mathrm{rstd} \cdot \left(g - \langle g \rangle
            - \hat{x} \, \langle g \, \hat{x} \rangle\right), \qquad
        \frac{\partial L}{\partial \gamma} = \sum \frac{\partial L}{\partial y} \, \hat{x},
        \qquad
        \frac{\partial L}{\partial \beta} = \sum \frac{\partial L}{\partial y}

    where the sums run over the leading (non-normalized) dims. The two subtracted terms are
    the gradient flowing through the mean and through the (biased) variance.

    Args:
        grad_out: gradient of the loss with respect to the output of :func:`layer_norm`.
        x: the input that was passed to :func:`layer_norm`.
        normalized_shape: as for :func:`layer_norm`.
        weight: :math:`\gamma`, of shape ``normalized_shape``, or ``None``.
        eps: as for :func:`layer_norm`.

    Returns:
        ``(grad_x, grad_weight, grad_bias)``; the last two are ``None`` when ``weight`` is.

    Shape:
        - grad_out, x, grad_x: :math:`(*, \text{normalized\_shape}[0], \ldots)`
        - grad_weight, grad_bias: ``normalized_shape``

    Example::

        >>> x = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
        >>> grad_out = torch.randn(4, 8, dtype=torch.float64)
        >>> layer_norm(x, 8).backward(grad_out)
        >>> grad_x, _, _ = layer_norm_backward(grad_out, x.detach(), 8)
        >>> torch.allclose(grad_x, x.grad)
        True
    """
    dims = _normalized_dims(x, normalized_shape, weight, None)
    grad_x, x_hat = _normalization_backward(grad_out, x, dims, weight, eps)
    if weight is None:
        return grad_x.to(x.dtype), None, None
    # sum_to_size undoes the broadcast of weight over the leading dims (there may be none).
    grad_weight = (grad_out * x_hat).sum_to_size(weight.shape)
    grad_bias = grad_out.to(torch.float64).sum_to_size(weight.shape)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype), grad_bias.to(weight.dtype)


def batch_norm_backward(
    grad_out: Tensor,
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    training: bool = False,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    r"""Gradients of :func:`batch_norm` (called with the same arguments), without autograd.

    In **training** the statistics are the batch's, functions of every value of the channel: the
    closed form of :func:`layer_norm_backward` over a channel's :math:`n = N \cdot L` values,

    .. math::
        \frac{\partial L}{\partial x_i} = \frac{1}{\sigma_B}\left(g_i - \langle g \rangle
        - \hat{x}_i \langle g \hat{x} \rangle\right), \qquad g = \gamma \,
        \frac{\partial L}{\partial y},

    so each sample's gradient depends on the whole batch. In **evaluation** the running
    statistics are constants and BatchNorm is an affine map per channel:
    :math:`\partial L/\partial x_i = g_i / \sqrt{\hat\sigma^2 + \varepsilon}`, sample by
    sample. :math:`\partial L/\partial \gamma` and :math:`\partial L/\partial \beta` sum
    :math:`\partial L/\partial y \cdot \hat{x}` and :math:`\partial L/\partial y` over every
    dim except dim 1, with :math:`\hat{x}` the normalized input of that mode.

    Args:
        grad_out: gradient of the loss with respect to the output of :func:`batch_norm`.
        x: the input that was passed to :func:`batch_norm`.
        running_mean, running_var: of shape (C,); read in evaluation only (``None`` allowed in
            training).
        weight: :math:`\gamma`, of shape (C,), or ``None``.
        training, eps: as for :func:`batch_norm`.

    Returns:
        ``(grad_x, grad_weight, grad_bias)``; the last two are ``None`` when ``weight`` is.

    Shape:
        - grad_out, x, grad_x: :math:`(N, C)` or :math:`(N, C, L)`
        - running_mean, running_var, weight, grad_weight, grad_bias: :math:`(C,)`

    Example::

        >>> x = torch.randn(8, 3, dtype=torch.float64, requires_grad=True)
        >>> grad_out = torch.randn(8, 3, dtype=torch.float64)
        >>> batch_norm(x, None, None, training=True).backward(grad_out)
        >>> grad_x, _, _ = batch_norm_backward(grad_out, x.detach(), None, None, training=True)
        >>> torch.allclose(grad_x, x.grad)
        True
    """
    _check_channels(x, weight=weight)
    dims = (0, *range(2, x.dim()))
    per_channel = _per_channel(weight, x.dim())
    if training:
        grad_x, x_hat = _normalization_backward(grad_out, x, dims, per_channel, eps)
    else:
        _check_channels(x, running_mean=running_mean, running_var=running_var)
        rstd = torch.rsqrt(_per_channel(running_var, x.dim()).to(torch.float64) + eps)
        x_hat = (x.to(torch.float64) - _per_channel(running_mean, x.dim())) * rstd
        g = grad_out.to(torch.float64) * (1 if per_channel is None else per_channel)
        grad_x = g * rstd  # the statistics are constants: no path through them
    if weight is None:
        return grad_x.to(x.dtype), None, None
    grad_weight = (grad_out * x_hat).sum(dims)
    grad_bias = grad_out.to(torch.float64).sum(dims)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype), grad_bias.to(weight.dtype)
