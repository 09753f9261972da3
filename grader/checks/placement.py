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
from functools import partial

import numpy as np
import torch.nn.functional as F
from torch import nn

from grader.checks.core import (
    FLOAT64,
    Arrays,
    Check,
    Exercise,
    Mistake,
    Structure,
    hidden,
    known_mistake,
    visible,
)
from grader.checks.library import DEEPNORM_INIT, LIBRARY_BLOCKS, LIBRARY_STACKS, forbid
from grader.grading.sandboxed import probes
from grader.grading.sandboxed.probes import probe_block, probe_deepnorm_block, probe_stack
from grader.reference.blocks import PostLNBlock, PreLNBlock
from norm_utils.blocks import Encoder
from normcheck.structure import (
    DEEPNORM_PROPERTIES,
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
    return case | block_inputs(rng, d, batch, seq, scale, stand_in)


def block_inputs(
    rng: np.random.Generator, d: int, batch: int, seq: int, scale: float, stand_in: bool
) -> Arrays:
    """A block's input of `scale`, the cotangent its backward pass starts from and, with
    `stand_in`, the weights of the stand-in sublayers F₁(z) = tanh(z A) + c, F₂(z) = z B."""
    inputs = {"x": scale * rng.standard_normal((batch, seq, d))}
    inputs["cotangent"] = rng.standard_normal((batch, seq, d))
    if stand_in:
        inputs["f1_weight"] = rng.normal(0, 1.5 * d**-0.5, (d, d))
        inputs["f1_bias"] = rng.normal(0, 0.5, d)
        inputs["f2_weight"] = rng.normal(0, d**-0.5, (d, d))
    return inputs


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

# ---------------------------------------------------------------------------------------------
# DeepNorm (Exercise 4): Post-LN with the residual up-weighted by α and the init scaled by β

# The weights DeepNet's pseudo-code (Wang et al. 2022, Fig. 2) draws with gain β: those that set
# the size of what a sublayer adds to the stream. `w_q` and `w_k` only shape the attention weights.
BETA_SCALED = frozenset({"w_v", "out_proj", "linear1", "linear2"})


def encoder_constants(num_layers: int) -> tuple[float, float]:
    """DeepNet's (α, β) for an encoder-only stack of N layers: ((2N)^¼, (8N)^-¼) (written out
    here: norm_utils' `deepnorm_constants` is what the answer may not call)."""
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


def decoder_constants(num_layers: int) -> tuple[float, float]:
    """DeepNet's (α, β) for the decoder of an encoder-decoder: ((3M)^¼, (12M)^-¼)."""
    return (3 * num_layers) ** 0.25, (12 * num_layers) ** -0.25


class DeepNormVariant(PostLNBlock):
    """DeepNorm, with a switch per classic slip; the defaults are correct. `alpha_at`: where α
    goes ("residual", LN(α·x + F(x)); "branch", LN(x + α·F(x)); "outside", α·LN(x + F(x));
    "nowhere"); `beta_on`: the weights drawn Xavier-normal with gain β, the others with gain 1;
    `init=False` keeps PyTorch's default init; `constants`: N ↦ (α, β)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        num_layers: int,
        *,
        alpha_at: str = "residual",
        beta_on: frozenset[str] = BETA_SCALED,
        init: bool = True,
        constants=encoder_constants,
    ) -> None:
        super().__init__(d_model, n_heads, d_ff)
        self.alpha, beta = constants(num_layers)
        self.alpha_at = alpha_at
        attn = self.self_attn
        if not init:  # PyTorch's own: the packed in_proj_weight as one matrix, Linear's uniform
            for linear in (attn.out_proj, self.linear1, self.linear2):
                linear.reset_parameters()
            attn._reset_parameters()
            return
        weights = dict(zip(("w_q", "w_k", "w_v"), attn.in_proj_weight.chunk(3), strict=True))
        weights |= {"out_proj": attn.out_proj.weight, "linear1": self.linear1.weight}
        weights["linear2"] = self.linear2.weight
        for name, w in weights.items():
            nn.init.xavier_normal_(w, gain=beta if name in beta_on else 1.0)

    def _add_and_norm(self, norm: nn.LayerNorm, x, branch):
        if self.alpha_at == "residual":
            return norm(self.alpha * x + branch)
        if self.alpha_at == "branch":
            return norm(x + self.alpha * branch)
        y = norm(x + branch)
        return self.alpha * y if self.alpha_at == "outside" else y

    def forward(self, x, attn_mask=None, key_padding_mask=None):
        x = self._add_and_norm(self.norm1, x, self._sa_block(x, attn_mask, key_padding_mask))
        return self._add_and_norm(self.norm2, x, self._ff_block(x))


def _deepnorm_case(rng: np.random.Generator, num_layers: int, *args, **kwargs) -> Arrays:
    """`_case`'s block, built for a stack of `num_layers`: its dims end with N."""
    case = _case(rng, *args, **kwargs)
    case["dims"] = np.append(case["dims"], num_layers)
    return case


# The init checks, one per pair of weights with one role, so that a slip on one pair costs
# that pair's points only.
INIT_PAIRS = {
    "w_q and w_k (the attention scores, gain 1)": ("w_q", "w_k"),
    "w_v and out_proj (the value path, gain β)": ("w_v", "out_proj"),
    "linear1 and linear2 (the feed-forward, gain β)": ("linear1", "linear2"),
}


def _init_case(rng: np.random.Generator, num_layers: int, d_ff: int, pair: str) -> Arrays:
    """A block of width 512 for a stack of `num_layers`, built under a seed drawn here, whose
    `pair` of weights is read. Each weight has ≥ 262,144 entries, so its std is known to
    0.14 %: two draws of a correct init (the answer's, the reference's) agree to 3 % beyond
    15 standard deviations, and the nearest slip (the decoder's β, 9.6 % smaller) is three
    tolerances away."""
    indices = [probes.INIT_WEIGHTS.index(name) for name in INIT_PAIRS[pair]]
    return {
        "dims": np.array([512, 4, d_ff, num_layers]),
        "init seed": rng.integers(2**31),
        "init weights": np.array(indices),
    }


def _init_checks() -> tuple[Check, ...]:
    """Per pair: its gains at N = 6 (visible) and at a depth N drawn at grading (hidden)."""
    checks = []
    for pair in INIT_PAIRS:
        checks.append(
            visible(
                0.5,
                f"N = 6: the initial std of {pair}, as a multiple of Xavier-normal's",
                lambda rng, pair=pair: _init_case(rng, 6, 1024, pair),
                **_INIT,
            )
        )
        checks.append(
            hidden(
                0.5,
                f"the initial gains of {pair} for a depth N drawn at grading, another d_ff",
                lambda rng, pair=pair: _init_case(rng, int(rng.integers(10, 200)), 2048, pair),
                **_INIT,
            )
        )
    return tuple(checks)


_INIT = {"rtol": 0.03, "atol": 0.0}
_deepnorm_slip = partial(known_mistake, DeepNormVariant)

DEEPNORM_MISTAKES = (
    _deepnorm_slip(
        "α on the branch",
        "Your α multiplies the sublayer's output, LN(x + α·F(x)); DeepNorm up-weights the "
        "residual, LN(α·x + F(x)), so that each sublayer (its init shrunk by β) moves the "
        "stream less: α on the branch makes it move more.",
        alpha_at="branch",
    ),
    _deepnorm_slip(
        "α outside the norm",
        "Your α multiplies the LayerNorm's output, α·LN(x + F(x)): the residual and the "
        "sublayer still enter the norm with equal weight, and the block's output is no longer "
        "normalized. α belongs inside the norm, on the residual: LN(α·x + F(x)).",
        alpha_at="outside",
    ),
    _deepnorm_slip(
        "α missing",
        "Your residual enters the norm with weight 1, LN(x + F(x)): that is Post-LN. DeepNorm "
        "up-weights it, LN(α·x + F(x)) with α = (2N)^¼.",
        alpha_at="nowhere",
    ),
    _deepnorm_slip(
        "β on `w_q` and `w_k` too",
        "Your `w_q` and `w_k` are drawn with gain β too. DeepNet leaves them at gain 1: they only "
        "shape the attention weights (each row sums to 1 after the softmax), not the size of "
        "what the sublayer adds to the stream.",
        beta_on=BETA_SCALED | {"w_q", "w_k"},
    ),
    # β forgotten everywhere is both of these: each pair's checks name their own slip.
    _deepnorm_slip(
        "β missing on the value path",
        "Your attention's `w_v` and `out_proj` keep gain 1. DeepNorm draws them with gain "
        "β = (8N)^-¼, as it does linear1 and linear2: the value path, like the feed-forward, "
        "sets the size of what its sublayer adds to the stream.",
        beta_on=frozenset({"linear1", "linear2"}),
    ),
    _deepnorm_slip(
        "β missing on the feed-forward",
        "Your `linear1` and `linear2` keep gain 1. DeepNorm draws them with gain β = (8N)^-¼: "
        "the feed-forward's output is what its sublayer adds to the stream.",
        beta_on=frozenset({"w_v", "out_proj"}),
    ),
    _deepnorm_slip(
        "PyTorch's default init kept",
        "Your weights keep PyTorch's default init (nn.MultiheadAttention draws the packed "
        "in_proj_weight as one (3·d, d) matrix, so `w_q`'s std is 1/√2 of Xavier's; nn.Linear "
        "draws uniform at 1/√(3·fan_in)): DeepNorm draws each weight Xavier-normal, with gain "
        "β or 1.",
        init=False,
    ),
    _deepnorm_slip(
        "decoder constants",
        "Your α and β are DeepNet's for the decoder of an encoder-decoder, (3N)^¼ and "
        "(12N)^-¼; an encoder-only stack takes α = (2N)^¼ and β = (8N)^-¼.",
        constants=decoder_constants,
    ),
)

DEEPNORM_BLOCK = Exercise(
    name="DeepNormBlock",
    reference=DeepNormVariant,  # every switch off
    probe=probe_deepnorm_block,
    checks=(
        visible(
            1,
            "N = 6: outputs and input gradients equal DeepNet's block LN(α·x + F(x)), α = "
            "(2N)^¼, given the same weights",
            lambda rng: _deepnorm_case(rng, 6),
        ),
        visible(
            0.5,
            "N = 6, the sublayers replaced by known functions F₁, F₂: output, input gradient, "
            "and what `norm1` and `norm2` each receive",
            lambda rng: _deepnorm_case(rng, 6, stand_in=True),
        ),
        hidden(
            1,
            "output weights zeroed, so each sublayer outputs only its bias b: the block must "
            "reduce to LN₂(α·LN₁(α·x + b₁) + b₂), for a depth N drawn at grading",
            lambda rng: _deepnorm_case(rng, int(rng.integers(2, 100)), switch_off=True),
        ),
        hidden(
            0.5,
            "random weights, 4 heads, d_model 12, inputs of scale 3, N = 24: outputs and gradients",
            lambda rng: _deepnorm_case(rng, 24, 12, 4, 20, batch=3, seq=4, scale=3.0),
        ),
        *_init_checks(),
    ),
    mistakes=DEEPNORM_MISTAKES,
    properties=DEEPNORM_PROPERTIES,
    structure=Structure("samples kept apart, each norm called once per forward", cap=3),
    **FLOAT64,
    forbidden=forbid(LIBRARY_BLOCKS, LIBRARY_STACKS, DEEPNORM_INIT),
)

EXERCISES = (POST_LN_BLOCK, PRE_LN_BLOCK, PRE_LN_ENCODER, DEEPNORM_BLOCK)

probes.TRUSTED.update(
    {e.reference for e in EXERCISES}
    | {m.impl for e in EXERCISES for m in e.mistakes}
    | {PostLNBlock, PreLNBlock}  # the reference blocks, so the tests can hold them to the checks
)
