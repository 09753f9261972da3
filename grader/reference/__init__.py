"""The reference implementations of the graded exercises, for the checks and the tests.

They mirror their namesakes in :mod:`torch.nn.functional` and are held against PyTorch by the
tests. They live with the grader, not in `norm_utils` (the package the notebooks' demos import),
so that the demos hand out no answers; an answer cell may not import the grader.

- `functional`: layer_norm, layer_norm_backward, batch_norm, batch_norm_backward (GroupNorm's
  and RMSNorm's checks grade against torch.nn.functional)
- `fusion`: fold_batch_norm, an evaluation-mode BatchNorm folded into the layer before it
- `modules`: BatchNorm, a stateful twin of nn.BatchNorm1d
- `masking`: lengths_to_mask, masked_mean, masked_batch_norm
- `blocks`: PostLNBlock, PreLNBlock
"""

from grader.reference import blocks, functional, fusion, masking, modules
from grader.reference.blocks import PostLNBlock, PreLNBlock
from grader.reference.functional import (
    batch_norm,
    batch_norm_backward,
    layer_norm,
    layer_norm_backward,
)
from grader.reference.fusion import fold_batch_norm
from grader.reference.masking import lengths_to_mask, masked_batch_norm, masked_mean
from grader.reference.modules import BatchNorm

__all__ = [
    "BatchNorm",
    "PostLNBlock",
    "PreLNBlock",
    "batch_norm",
    "batch_norm_backward",
    "blocks",
    "fold_batch_norm",
    "functional",
    "fusion",
    "layer_norm",
    "layer_norm_backward",
    "lengths_to_mask",
    "masked_batch_norm",
    "masked_mean",
    "masking",
    "modules",
]
