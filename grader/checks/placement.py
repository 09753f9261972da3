"""Checks for notebook 04: `PostLNBlock`, `PreLNBlock` and `PreLNEncoder`.

The student's class is built, given known weights (plain arrays, in the `state_dict` layout of
`nn.TransformerEncoderLayer` / `nn.TransformerEncoder`), run forward and backward in float64,
and compared with PyTorch's own layer (`norm_first=False` / `True`) and with the reference blocks.
Two kinds of check pin down *where* the LayerNorm sits rather than only whether the numbers match:

- stand-in sublayers: `_sa_block` and `_ff_block` are replaced by known functions F₁, F₂ and
  forward hooks record what `norm1` and `norm2` receive, so the residual structure is read off
  directly, independent of the student's attention code;
- switched-off sublayers (output weights zeroed, so F₁ ≡ b₁ and F₂ ≡ b₂, their output biases):
  a Pre-LN block must then be the shift x + b₁ + b₂ (its residual path never meets a norm), a
  Post-LN block LN₂(LN₁(x + b₁) + b₂), a Pre-LN stack LN_f(x + Σ biases).

Every mistake below changes the output by order one (random LayerNorm affines, tanh in F₁), far
beyond the float64 tolerance, for any grading seed.

Rubric: every check of a block or a stack tests its residual structure (where each norm sits,
what each sublayer reads), the centre of this notebook, so a misplaced norm keeps at most the
points of the one check it happens to pass (0 or 1 of 6; 0 of 4 for the stack). A block or a
stack that mixes samples across the batch passes the stand-in and switched-off checks, whose
sublayers keep samples apart; those checks presuppose a block that does too, so any wrong
structure (mixed samples, a norm reading the wrong tensor) keeps at most 1 of 6 (0.5 of 4).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch.nn.functional as F
from torch import nn

from grader.checks.core import FLOAT64, Arrays, Check, Exercise, Mistake, Structure, hidden, visible
from grader.checks.library import LIBRARY_BLOCKS, LIBRARY_STACKS, forbid
from grader.grading.sandboxed import probes
from grader.grading.sandboxed.probes import probe_block, probe_stack
from grader.reference.blocks import PostLNBlock, PreLNBlock
from norm_utils.blocks import Encoder
from normcheck.structure import (
    ENCODER_PROPERTIES,
    POST_LN_PROPERTIES,
    PRE_LN_PROPERTIES,
    SWITCH_OFF,
)

# ---------------------------------------------------------------------------------------------
# Inputs


def _block_weights(
    rng: np.random.Generator, d: int, d_ff: int, switch_off: bool
) -> dict[str, np.ndarray]:
    """Random float64 weights for one block; LayerNorm affines far from (1, 0) so that no
    misplaced norm can hide behind an identity affine. With `switch_off`, the sublayers' output
    weights are zeroed (`SWITCH_OFF`): each sublayer outputs only its bias."""
    n = rng.normal
    weights = {
        "self_attn.in_proj_weight": n(0, d**-0.5, (3 * d, d)),
        "self_attn.in_proj_bias": n(0, 0.2, 3 * d),
        "self_attn.out_proj.weight": n(0, d**-0.5, (d, d)),
        "self_attn.out_proj.bias": n(0, 0.2, d),
        "linear1.weight": n(0, d**-0.5, (d_ff, d)),
        "linear1.bias": n(0, 0.2, d_ff),
        "linear2.weight": n(0, d_ff**-0.5, (d, d_ff)),
        "linear2.bias": n(0, 0.2, d),
        "norm1.weight": n(1, 0.4, d),
        "norm1.bias": n(0, 0.4, d),
        "norm2.weight": n(1, 0.4, d),
        "norm2.bias": n(0, 0.4, d),
    }
    if switch_off:
        weights.update({k: np.zeros_like(weights[k]) for k in SWITCH_OFF})
    return weights


def _case(
    rng: np.random.Generator,
    d: int = 8,
    heads: int = 2,
    d_ff: int = 16,
    *,
    layers: int = 0,
    batch: int = 2,
    seq: int = 5,
    scale: float = 1.0,
    stand_in: bool = False,
    switch_off: bool = False,
) -> Arrays:
    """The weights of one block, or with `layers`, of a Pre-LN stack of that many blocks and its
    final LayerNorm, in the `state_dict` layout; an input of `scale` and the cotangent its
    backward pass starts from; with `stand_in`, the stand-in sublayers' weights."""
    if layers:
        case = {
            f"w:layers.{i}.{k}": v
            for i in range(layers)
            for k, v in _block_weights(rng, d, d_ff, switch_off).items()
        }
        case["w:norm.weight"] = rng.normal(1, 0.4, d)
        case["w:norm.bias"] = rng.normal(0, 0.4, d)
        case["dims"] = np.array([layers, d, heads, d_ff])
    else:
        case = {f"w:{k}": v for k, v in _block_weights(rng, d, d_ff, switch_off).items()}
        case["dims"] = np.array([d, heads, d_ff])
    case["x"] = scale * rng.standard_normal((batch, seq, d))
    case["cotangent"] = rng.standard_normal((batch, seq, d))
    if stand_in:
        case["f1_weight"] = rng.normal(0, 1.5 * d**-0.5, (d, d))
        case["f1_bias"] = rng.normal(0, 0.5, d)
        case["f2_weight"] = rng.normal(0, d**-0.5, (d, d))
    return case


# ---------------------------------------------------------------------------------------------
# References: PyTorch's own layers (the blocks are also checked against norm_utils in the tests)


def torch_post_ln(d_model: int, n_heads: int, d_ff: int) -> nn.Module:
    return nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, batch_first=True)


def torch_pre_ln(d_model: int, n_heads: int, d_ff: int) -> nn.Module:
    return nn.TransformerEncoderLayer(
        d_model, n_heads, d_ff, dropout=0.0, batch_first=True, norm_first=True
    )


def reference_pre_ln_encoder(num_layers: int, d_model: int, n_heads: int, d_ff: int) -> nn.Module:
    return Encoder("pre", num_layers, d_model, n_heads, d_ff, final_norm=True)


# ---------------------------------------------------------------------------------------------
# Mistakes: the reference blocks with another two-line forward


def _variant(name: str, forward, base=PostLNBlock):
    return type(name, (base,), {"forward": forward})


def _post_norm_on_branch(self, x):
    x = x + self.norm1(self._sa_block(x, None, None))
    return x + self.norm2(self._ff_block(x))


def _post_without_norm2(self, x):
    x = self.norm1(x + self._sa_block(x, None, None))
    return x + self._ff_block(x)


def _post_without_norm1(self, x):
    x = x + self._sa_block(x, None, None)
    return self.norm2(x + self._ff_block(x))


def _post_norm1_twice(self, x):
    x = self.norm1(x + self._sa_block(x, None, None))
    return self.norm1(x + self._ff_block(x))


def _pre_residual_after_norm(self, x):
    h = self.norm1(x)
    x = h + self._sa_block(h, None, None)
    h = self.norm2(x)
    return h + self._ff_block(h)


def _pre_norm_on_branch(self, x):
    x = x + self.norm1(self._sa_block(x, None, None))
    return x + self.norm2(self._ff_block(x))


def _pre_without_norm2(self, x):
    x = x + self._sa_block(self.norm1(x), None, None)
    return x + self._ff_block(x)


def _pre_norm1_twice(self, x):
    x = x + self._sa_block(self.norm1(x), None, None)
    return x + self._ff_block(self.norm1(x))


_ONE_NORM_TWICE = (
    "`norm1` is used for both sublayers; each sublayer has its own LayerNorm (`norm1` around "
    "self-attention, `norm2` around the feed-forward), with its own γ and β."
)

POST_LN_MISTAKES = (
    Mistake(
        "Pre-LN instead of Post-LN",
        "Your block is Pre-LN, x + F(LN(x)); Post-LN normalizes after the residual addition, "
        "x = LN(x + F(x)).",
        PreLNBlock,
    ),
    Mistake(
        "norm on the sublayer branch",
        "Your LayerNorm normalizes only the sublayer's output, x + LN(F(x)); in Post-LN it "
        "normalizes the sum, LN(x + F(x)), so the residual path goes through it too.",
        _variant("PostNormOnBranch", _post_norm_on_branch),
    ),
    Mistake(
        "second norm missing",
        "The feed-forward sublayer's residual addition is not followed by `norm2`: every "
        "sublayer of a Post-LN block ends with its own LayerNorm.",
        _variant("PostWithoutNorm2", _post_without_norm2),
    ),
    Mistake(
        "first norm missing",
        "The self-attention sublayer's residual addition is not followed by `norm1`: every "
        "sublayer of a Post-LN block ends with its own LayerNorm.",
        _variant("PostWithoutNorm1", _post_without_norm1),
    ),
    Mistake("one norm twice", _ONE_NORM_TWICE, _variant("PostNorm1Twice", _post_norm1_twice)),
)

PRE_LN_MISTAKES = (
    Mistake(
        "Post-LN instead of Pre-LN",
        "Your block is Post-LN, LN(x + F(x)); Pre-LN normalizes only the sublayer's input and "
        "adds the sublayer's output to the un-normalized x: x + F(LN(x)).",
        PostLNBlock,
    ),
    Mistake(
        "residual taken after the norm",
        "Your residual adds F to LN(x) instead of to x: h = LN(x); x = h + F(h). In Pre-LN the "
        "residual path skips the norm entirely, x + F(LN(x)), so a block with F ≡ 0 is the "
        "identity.",
        _variant("PreResidualAfterNorm", _pre_residual_after_norm),
    ),
    Mistake(
        "norm on the sublayer output",
        "Your LayerNorm is applied to the sublayer's output, x + LN(F(x)); Pre-LN applies it to "
        "the sublayer's input, x + F(LN(x)).",
        _variant("PreNormOnBranch", _pre_norm_on_branch),
    ),
    Mistake(
        "a norm missing",
        "The feed-forward sublayer reads x without `norm2`: in Pre-LN each sublayer reads its "
        "own normalized copy, x + F₂(LN₂(x)).",
        _variant("PreWithoutNorm2", _pre_without_norm2),
    ),
    Mistake("one norm twice", _ONE_NORM_TWICE, _variant("PreNorm1Twice", _pre_norm1_twice)),
)


class _EncoderVariant(nn.Module):
    """A Pre-LN stack with the same parameters as the reference and a wrong forward."""

    where_norm = "end"  # "end" (correct), "none", "every", "start"
    block = PreLNBlock
    shared = False

    def __init__(self, num_layers: int, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        if self.shared:
            self.layers = nn.ModuleList([self.block(d_model, n_heads, d_ff)] * num_layers)
        else:
            blocks = (self.block(d_model, n_heads, d_ff) for _ in range(num_layers))
            self.layers = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x):
        if self.where_norm == "start":
            x = self.norm(x)
        for layer in self.layers:
            x = layer(x)
            if self.where_norm == "every":
                x = self.norm(x)
        return self.norm(x) if self.where_norm == "end" else x


def _encoder_variant(name: str, **attrs):
    return type(name, (_EncoderVariant,), attrs)


ENCODER_MISTAKES = (
    Mistake(
        "final LayerNorm missing",
        "The output is the last block's output, not normalized: a Pre-LN stack must end with "
        "its final LayerNorm (`self.norm`), since its residual stream is never normalized.",
        _encoder_variant("NoFinalNorm", where_norm="none"),
    ),
    Mistake(
        "final norm after every block",
        "`self.norm` is applied after every block; it belongs once, after the last block (the "
        "blocks carry their own norms inside).",
        _encoder_variant("NormEveryBlock", where_norm="every"),
    ),
    Mistake(
        "final norm at the start",
        "`self.norm` is applied to the input, before the blocks; the final LayerNorm goes after "
        "the last block.",
        _encoder_variant("NormAtStart", where_norm="start"),
    ),
    Mistake(
        "one block shared by every layer",
        "All your layers are one and the same block (e.g. `[block] * num_layers`), so they "
        "share weights; build a new block for each layer.",
        _encoder_variant("SharedBlock", shared=True),
    ),
    Mistake(
        "Post-LN blocks",
        "Your stack is built from Post-LN blocks; a Pre-LN stack uses "
        "`nn.TransformerEncoderLayer(..., norm_first=True)`.",
        _encoder_variant("PostBlocks", block=PostLNBlock),
    ),
)

# Every wrong placement is a wrong structure: none keeps more than its exercise's cap.
POST_LN_MISTAKES, PRE_LN_MISTAKES, ENCODER_MISTAKES = (
    tuple(replace(m, structural=True) for m in mistakes)
    for mistakes in (POST_LN_MISTAKES, PRE_LN_MISTAKES, ENCODER_MISTAKES)
)


def _with_gelu(base: type) -> type:
    """`base` with GELU, BERT's activation, where the block's feed-forward sublayer has ReLU."""

    def _ff_block(self, x):
        return self.dropout(self.linear2(self.dropout(F.gelu(self.linear1(x)))))

    return type(f"{base.__name__}WithGelu", (base,), {"_ff_block": _ff_block})


# A slip inside a sublayer, not in the structure: it costs the checks of the real sublayers only.
_GELU = (
    "Your feed-forward sublayer applies GELU; this block's is linear2(ReLU(linear1(x))). Its "
    "norms and residuals are right: the checks that replace the sublayers with known functions "
    "pass."
)
POST_LN_MISTAKES += (Mistake("GELU instead of ReLU", _GELU, _with_gelu(PostLNBlock)),)
PRE_LN_MISTAKES += (Mistake("GELU instead of ReLU", _GELU, _with_gelu(PreLNBlock)),)

# ---------------------------------------------------------------------------------------------
# Exercises


BLOCK_STRUCTURE = Structure(
    "samples kept apart, each norm reading the tensor its placement gives it", cap=1
)


def _block_checks(placement: str, switched_off: str) -> tuple[Check, ...]:
    return (
        visible(
            1.5,
            f"outputs and input gradients equal nn.TransformerEncoderLayer ({placement}) given "
            "the same weights",
            lambda rng: _case(rng),
        ),
        visible(
            1.5,
            "residual structure, the sublayers replaced by known functions F₁, F₂: output, input "
            "gradient, and what `norm1` and `norm2` each receive",
            lambda rng: _case(rng, stand_in=True),
        ),
        hidden(
            1,
            "output weights zeroed, so each sublayer outputs only its bias b: the block must "
            f"reduce to {switched_off}",
            lambda rng: _case(rng, switch_off=True),
        ),
        hidden(
            1,
            "random weights, 4 heads, d_model 12, inputs of scale 3: outputs and gradients",
            lambda rng: _case(rng, 12, 4, 20, batch=3, seq=4, scale=3.0),
        ),
        hidden(
            1,
            "residual structure, the sublayers replaced by other known functions, on a longer "
            "sequence",
            lambda rng: _case(rng, 8, 2, 16, batch=2, seq=7, stand_in=True),
        ),
    )


def _block_exercise(
    name: str, reference, norm_first: bool, switched_off: str, mistakes, properties
):
    """A block exercise: the checks of `_block_checks`, PyTorch's layer with `norm_first` as
    the reference, the residual structure read off by `properties`."""
    return Exercise(
        name=name,
        reference=reference,
        probe=probe_block,
        checks=_block_checks(f"norm_first={norm_first}", switched_off),
        mistakes=mistakes,
        **FLOAT64,
        properties=properties,
        structure=BLOCK_STRUCTURE,
        forbidden=forbid(LIBRARY_BLOCKS, LIBRARY_STACKS),
    )


POST_LN_BLOCK = _block_exercise(
    "PostLNBlock",
    torch_post_ln,
    False,
    "LN₂(LN₁(x + b₁) + b₂)",
    POST_LN_MISTAKES,
    POST_LN_PROPERTIES,
)
PRE_LN_BLOCK = _block_exercise(
    "PreLNBlock",
    torch_pre_ln,
    True,
    "x + b₁ + b₂, the residual path untouched",
    PRE_LN_MISTAKES,
    PRE_LN_PROPERTIES,
)

PRE_LN_ENCODER = Exercise(
    name="PreLNEncoder",
    reference=reference_pre_ln_encoder,
    probe=probe_stack,
    checks=(
        visible(
            1.5,
            "a 3-layer stack: outputs and input gradients equal nn.TransformerEncoder with "
            "norm=LayerNorm, given the same weights",
            lambda rng: _case(rng, layers=3, seq=4),
        ),
        visible(
            1,
            "output weights zeroed in every block: the stack must reduce to its final LayerNorm "
            "of x + the sum of the sublayers' biases",
            lambda rng: _case(rng, layers=3, seq=4, switch_off=True),
        ),
        hidden(
            1,
            "a 4-layer stack with random weights: outputs and gradients",
            lambda rng: _case(rng, 8, 2, 12, layers=4, batch=3, seq=5),
        ),
        hidden(
            0.5,
            "a 2-layer stack with output weights zeroed and another final affine",
            lambda rng: _case(rng, 12, 3, 16, layers=2, seq=4, switch_off=True),
        ),
    ),
    mistakes=ENCODER_MISTAKES,
    properties=ENCODER_PROPERTIES,
    structure=Structure("samples kept apart, one final LayerNorm after the blocks", cap=0.5),
    **FLOAT64,
    forbidden=forbid(LIBRARY_STACKS),
)

EXERCISES = (POST_LN_BLOCK, PRE_LN_BLOCK, PRE_LN_ENCODER)

probes.TRUSTED.update(
    {e.reference for e in EXERCISES}
    | {m.impl for e in EXERCISES for m in e.mistakes}
    | {PostLNBlock, PreLNBlock}  # the reference blocks, so the tests can hold them to the checks
)
