"""Checks for notebook 06's `PreRMSNormBlock`: a Pre-RMSNorm block (LLaMA's placement) whose
attention normalizes each head's queries and keys (QK-norm) before the scaled dot product.

The student's class is built with the given constructor, given known weights (plain arrays in its
`state_dict` layout, each norm's weight drawn around 1 with spread 0.4), and run in float64 three
ways:

- whole: outputs and input gradients against the reference block (grader/reference/modern.py);
- its sublayers replaced by known functions F₁, F₂, with hooks on `norm1` and `norm2` (the probe
  of notebook 04's blocks): where each RMSNorm sits, read off independently of the attention;
- its attention alone: the weights `attention(x)` gives, the output of `_sa_block(x)` and how
  many values `q_norm` and `k_norm` normalize there (one call for all heads or one a head count
  alike), judged as two parts; and how much the attention weights move when the query and key
  weights grow ×30, which QK-norm makes a rounding error.

Every mistake below moves what its checks compare by order one (norm weights unlike 1, heads of
4 features, where a missing or wrong √head_dim scales the logits by 2 or more), far beyond the
float64 tolerance, for any grading seed.

Rubric (8): the whole block 2 (visible 1, hidden 1), the residual structure 2 (1, 1), the
attention weights 1.5 (0.75, 0.75), the attention sublayer 1.5 (0.75, 0.75), the weights kept
when the query and key weights grow 1 (its visible twin 0.5). So a slip keeps the points of what
it leaves right: a misplaced norm (after the residual, or the residual taken after it) keeps the
attention's 4; values normalized too keep 4.5 (everything but the sublayer's output); QK-norm
over d_model, no 1/√head_dim or 1/√d_model, QK-norm's weights left out or the keys normalized
by `q_norm` keep 3 (the structure and the kept weights, which any QK-norm gives); no QK-norm
keeps 2 (the structure); LayerNorm for RMSNorm, every norm then wrong, keeps only the kept
weights (1).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from grader.checks.core import FLOAT64, Arrays, Exercise, hidden, known_mistake, visible
from grader.checks.library import ATTENTION, LIBRARY_BLOCKS, LIBRARY_STACKS, forbid
from grader.checks.placement import block_inputs
from grader.grading.sandboxed.probes import probe_qk_norm_block
from grader.reference.modern import PreRMSNormBlock
from normcheck.structure import QK_NORM_BLOCK_PROPERTIES

# ---------------------------------------------------------------------------------------------
# Inputs

NORMS = ("q_norm", "k_norm", "norm1", "norm2")
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _random_weights(rng: np.random.Generator, d: int, heads: int, d_ff: int) -> Arrays:
    """Random float64 weights in the block's `state_dict` layout, each norm's weight drawn
    around 1 with spread 0.4, so that no misplaced or missing norm hides behind an identity
    weight."""
    weights = {f"w:{p}.weight": rng.normal(0, d**-0.5, (d, d)) for p in PROJECTIONS}
    weights["w:linear1.weight"] = rng.normal(0, d**-0.5, (d_ff, d))
    weights["w:linear2.weight"] = rng.normal(0, d_ff**-0.5, (d, d_ff))
    for name in NORMS:
        size = d // heads if name in ("q_norm", "k_norm") else d
        weights[f"w:{name}.weight"] = rng.normal(1, 0.4, size)
    return weights


def _case(
    rng: np.random.Generator,
    d: int = 8,
    heads: int = 2,
    d_ff: int = 16,
    *,
    batch: int = 2,
    seq: int = 5,
    scale: float = 1.0,
    stand_in: bool = False,
    attention: str = "",
    grown: float = 0.0,
) -> Arrays:
    """One block's weights, an input of `scale` and the cotangent its backward pass starts
    from; with `stand_in`, the stand-in sublayers' weights; with `attention`, the part of the
    attention judged (or, with `grown`, the factor the query and key weights grow by)."""
    case = _random_weights(rng, d, heads, d_ff) | {"dims": np.array([d, heads, d_ff])}
    case |= block_inputs(rng, d, batch, seq, scale, stand_in)
    if attention:
        case["attention"] = np.array(True)
        case["judged"] = np.array(attention)
    if grown:
        case["grown"] = np.array(grown)
    return case


# ---------------------------------------------------------------------------------------------
# Mistakes: the reference with a switch per classic slip


class _Variant(PreRMSNormBlock):
    """The reference block with a switch per classic slip; the defaults are correct."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        qk_norm: str = "per head",  # or "d_model", "none"
        qk_weight: bool = True,
        keys_by_q_norm: bool = False,
        values_normalized: bool = False,
        scale: str = "head_dim",  # or "d_model", "none"
        placement: str = "pre",  # or "post", "residual after the norm"
        layer_norm: bool = False,
    ) -> None:
        super().__init__(d_model, n_heads, d_ff)
        self.qk_norm, self.qk_weight, self.keys_by_q_norm = qk_norm, qk_weight, keys_by_q_norm
        self.values_normalized, self.scale, self.placement = values_normalized, scale, placement
        if layer_norm:  # nn.LayerNorm without β loads the same weights
            for name in NORMS:
                shape = getattr(self, name).normalized_shape
                setattr(self, name, nn.LayerNorm(shape, eps=1e-6, bias=False))

    def _normalized(self, t: torch.Tensor, norm: nn.Module) -> torch.Tensor:
        """A projection (B, T, D) split into heads and normalized as the switches say."""
        if self.qk_norm == "d_model":  # statistics over all heads at once, then each γ
            t = t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6)
            return self._heads(t) * norm.weight
        heads = self._heads(t)
        if self.qk_norm == "none":
            return heads
        return norm(heads) if self.qk_weight else F.rms_norm(heads, (self.head_dim,), eps=1e-6)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        q = self._normalized(self.q_proj(x), self.q_norm)
        k = self._normalized(self.k_proj(x), self.q_norm if self.keys_by_q_norm else self.k_norm)
        width = {"head_dim": self.head_dim, "d_model": self.head_dim * self.n_heads, "none": 1}
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(width[self.scale]), dim=-1)

    def _values(self, x: torch.Tensor) -> torch.Tensor:
        values = super()._values(x)
        return self.k_norm(values) if self.values_normalized else values

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.placement == "post":
            x = self.norm1(x + self._sa_block(x))
            return self.norm2(x + self._ff_block(x))
        if self.placement == "residual after the norm":
            h = self.norm1(x)
            x = h + self._sa_block(h)
            h = self.norm2(x)
            return h + self._ff_block(h)
        return super().forward(x)


def _slip(name: str, message: str, **switches):
    return known_mistake(_Variant, name, message, **switches)


MISTAKES = (
    _slip(
        "no QK-norm",
        "Your queries and keys reach the dot product without `q_norm` and `k_norm`: the "
        "attention logits then grow with the query and key weights.",
        qk_norm="none",
    ),
    _slip(
        "QK-norm over d_model",
        "Your queries and keys are normalized over all of d_model at once; QK-norm normalizes "
        "each head's queries and keys over that head's own head_dim features.",
        qk_norm="d_model",
    ),
    _slip(
        "QK-norm without its weight",
        "Your queries and keys are normalized without the learned weights of `q_norm` and "
        "`k_norm` (γ): use the modules the constructor gives.",
        qk_weight=False,
    ),
    _slip(
        "keys normalized by q_norm",
        "Your keys are normalized by `q_norm`; they have their own norm, `k_norm`, with its own "
        "weight.",
        keys_by_q_norm=True,
    ),
    _slip(
        "values normalized too",
        "Your values are normalized too; QK-norm normalizes only the queries and keys, whose "
        "dot product it bounds, and the values go to the weighted sum as they are.",
        values_normalized=True,
    ),
    _slip(
        "no 1/√head_dim",
        "Your logits are not divided by √head_dim: QK-norm bounds q and k, and the scaled dot "
        "product still divides by √head_dim.",
        scale="none",
    ),
    _slip(
        "1/√d_model for 1/√head_dim",
        "Your logits are divided by √d_model; each head's dot product runs over its head_dim "
        "features, so it is divided by √head_dim.",
        scale="d_model",
    ),
    _slip(
        "norm after the residual",
        "Your block normalizes after the residual addition, RMSNorm(x + F(x)) (Post-LN); a "
        "Pre-RMSNorm block normalizes only what each sublayer reads: x + F(RMSNorm(x)).",
        placement="post",
    ),
    _slip(
        "residual taken after the norm",
        "Your residual adds F to RMSNorm(x) instead of to x: h = RMSNorm(x); x = h + F(h). The "
        "residual path must skip the norm, x + F(RMSNorm(x)).",
        placement="residual after the norm",
    ),
    _slip(
        "LayerNorm for RMSNorm",
        "Your norms subtract the mean (LayerNorm): RMSNorm only divides by the root mean "
        "square, x / √(mean(x²) + ε) · γ.",
        layer_norm=True,
    ),
)

# ---------------------------------------------------------------------------------------------
# The exercise

# How far QK-norm's attention weights may move when the query and key weights grow: ε = 1e-6
# under the root moves them by about 1e-6 (mean squares of order 0.1 to 1); without QK-norm they
# move by order 0.1, the logits growing 900-fold.
KEPT = {"rtol": 0.0, "atol": 1e-4}

PRE_RMS_NORM_BLOCK = Exercise(
    name="PreRMSNormBlock",
    reference=PreRMSNormBlock,
    probe=probe_qk_norm_block,
    checks=(
        visible(
            1,
            "the whole block given known weights: outputs and input gradients",
            lambda rng: _case(rng),
        ),
        visible(
            1,
            "residual structure, the sublayers replaced by known functions F₁, F₂: output, input "
            "gradient, and what `norm1` and `norm2` each receive",
            lambda rng: _case(rng, stand_in=True),
        ),
        visible(
            0.75,
            "the attention weights `attention(x)` gives, per head",
            lambda rng: _case(rng, attention="attention weights"),
        ),
        visible(
            0.75,
            "the attention sublayer `_sa_block(x)`: its output, and what `q_norm` and `k_norm` "
            "normalize",
            lambda rng: _case(rng, attention="attention sublayer"),
        ),
        hidden(
            1,
            "the attention weights stay put when the query and key weights grow ×30",
            lambda rng: _case(rng, seq=6, attention="attention weights", grown=30.0),
            twin=0.5,
            **KEPT,
        ),
        hidden(
            1,
            "residual structure, the sublayers replaced by other known functions, on a longer "
            "sequence",
            lambda rng: _case(rng, seq=7, stand_in=True),
        ),
        hidden(
            0.75,
            "the attention weights with 3 heads, d_model 12, on a longer sequence",
            lambda rng: _case(rng, 12, 3, 20, seq=7, attention="attention weights"),
        ),
        hidden(
            0.75,
            "the attention sublayer with 3 heads, d_model 12: output and what QK-norm normalizes",
            lambda rng: _case(rng, 12, 3, 20, seq=7, attention="attention sublayer"),
        ),
        hidden(
            1,
            "the whole block, 3 heads, d_model 12, inputs of scale 3: outputs and gradients",
            lambda rng: _case(rng, 12, 3, 20, batch=3, seq=4, scale=3.0),
        ),
    ),
    mistakes=MISTAKES,
    properties=QK_NORM_BLOCK_PROPERTIES,
    **FLOAT64,
    forbidden=forbid(ATTENTION, LIBRARY_BLOCKS, LIBRARY_STACKS),
)

EXERCISES = (PRE_RMS_NORM_BLOCK,)
