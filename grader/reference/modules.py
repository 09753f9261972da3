"""A stateful reference BatchNorm, built on :func:`grader.reference.functional.batch_norm`."""

import torch
from torch import Tensor, nn

from grader.reference.functional import batch_norm

__all__ = ["BatchNorm"]


class BatchNorm(nn.Module):
    r"""Batch Normalization with running statistics, a readable twin of :class:`nn.BatchNorm1d`.

    See `Batch Normalization <https://arxiv.org/abs/1502.03167>`__ (Ioffe & Szegedy, 2015).

    .. math::
        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \gamma + \beta

    In training, each channel is normalized with the mean and biased variance of its values
    across the batch (and length) dims, and the buffers ``running_mean`` and ``running_var``
    track their moving averages; ``running_var`` stores the unbiased variance. In evaluation,
    the running statistics are used. Parameter and buffer names, defaults and updates match
    :class:`nn.BatchNorm1d`, so state dicts load into either.

    Args:
        num_features: the number of channels C.
        eps: added to the variance for numerical stability.
        momentum: the weight of the current batch in the running statistics; ``None`` means a
            cumulative moving average, where batch :math:`k` gets the weight :math:`1 / k`.
        affine: learn a per-channel scale :math:`\gamma` (``weight``, init 1) and shift
            :math:`\beta` (``bias``, init 0).
        track_running_stats: keep running statistics; if ``False``, the batch statistics are
            used in evaluation too.

    Shape:
        - Input: :math:`(N, C)` or :math:`(N, C, L)`
        - Output: same shape as the input.

    Example::

        >>> bn = BatchNorm(3)
        >>> y = bn(torch.randn(8, 3, 5))
        >>> bn.num_batches_tracked
        tensor(1)
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
    ) -> None:
        super().__init__()
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        # What is switched off is registered as None, as in torch.
        n = num_features
        self.register_parameter("weight", nn.Parameter(torch.ones(n)) if affine else None)
        self.register_parameter("bias", nn.Parameter(torch.zeros(n)) if affine else None)
        track = track_running_stats
        self.register_buffer("running_mean", torch.zeros(n) if track else None)
        self.register_buffer("running_var", torch.ones(n) if track else None)
        self.register_buffer("num_batches_tracked", torch.tensor(0) if track else None)  # long

    def forward(self, x: Tensor) -> Tensor:
        momentum = 0.0 if self.momentum is None else self.momentum  # unused outside training
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                momentum = 1.0 / self.num_batches_tracked.item()
        return batch_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            training=self.training,
            momentum=momentum,
            eps=self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )
