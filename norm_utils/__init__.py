"""norm_utils: the course's reference implementations of normalization layers.

Names, signatures and semantics mirror `torch.nn.functional`, so every function can be held
against PyTorch. One mask convention everywhere: a bool tensor, True = real token.
"""

from norm_utils.functional import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    layer_norm_backward,
    rms_norm,
)

__all__ = [
    "batch_norm",
    "group_norm",
    "instance_norm",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
]
