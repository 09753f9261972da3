"""Folding an evaluation-mode BatchNorm into the layer before it, as
:mod:`torch.nn.utils.fusion` does (`fuse_linear_bn_weights`, `fuse_conv_bn_weights`)."""

import torch
from torch import Tensor

__all__ = ["fold_batch_norm"]


def fold_batch_norm(
    weight: Tensor,
    bias: Tensor | None,
    running_mean: Tensor,
    running_var: Tensor,
    gamma: Tensor | None = None,
    beta: Tensor | None = None,
    eps: float = 1e-5,
) -> tuple[Tensor, Tensor]:
    r"""The weight and bias of one layer computing ``BatchNorm(layer(x))`` in evaluation mode.

    In evaluation BatchNorm is the affine map :math:`y = s \odot (h - \hat\mu) + \beta` with
    :math:`s = \gamma / \sqrt{\hat\sigma^2 + \epsilon}`, one scale per output unit (or channel)
    of the layer before it, :math:`h = W x + b`. Hence :math:`W' = \mathrm{diag}(s)\,W` (row
    :math:`k` of ``weight``, the weights of output :math:`k`, times :math:`s_k`) and
    :math:`b' = s \odot (b - \hat\mu) + \beta`.

    Args:
        weight: the layer's weight, output units first: :math:`(C_{out}, C_{in})` for a
            ``Linear``, :math:`(C_{out}, C_{in}, k_1, \ldots)` for a convolution.
        bias: the layer's bias of shape :math:`(C_{out},)`, or ``None`` (a layer built with
            ``bias=False``).
        running_mean, running_var: BatchNorm's buffers, of shape :math:`(C_{out},)`.
        gamma, beta: BatchNorm's weight and bias; ``None`` means 1 and 0 (``affine=False``).
        eps: BatchNorm's :math:`\epsilon`.

    Returns:
        ``(folded_weight, folded_bias)``, in the weight's dtype.

    Example::

        >>> lin, bn = torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2).eval()
        >>> w, b = fold_batch_norm(lin.weight, lin.bias, bn.running_mean, bn.running_var)
        >>> x = torch.randn(4, 3)
        >>> torch.allclose(x @ w.T + b, bn(lin(x)), atol=1e-6)
        True
    """
    scale = torch.rsqrt(running_var.to(torch.float64) + eps)
    if gamma is not None:
        scale = scale * gamma
    folded_weight = weight * scale.view(-1, *[1] * (weight.dim() - 1))
    shift = -running_mean if bias is None else bias - running_mean
    folded_bias = shift * scale if beta is None else shift * scale + beta
    return folded_weight.to(weight.dtype), folded_bias.to(weight.dtype)
