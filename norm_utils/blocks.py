"""Transformer encoder blocks that differ only in where the LayerNorm sits.

Post-LN (Vaswani et al. 2017), Pre-LN (Xiong et al. 2020) and DeepNorm (Wang et al. 2022) share
one set of sublayers; each class only writes its own two-line ``forward``. Attribute names match
:class:`torch.nn.TransformerEncoderLayer`, so weights load both ways with ``load_state_dict``.

Mask convention (the whole course uses it): a boolean mask with ``True`` = real token / may attend.
:class:`torch.nn.MultiheadAttention` uses the opposite polarity, so the blocks invert it once,
in ``_sa_block``.
"""

from collections.abc import Iterable
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "DeepNormBlock",
    "Encoder",
    "PostLNBlock",
    "PreLNBlock",
    "TinyLM",
    "deepnorm_constants",
    "ffn_grad_norms",
    "linear_warmup",
]

BlockKind = Literal["post", "pre", "deepnorm"]


def _to_torch_mask(mask: Tensor | None) -> Tensor | None:
    """Turn a course mask (True = may attend) into a torch MHA mask (True = masked out)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        # ``~`` on an int mask flips bits instead of meaning, and a float mask is additive.
        raise TypeError(f"masks must be bool with True = may attend, got dtype {mask.dtype}")
    return ~mask


class _Block(nn.Module):
    """Self-attention and feed-forward sublayers shared by every block; subclasses add ``forward``.

    All weights get a Xavier-normal init, as in Xiong et al. (2020) and Wang et al. (2022);
    ``gain`` < 1 on the value, output and FFN weights is DeepNet's β.
    """

    def __init__(
        self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.0, eps: float = 1e-5
    ) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)  # stateless, so one module serves every sublayer
        self._reset_parameters(gain=1.0)

    def _reset_parameters(self, gain: float) -> None:
        w_q, w_k, w_v = self.self_attn.in_proj_weight.chunk(3)  # views into the packed weight
        for w, g in [
            (w_q, 1.0),
            (w_k, 1.0),
            (w_v, gain),
            (self.self_attn.out_proj.weight, gain),
            (self.linear1.weight, gain),
            (self.linear2.weight, gain),
        ]:
            nn.init.xavier_normal_(w, gain=g)
        for b in [
            self.self_attn.in_proj_bias,
            self.self_attn.out_proj.bias,
            self.linear1.bias,
            self.linear2.bias,
        ]:
            nn.init.zeros_(b)

    def _sa_block(
        self, x: Tensor, attn_mask: Tensor | None, key_padding_mask: Tensor | None
    ) -> Tensor:
        attn_mask, key_padding_mask = _to_torch_mask(attn_mask), _to_torch_mask(key_padding_mask)
        x = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )[0]  # (B, T, D)
        return self.dropout(x)

    def _ff_block(self, x: Tensor) -> Tensor:
        x = self.dropout(F.relu(self.linear1(x)))  # (B, T, d_ff)
        return self.dropout(self.linear2(x))  # (B, T, D)


class PostLNBlock(_Block):
    r"""Post-LN Transformer encoder block: normalize *after* adding the residual.

    The original Transformer (Vaswani et al. 2017, https://arxiv.org/abs/1706.03762). Every
    residual path goes through a LayerNorm, so the gradient of the last layers is large at init
    and training needs learning-rate warm-up (Xiong et al. 2020, https://arxiv.org/abs/2002.04745).

    .. math::
        x_{l+1} = \mathrm{LN}(x_l + F(x_l))

    Equals ``nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)``
    with ReLU, and has the same ``state_dict`` keys.

    Args:
        d_model: width D of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward sublayer.
        dropout: dropout on attention weights, sublayer outputs and the FFN hidden layer.
        eps: LayerNorm epsilon.

    Shape:
        - x: :math:`(B, T, D)`; output: same shape.
        - attn_mask: :math:`(T, T)` bool, True = query row may attend to key column.
        - key_padding_mask: :math:`(B, T)` bool, True = real token, False = padding.

    Example:
        >>> block = PostLNBlock(d_model=16, n_heads=2, d_ff=64)
        >>> block(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = self.norm1(x + self._sa_block(x, attn_mask, key_padding_mask))  # (B, T, D)
        x = self.norm2(x + self._ff_block(x))  # (B, T, D)
        return x


class PreLNBlock(_Block):
    r"""Pre-LN Transformer encoder block: normalize the sublayer *input*, keep the residual clean.

    Xiong et al. 2020, https://arxiv.org/abs/2002.04745 (as in GPT-2 and nanoGPT). The residual
    stream is never normalized, so its norm grows with depth and a stack needs a final LayerNorm
    (:class:`Encoder` with ``final_norm=True``). Gradients at init are well behaved, so it trains
    without warm-up.

    .. math::
        x_{l+1} = x_l + F(\mathrm{LN}(x_l))

    Equals ``nn.TransformerEncoderLayer(..., batch_first=True, norm_first=True)``. Args and Shape
    as in :class:`PostLNBlock`.

    Example:
        >>> block = PreLNBlock(d_model=16, n_heads=2, d_ff=64)
        >>> block(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = x + self._sa_block(self.norm1(x), attn_mask, key_padding_mask)  # (B, T, D)
        x = x + self._ff_block(self.norm2(x))  # (B, T, D)
        return x


def deepnorm_constants(num_layers: int) -> tuple[float, float]:
    """DeepNet's encoder-only (α, β) = ((2N)^(1/4), (8N)^(-1/4)) for ``num_layers`` = N."""
    return (2 * num_layers) ** 0.25, (8 * num_layers) ** -0.25


class DeepNormBlock(_Block):
    r"""DeepNorm block: Post-LN with an up-weighted residual and a down-scaled init.

    DeepNet (Wang et al. 2022, https://arxiv.org/abs/2203.00555) keeps Post-LN's placement but
    bounds the size of the model update, so very deep Post-LN stacks train. For an encoder-only
    (or decoder-only) stack of :math:`N` layers:

    .. math::
        x_{l+1} = \mathrm{LN}(\alpha x_l + F(x_l)), \quad
        \alpha = (2N)^{1/4}, \quad \beta = (8N)^{-1/4}

    and the value projection, attention output projection and both FFN weights are initialized
    Xavier-normal with gain :math:`\beta` (query and key with gain 1).

    Args:
        num_layers: the depth :math:`N` of the stack the block lives in.
        others: as in :class:`PostLNBlock`.

    Example:
        >>> block = DeepNormBlock(d_model=16, n_heads=2, d_ff=64, num_layers=4)
        >>> round(block.alpha, 3), round(block.beta, 3)
        (1.682, 0.42)
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        num_layers: int,
        dropout: float = 0.0,
        eps: float = 1e-5,
    ) -> None:
        super().__init__(d_model, n_heads, d_ff, dropout, eps)
        self.alpha, self.beta = deepnorm_constants(num_layers)
        self._reset_parameters(gain=self.beta)

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        x = self.norm1(self.alpha * x + self._sa_block(x, attn_mask, key_padding_mask))
        x = self.norm2(self.alpha * x + self._ff_block(x))  # (B, T, D)
        return x


class Encoder(nn.Module):
    """A stack of ``num_layers`` blocks of one kind, with an optional final LayerNorm.

    Pre-LN leaves the residual stream un-normalized, so a Pre-LN stack needs
    ``final_norm=True``; Post-LN and DeepNorm already end in a LayerNorm. The argument has no
    default on purpose: ``nn.TransformerEncoder`` silently adds no final norm (``norm=None``),
    a classic Pre-LN bug. Keys match ``nn.TransformerEncoder`` (``layers.i.*``, ``norm.*``).

    Args:
        kind: ``"post"``, ``"pre"`` or ``"deepnorm"``.
        num_layers: number of blocks (also DeepNorm's N).
        d_model, n_heads, d_ff, dropout, eps: passed to each block.
        final_norm: append a LayerNorm after the last block.

    Shape:
        As in :class:`PostLNBlock`; masks are passed to every block.

    Example:
        >>> enc = Encoder("pre", num_layers=2, d_model=16, n_heads=2, d_ff=64, final_norm=True)
        >>> enc(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def __init__(
        self,
        kind: BlockKind,
        num_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        final_norm: bool,
        dropout: float = 0.0,
        eps: float = 1e-5,
    ) -> None:
        super().__init__()
        block_cls = {
            "post": PostLNBlock,
            "pre": PreLNBlock,
            "deepnorm": partial(DeepNormBlock, num_layers=num_layers),
        }[kind]
        self.layers = nn.ModuleList(
            block_cls(d_model, n_heads, d_ff, dropout=dropout, eps=eps) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if final_norm else None

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, attn_mask, key_padding_mask)  # (B, T, D)
        return x if self.norm is None else self.norm(x)


class TinyLM(nn.Module):
    r"""A tiny causal language model: token + learned position embeddings, an Encoder, a head.

    Small enough for CPU experiments: gradient norms at init (Xiong et al. 2020, Fig. 3) and
    warm-up on a copy task. Token embeddings are N(0, 1/D) and scaled by √D, so the residual
    stream starts at unit variance per coordinate whether or not the head is tied.

    Args:
        vocab_size: V.
        d_model, n_heads, num_layers, kind, final_norm: as in :class:`Encoder`.
        d_ff: FFN width; defaults to ``4 * d_model``.
        max_len: longest sequence the position embedding covers.
        tie_weights: share the output head with the token embedding (as GPT-2).

    Shape:
        - idx: :math:`(B, T)` token ids with :math:`T \le` ``max_len``.
        - output: :math:`(B, T, V)` next-token logits.

    Example:
        >>> lm = TinyLM(50, d_model=16, n_heads=2, num_layers=2, kind="pre", final_norm=True)
        >>> lm(torch.randint(0, 50, (3, 7))).shape
        torch.Size([3, 7, 50])
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_heads: int,
        num_layers: int,
        kind: BlockKind,
        *,
        final_norm: bool,
        d_ff: int | None = None,
        max_len: int = 64,
        tie_weights: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(max_len, d_model)
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.encoder = Encoder(
            kind, num_layers, d_model, n_heads, d_ff, final_norm=final_norm, dropout=dropout
        )
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.tok_emb.weight, std=d_model**-0.5)
        nn.init.normal_(self.pos_emb.weight, std=0.02)
        if tie_weights:
            self.head.weight = self.tok_emb.weight
        causal = torch.ones(max_len, max_len, dtype=torch.bool).tril()  # True = may attend
        self.register_buffer("causal_mask", causal, persistent=False)

    def forward(self, idx: Tensor) -> Tensor:
        T = idx.shape[1]
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) * self.tok_emb.embedding_dim**0.5 + self.pos_emb(pos)  # (B, T, D)
        x = self.encoder(x, attn_mask=self.causal_mask[:T, :T])  # (B, T, D)
        return self.head(x)  # (B, T, V)

    def loss(self, idx: Tensor, targets: Tensor) -> Tensor:
        """Mean next-token cross-entropy; targets of -100 are ignored, as in ``F.cross_entropy``."""
        return F.cross_entropy(self(idx).flatten(0, 1), targets.flatten())


def ffn_grad_norms(model: TinyLM, batches: Iterable[Tensor]) -> list[float]:
    r"""Per-layer :math:`\|\mathbb{E}[\partial L / \partial W^{2,l}]\|_F` of each FFN's ``linear2``.

    Reproduces the quantity in Xiong et al. 2020, Fig. 3: the gradient of each layer's second
    FFN weight, averaged over batches, then its Frobenius norm. ``.grad`` accumulates across
    ``backward`` calls, so the sum over batches comes for free. Leaves the summed gradients in
    ``.grad``.

    Args:
        model: a :class:`TinyLM`; its weights are not changed.
        batches: token tensors of shape :math:`(B, T + 1)`; the model reads the first T tokens
            and predicts the last T.

    Returns:
        One float per layer, first layer first.

    Example:
        >>> lm = TinyLM(50, d_model=16, n_heads=2, num_layers=3, kind="post", final_norm=False)
        >>> len(ffn_grad_norms(lm, [torch.randint(0, 50, (4, 9))]))
        3
    """
    model.zero_grad()
    n = 0
    for tokens in batches:
        model.loss(tokens[:, :-1], tokens[:, 1:]).backward()
        n += 1
    return [(layer.linear2.weight.grad / n).norm().item() for layer in model.encoder.layers]


def linear_warmup(step: int, warmup_steps: int) -> float:
    """Learning-rate multiplier rising linearly from ``1/warmup_steps`` to 1, then flat.

    ``warmup_steps=0`` means no warm-up. Use with
    ``torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_warmup(s, 100))``.

    Example:
        >>> [linear_warmup(s, 4) for s in range(6)]
        [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    """
    return 1.0 if warmup_steps == 0 else min(1.0, (step + 1) / warmup_steps)
