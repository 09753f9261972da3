"""Seeded toy data for the course's experiments.

Every function draws from its own ``torch.Generator`` seeded by its arguments, so it returns the
same tensors on every call and never touches the global RNG (``torch.manual_seed`` elsewhere in
a notebook does not change the data, and the data does not change the model's init).
"""

import torch
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "SEP",
    "copy_task_batch",
    "random_token_batches",
    "variable_length_batch",
]

SEP = 0
"""Separator token of :func:`copy_task_batch`; content tokens are ``1 .. vocab_size - 1``."""

IGNORE_INDEX = -100
"""Target value that ``F.cross_entropy`` skips (its default ``ignore_index``)."""


def _rng(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_token_batches(
    num_batches: int, batch_size: int, seq_len: int, vocab_size: int, seed: int
) -> Tensor:
    """Uniform random token ids, for measuring a language model at initialization.

    With random tokens there is nothing to learn, which is the point: gradients at init then
    reflect the architecture, not the data (as in Xiong et al. 2020, Fig. 3).

    Returns:
        LongTensor of shape ``(num_batches, batch_size, seq_len)``; iterate over dim 0 for
        batches. For next-token prediction pass ``seq_len = T + 1``.

    Example:
        >>> random_token_batches(2, 4, 9, vocab_size=50, seed=0).shape
        torch.Size([2, 4, 9])
    """
    shape = (num_batches, batch_size, seq_len)
    return torch.randint(0, vocab_size, shape, generator=_rng(seed))


def copy_task_batch(
    batch_size: int, length: int, vocab_size: int, seed: int
) -> tuple[Tensor, Tensor]:
    """One batch of the copy task ``a_1 .. a_k SEP a_1 .. a_k`` as next-token inputs and targets.

    Only the copy after ``SEP`` can be predicted, so targets before it are ``IGNORE_INDEX``
    and the loss measures copying alone (chance level is ``log(vocab_size - 1)``).

    Args:
        batch_size: B.
        length: k, tokens to copy.
        vocab_size: V, including ``SEP`` = 0.
        seed: seed of the batch; use the step number for a fresh batch per step.

    Returns:
        ``inputs`` and ``targets``, LongTensors of shape ``(B, 2k)``; ``targets[:, t]`` is the
        token after ``inputs[:, t]``.

    Example:
        >>> inputs, targets = copy_task_batch(1, 3, vocab_size=10, seed=0)
        >>> bool((inputs[0, 3] == SEP) & (targets[0, 3:] == inputs[0, :3]).all())
        True
    """
    g = _rng(seed)
    tokens = torch.randint(1, vocab_size, (batch_size, length), generator=g)  # (B, k)
    sep = torch.full((batch_size, 1), SEP)
    seq = torch.cat([tokens, sep, tokens], dim=1)  # (B, 2k + 1)
    inputs, targets = seq[:, :-1], seq[:, 1:].clone()  # (B, 2k) each
    targets[:, :length] = IGNORE_INDEX
    return inputs, targets


def variable_length_batch(
    lengths: list[int], dim: int, seed: int, mean: float = 3.0, std: float = 2.0
) -> list[Tensor]:
    """Sequences of different lengths, before padding: ``[(L_i, dim) for L_i in lengths]``.

    Real tokens have a clearly nonzero ``mean``, so zero padding visibly drags BatchNorm's
    batch statistics toward 0, while LayerNorm (per token) is unaffected.

    Example:
        >>> [tuple(s.shape) for s in variable_length_batch([3, 1], dim=4, seed=0)]
        [(3, 4), (1, 4)]
    """
    g = _rng(seed)
    return [mean + std * torch.randn(length, dim, generator=g) for length in lengths]
