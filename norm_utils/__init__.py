"""norm_utils: the course's reference implementations of normalization layers.

Names, signatures and semantics mirror `torch.nn.functional`, so every function can be held
against PyTorch. One mask convention everywhere: a bool tensor, True = real token.

- `functional`: layer_norm, batch_norm, group_norm, instance_norm, rms_norm, layer_norm_backward
- `modules`: BatchNorm, a stateful reference mirroring nn.BatchNorm1d
- `masking`: lengths_to_mask, pad_sequences, masked_mean, masked_batch_norm
- `blocks`: PostLNBlock, PreLNBlock, DeepNormBlock, Encoder, TinyLM
- `data`, `plotting`: seeded toy data and the figures the notebooks share
"""

from norm_utils.blocks import (
    DeepNormBlock,
    Encoder,
    PostLNBlock,
    PreLNBlock,
    TinyLM,
    deepnorm_constants,
    ffn_grad_norms,
    linear_warmup,
)
from norm_utils.functional import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    layer_norm_backward,
    rms_norm,
)
from norm_utils.masking import lengths_to_mask, masked_batch_norm, masked_mean, pad_sequences
from norm_utils.modules import BatchNorm

__all__ = [
    "BatchNorm",
    "DeepNormBlock",
    "Encoder",
    "PostLNBlock",
    "PreLNBlock",
    "TinyLM",
    "batch_norm",
    "deepnorm_constants",
    "ffn_grad_norms",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "layer_norm_backward",
    "lengths_to_mask",
    "linear_warmup",
    "masked_batch_norm",
    "masked_mean",
    "pad_sequences",
    "rms_norm",
]
