"""The library's implementations an exercise may forbid, by family: one table for every check.

An exercise that asks for an implementation forbids its family, and every family that computes
the same thing after a reshape: `layer_norm` over the last dim is `group_norm` with one group,
`instance_norm` with the rows as channels, `batch_norm` in training mode on the transposed
input, `rms_norm` of the centred input, and `F.normalize` of it times √n (to within ε). So every
normalization exercise forbids all of `NORMALIZATIONS`.

Each family lists the library's code three ways, for the two places that enforce it:

- `operators`: PyTorch dispatcher operators (every overload, forward and backward), blocked in
  the exercise's process by `grader.grading.sandboxed.blocking` whatever the route to them;
- `python`: pure-Python implementations (torch's decompositions and references, the course's
  public and private), poisoned there too;
- `names`: what the static scan refuses in the answer's text: the above by their last name,
  plus the `nn` classes and `F` functions that reach them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    operators: tuple[str, ...] = ()  # "namespace::name"
    python: tuple[str, ...] = ()  # "module:function" or "module:Class.method"
    classes: tuple[str, ...] = ()  # nn classes and other names the source must not use
    # Python implementations refused at run time only: their names are too common for the source
    # scan (`torch.masked`'s mean is called `mean`), which refuses their module by `classes`.
    unnamed: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        qualified = [o.split("::")[1] for o in self.operators] + [
            p.partition(":")[2].split(".")[0] for p in self.python
        ]
        return tuple(dict.fromkeys((*qualified, *self.classes)))

    @property
    def implementations(self) -> tuple[str, ...]:
        """Every Python implementation the family blocks, named in the source or not."""
        return (*self.python, *self.unnamed)


@dataclass(frozen=True)
class Forbidden:
    """What one exercise forbids: families of the table and names of its own (e.g. the
    reference function of the same name). Iterating gives the names the scan refuses."""

    families: tuple[Family, ...] = ()
    own: tuple[str, ...] = ()

    @property
    def operators(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(o for f in self.families for o in f.operators))

    @property
    def python(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for f in self.families for p in f.implementations))

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys((*(n for f in self.families for n in f.names), *self.own)))


def forbid(*families: Family, own: tuple[str, ...] = ()) -> Forbidden:
    return Forbidden(families, own)


# Every function of grader.reference.functional is a normalization or a piece of one (its moments,
# running statistics, affine map): an answer may call none of them.
NORM_UTILS = Family(
    python=(
        *(
            f"grader.reference.functional:{name}"
            for name in (
                "_moments",
                "_normalized_dims",
                "_check_channels",
                "_per_channel",
                "_affine",
                "_update_running_stats",
                "_normalization_backward",
                "layer_norm",
                "layer_norm_backward",
                "batch_norm",
                "batch_norm_backward",
            )
        ),
        "grader.reference.masking:masked_batch_norm",
    ),
    classes=("BatchNorm",),
)

LAYER_NORM = Family(
    operators=(
        "aten::layer_norm",
        "aten::native_layer_norm",
        "aten::native_layer_norm_backward",
        "quantized::layer_norm",
    ),
    python=(
        "torch._refs:native_layer_norm",
        "torch._refs.nn.functional:layer_norm",
        "torch._refs:_normalize",
        "torch._decomp.decompositions:native_layer_norm_backward",
    ),
    classes=("LayerNorm",),
)

BATCH_NORM = Family(
    operators=(
        "aten::batch_norm",
        "aten::native_batch_norm",
        "aten::_native_batch_norm_legit",
        "aten::_native_batch_norm_legit_no_training",
        "aten::_native_batch_norm_legit_functional",
        "aten::_batch_norm_impl_index",
        "aten::_batch_norm_with_update",
        "aten::_batch_norm_with_update_functional",
        "aten::_batch_norm_no_update",
        # SyncBatchNorm's pieces: the batch statistics, the running update (it has a CPU
        # kernel), the normalization and their backward
        "aten::batch_norm_stats",
        "aten::batch_norm_update_stats",
        "aten::batch_norm_elemt",
        "aten::batch_norm_gather_stats",
        "aten::batch_norm_gather_stats_with_counts",
        "aten::batch_norm_backward_reduce",
        "aten::batch_norm_backward_elemt",
        "aten::native_batch_norm_backward",
        "aten::batch_norm_backward",
        "aten::_batch_norm_impl_index_backward",
        "quantized::batch_norm",
        "quantized::batch_norm1d",
        "quantized::batch_norm2d",
        "quantized::batch_norm3d",
    ),
    python=("torch._decomp.decompositions:native_batch_norm_helper",),
    classes=(
        "BatchNorm1d",
        "BatchNorm2d",
        "BatchNorm3d",
        "LazyBatchNorm1d",
        "LazyBatchNorm2d",
        "LazyBatchNorm3d",
        "SyncBatchNorm",
    ),
)

INSTANCE_NORM = Family(
    operators=("aten::instance_norm", "quantized::instance_norm"),
    classes=(
        "InstanceNorm1d",
        "InstanceNorm2d",
        "InstanceNorm3d",
        "LazyInstanceNorm1d",
        "LazyInstanceNorm2d",
        "LazyInstanceNorm3d",
    ),
)

GROUP_NORM = Family(
    operators=(
        "aten::group_norm",
        "aten::native_group_norm",
        "aten::native_group_norm_backward",
        "quantized::group_norm",
    ),
    python=("torch._refs:native_group_norm", "torch._refs.nn.functional:group_norm"),
    classes=("GroupNorm",),
)

RMS_NORM = Family(
    operators=("aten::rms_norm", "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward"),
    classes=("RMSNorm",),
)

# x / ‖x‖: of the centred input, times √n, it is layer_norm without ε.
L2_NORMALIZE = Family(python=("torch.nn.functional:normalize",))

NORMALIZATIONS = (
    LAYER_NORM,
    BATCH_NORM,
    INSTANCE_NORM,
    GROUP_NORM,
    RMS_NORM,
    L2_NORMALIZE,
    NORM_UTILS,
)

# The variance itself, for the exercise that computes it (every normalization above gives it
# too: native_layer_norm returns 1/√(var+ε), batch_norm's running_var moves by it).
VARIANCE = Family(
    operators=(
        "aten::var",
        "aten::var_mean",
        "aten::std",
        "aten::std_mean",
        "aten::cov",
        "prims::var",
    ),
    python=("torch._refs:var", "torch._refs:var_mean", "torch._refs:std", "torch._refs:std_mean"),
)

# An evaluation-mode BatchNorm folded into the layer before it: the library's fusion utilities
# (torch.ao.quantization's fusers call these) and the course's reference.
BN_FOLDING = Family(
    python=(
        "torch.nn.utils.fusion:fuse_linear_bn_eval",
        "torch.nn.utils.fusion:fuse_linear_bn_weights",
        "torch.nn.utils.fusion:fuse_conv_bn_eval",
        "torch.nn.utils.fusion:fuse_conv_bn_weights",
        "grader.reference.fusion:fold_batch_norm",
    ),
)

# A gradient the backward exercises ask to derive, computed by differentiating a forward pass:
# reverse mode (`torch.autograd.grad` and `backward`, on which `Tensor.backward`,
# `torch.autograd.functional` and `torch.func`'s grad, vjp and jacrev are built), forward mode
# (`_make_dual`, under `torch.func.jvp` and jacfwd), and the course's own finite differences and
# autograd helpers, which the notebooks check a derivation with. The names a graph is built or
# walked by are refused in the source.
AUTOGRAD = Family(
    operators=("aten::_make_dual",),
    python=(
        "torch.autograd:grad",
        "torch.autograd:backward",
        "norm_utils.gradients:numerical_grad",
        "norm_utils.gradients:autograd_gradients",
    ),
    classes=("requires_grad", "requires_grad_", "grad_fn", "_execution_engine", "run_backward"),
)

# A mean over the real tokens: NaN-skipping, the course's, and torch.masked's (also reached
# through a MaskedTensor's mean).
MASKED_MEAN = Family(
    operators=("aten::nanmean",),
    python=("grader.reference.masking:masked_mean",),
    classes=("masked", "MaskedTensor", "masked_tensor", "as_masked_tensor"),
    unnamed=("torch.masked._ops:mean",),
)

SEQUENCE_MASKS = Family(
    python=("grader.reference.masking:lengths_to_mask", "norm_utils.masking:pad_sequences"),
)

# The placement exercises ask for a Transformer block or stack: the library's, torch's and
# the course's, compute one whole (a stack of one layer is a block). Their forward methods are
# refused; their parts (nn.LayerNorm, attention) are what the answers are built from.
LIBRARY_BLOCKS = Family(
    operators=("aten::_transformer_encoder_layer_fwd",),
    python=(
        "torch.nn.modules.transformer:TransformerEncoderLayer.forward",
        "torch.nn.modules.transformer:TransformerDecoderLayer.forward",
        "grader.reference.blocks:PostLNBlock.forward",
        "grader.reference.blocks:PreLNBlock.forward",
    ),
    classes=("_Block",),
)

LIBRARY_STACKS = Family(
    python=(
        "torch.nn.modules.transformer:TransformerEncoder.forward",
        "torch.nn.modules.transformer:Transformer.forward",
        "norm_utils.blocks:Encoder.forward",
        "norm_utils.blocks:TinyLM.forward",
    ),
)

# The QK-norm exercise asks for the attention itself: torch's fused attention computes its
# softmax(q kᵀ / √d) v in one call, and its module the whole sublayer.
ATTENTION = Family(
    operators=(
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_native_multi_head_attention",
    ),
    python=("torch.nn.functional:multi_head_attention_forward",),
    classes=("MultiheadAttention",),
)

# The course's own init of notebook 04's experiments: refused by name only in DeepNormBlock (the
# reference blocks' constructor calls it), whose initialization is half of Exercise 4.
DEEPNORM_INIT = Family(classes=("xavier_init_",))
