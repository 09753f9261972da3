"""Padding a batch of variable-length sequences.

One convention everywhere in this course: a mask is a **bool** tensor that is ``True`` at real
tokens and ``False`` at padding. A batch of B sequences padded to length L is a tensor ``x`` of
shape (B, L, D) with a mask of shape (B, L), so ``x[mask]`` packs the real tokens into
(N_real, D).
"""

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

__all__ = ["pad_sequences"]


def pad_sequences(seqs: Sequence[Tensor], padding_value: float = 0.0) -> tuple[Tensor, Tensor]:
    r"""Stack sequences of different lengths into one padded batch and its mask.

    Args:
        seqs: B tensors of shape :math:`(L_i, D)`, with a common D.
        padding_value: the value written at padded positions.

    Returns:
        ``(x, mask)``: the padded batch and its mask (``True`` = real token), with
        :math:`L = \max_i L_i`.

    Shape:
        - seqs: a list of :math:`(L_i, D)`
        - x: :math:`(B, L, D)`
        - mask: :math:`(B, L)`, bool.

    Example::

        >>> x, mask = pad_sequences([torch.ones(2, 3), torch.ones(1, 3)])
        >>> x.shape
        torch.Size([2, 2, 3])
        >>> mask
        tensor([[ True,  True],
                [ True, False]])
    """
    shapes = [tuple(s.shape) for s in seqs]
    if not shapes or any(len(shape) != 2 or shape[1] != shapes[0][1] for shape in shapes):
        raise ValueError(f"expected a non-empty list of (L_i, D) tensors with one D, got {shapes}")
    x = pad_sequence(list(seqs), batch_first=True, padding_value=padding_value)  # (B, L, D)
    # The mask is padded the same way: True for every real position, False where padding went.
    real = [torch.ones(len(s), dtype=torch.bool, device=x.device) for s in seqs]
    return x, pad_sequence(real, batch_first=True, padding_value=False)  # (B, L)
