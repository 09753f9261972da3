"""Reference masks and masked statistics for batches of variable-length sequences.

One convention everywhere in this course: a mask is a **bool** tensor that is ``True`` at real
tokens and ``False`` at padding. A batch of B sequences padded to length L is a tensor ``x`` of
shape (B, L, D) with a mask of shape (B, L), so ``x[mask]`` packs the real tokens into
(N_real, D). Padded positions may hold any value, even NaN: nothing here reads them.

Example::

    >>> lengths_to_mask([3, 1])
    tensor([[ True,  True,  True],
            [ True, False, False]])
"""

from collections.abc import Sequence

import torch
from torch import Tensor

from grader.reference.functional import batch_norm

__all__ = ["lengths_to_mask", "masked_batch_norm", "masked_mean"]


def _check_mask(mask: Tensor) -> None:
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = real token), got {mask.dtype}; "
            "convert a 0/1 mask with mask.bool()"
        )


def lengths_to_mask(lengths: Tensor | Sequence[int], max_len: int | None = None) -> Tensor:
    r"""Build the padding mask of sequences with the given lengths.

    ``mask[b, t]`` is ``True`` exactly when :math:`t < \text{lengths}[b]`. A length of 0 gives
    a row of ``False``.

    Args:
        lengths: the length of every sequence, a 1-D integer tensor or a list of ints.
        max_len: the padded length L; ``None`` means ``max(lengths)``.

    Shape:
        - lengths: :math:`(B,)`
        - Output: :math:`(B, L)`, bool.

    Example::

        >>> lengths_to_mask(torch.tensor([2, 0, 1]), max_len=3)
        tensor([[ True,  True, False],
                [False, False, False],
                [ True, False, False]])
    """
    lengths = torch.as_tensor(lengths)
    if lengths.dim() != 1:
        raise ValueError(
            f"lengths must be 1-D (one length per sequence), got shape {tuple(lengths.shape)}"
        )
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise TypeError(f"lengths must be integers, got {lengths.dtype}")
    if max_len is None:
        max_len = int(lengths.max())
    for i, length in enumerate(lengths.tolist()):
        if not 0 <= length <= max_len:
            raise ValueError(f"lengths[{i}] = {length} is outside [0, max_len={max_len}]")
    positions = torch.arange(max_len, device=lengths.device)  # (L,)
    return positions < lengths[:, None]  # (B, L)


def masked_mean(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    r"""Mean of ``x`` over ``dim``, counting only the real (``True``) positions of ``mask``.

    .. math::
        \mathrm{out} = \frac{\sum_t m_t \, x_t}{\sum_t m_t}

    ``mask`` covers the leading dims of ``x`` and is broadcast over the rest (a (B, L) mask
    with (B, L, D) input acts as ``mask[..., None]``); ``dim`` must be one of the dims it covers.
    Padded values never enter the result, not even as ``0 * NaN``.

    Args:
        x: input tensor.
        mask: bool tensor, ``True`` at real positions; its shape is a prefix of ``x.shape``.
        dim: the dim to average over.

    Shape:
        - x: :math:`(B, L, *)`, mask: :math:`(B, L)`, ``dim=1``
        - Output: :math:`(B, *)`

    Example::

        >>> x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
        >>> masked_mean(x, lengths_to_mask([3, 1]), dim=1)
        tensor([2., 4.])
    """
    _check_mask(mask)
    if tuple(x.shape[: mask.dim()]) != tuple(mask.shape):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not match the leading dims of input of "
            f"shape {tuple(x.shape)}"
        )
    dim = dim + x.dim() if dim < 0 else dim  # a negative dim counts from the end of x
    if not 0 <= dim < mask.dim():
        raise ValueError(
            f"dim {dim} is not covered by the mask: mask shape {tuple(mask.shape)}, "
            f"input shape {tuple(x.shape)}"
        )
    count = mask.sum(dim)  # real positions per slice
    if (count == 0).any():
        index = tuple((count == 0).nonzero()[0].tolist())
        where = index[0] if len(index) == 1 else index
        raise ValueError(f"sequence {where} has no real tokens, so its masked mean is undefined")
    trailing = (1,) * (x.dim() - mask.dim())
    total = torch.where(mask.view(*mask.shape, *trailing), x, 0).sum(dim)
    return total / count.view(*count.shape, *trailing)


def masked_batch_norm(
    x: Tensor,
    mask: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    r"""Batch Normalization of padded sequences, with statistics over real tokens only.

    See `Batch Normalization <https://arxiv.org/abs/1502.03167>`__ (Ioffe & Szegedy, 2015).

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    For every feature, the expectations run over the real tokens of the whole batch, never the
    padding: the result equals :func:`~grader.reference.functional.batch_norm` applied to the packed
    tokens ``x[mask]`` of shape (N_real, D), including the update of the running statistics
    (biased variance to normalize, unbiased variance into ``running_var``). Padded positions of
    the output are 0. In evaluation the running statistics are used.

    Args:
        x: padded batch.
        mask: bool tensor, ``True`` at real tokens.
        running_mean, running_var, weight, bias, training, momentum, eps: as for
            :func:`~grader.reference.functional.batch_norm`, per feature D.

    Shape:
        - x: :math:`(B, L, D)`, mask: :math:`(B, L)`
        - Output: :math:`(B, L, D)`

    Example::

        >>> x = torch.tensor([[[1.0], [3.0]], [[5.0], [-1e9]]])  # (B=2, L=2, D=1), one pad
        >>> masked_batch_norm(x, lengths_to_mask([2, 1]), training=True)
        tensor([[[-1.2247],
                 [ 0.0000]],
        <BLANKLINE>
                [[ 1.2247],
                 [ 0.0000]]])
    """
    _check_mask(mask)
    if x.dim() != 3 or tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(
            f"expected x of shape (B, L, D) and mask of shape (B, L), got x of shape "
            f"{tuple(x.shape)} and mask of shape {tuple(mask.shape)}"
        )
    if not mask.any():
        raise ValueError(f"mask of shape {tuple(mask.shape)} has no real tokens to normalize")
    real_tokens = x[mask]  # (N_real, D): the padding never reaches the statistics
    y = torch.zeros_like(x)
    y[mask] = batch_norm(
        real_tokens, running_mean, running_var, weight, bias, training, momentum, eps
    )
    return y
