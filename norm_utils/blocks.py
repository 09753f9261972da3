"""Transformer encoder stacks that differ only in where the LayerNorm sits, built from PyTorch's own
layer.

Post-LN (Vaswani et al. 2017) and Pre-LN (Xiong et al. 2020) are
:class:`torch.nn.TransformerEncoderLayer` with ``norm_first=False`` / ``True``. Every weight gets
the Xavier-normal init of that paper (:func:`xavier_init_`). The course's own Post-LN, Pre-LN and
DeepNorm blocks are exercises of notebook 04, so this package does not write them.

Mask convention (the whole course uses it): a boolean mask with ``True`` = real token / may attend.
:class:`torch.nn.TransformerEncoderLayer` uses the opposite polarity, so :class:`Encoder` inverts
it once.
"""

from collections.abc import Iterable
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from norm_utils.data import copy_task_batch, random_token_batches

__all__ = [
    "Encoder",
    "TinyLM",
    "copy_task_curve",
    "ffn_grad_norms",
    "ffn_grad_profile",
    "linear_warmup",
    "xavier_init_",
]

BlockKind = Literal["post", "pre"]


def _to_torch_mask(mask: Tensor | None) -> Tensor | None:
    """Turn a course mask (True = may attend) into a torch MHA mask (True = masked out)."""
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        # ``~`` on an int mask flips bits instead of meaning, and a float mask is additive.
        raise TypeError(f"masks must be bool with True = may attend, got dtype {mask.dtype}")
    return ~mask


def xavier_init_(layer: nn.Module) -> None:
    """Xavier-normal weights (gain 1) and zero biases for a layer with
    ``nn.TransformerEncoderLayer``'s attributes, as in Xiong et al. (2020)."""
    w_q, w_k, w_v = layer.self_attn.in_proj_weight.chunk(3)  # views into the packed weight
    for w in [
        w_q,
        w_k,
        w_v,
        layer.self_attn.out_proj.weight,
        layer.linear1.weight,
        layer.linear2.weight,
    ]:
        nn.init.xavier_normal_(w)
    for b in [
        layer.self_attn.in_proj_bias,
        layer.self_attn.out_proj.bias,
        layer.linear1.bias,
        layer.linear2.bias,
    ]:
        nn.init.zeros_(b)


def _layer(
    kind: BlockKind,
    num_layers: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    dropout: float,
    eps: float,
) -> nn.TransformerEncoderLayer:
    if kind not in ("post", "pre"):
        raise ValueError(f"kind must be 'post' or 'pre', got {kind!r}")
    layer = nn.TransformerEncoderLayer(
        d_model,
        n_heads,
        d_ff,
        dropout,
        layer_norm_eps=eps,
        batch_first=True,
        norm_first=kind == "pre",
    )
    xavier_init_(layer)
    return layer


class Encoder(nn.Module):
    """A stack of ``num_layers`` blocks of one kind, with an optional final LayerNorm.

    ``"post"`` and ``"pre"`` blocks are ``nn.TransformerEncoderLayer`` with ``norm_first=False``
    / ``True``. Pre-LN leaves the residual stream un-normalized, so a Pre-LN stack needs
    ``final_norm=True``; Post-LN already ends in a LayerNorm. The argument has no default on
    purpose: ``nn.TransformerEncoder`` silently adds no final norm (``norm=None``), a classic
    Pre-LN bug. Keys match ``nn.TransformerEncoder`` (``layers.i.*``, ``norm.*``); unlike it,
    every layer gets its own initial weights.

    Args:
        kind: ``"post"`` or ``"pre"``.
        num_layers: number of blocks.
        d_model, n_heads, d_ff, dropout, eps: passed to each block.
        final_norm: append a LayerNorm after the last block.

    Shape:
        - x: :math:`(B, T, D)`; output: same shape.
        - attn_mask: :math:`(T, T)` bool, True = query row may attend to key column.
        - key_padding_mask: :math:`(B, T)` bool, True = real token, False = padding.

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
        self.layers = nn.ModuleList(
            _layer(kind, num_layers, d_model, n_heads, d_ff, dropout, eps)
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=eps) if final_norm else None

    def forward(
        self, x: Tensor, attn_mask: Tensor | None = None, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        masks = {
            "src_mask": _to_torch_mask(attn_mask),
            "src_key_padding_mask": _to_torch_mask(key_padding_mask),
        }
        for layer in self.layers:
            x = layer(x, **masks)  # (B, T, D)
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


def ffn_grad_profile(kind: BlockKind, num_layers: int, seeds: Iterable[int]) -> Tensor:
    """Notebook 04's measurement of Xiong et al.'s Fig. 3: :func:`ffn_grad_norms` per layer of
    a fresh :class:`TinyLM` (V = 200, D = 64, 4 heads; a final LayerNorm for ``"pre"`` only) on
    2 batches of 16 random sequences of 33 tokens, averaged over ``seeds`` (each seeds both the
    model and its batches).

    Returns:
        A ``(num_layers,)`` tensor, first layer first.

    Example:
        >>> ffn_grad_profile("post", 2, seeds=[0]).shape
        torch.Size([2])
    """
    per_seed = []
    for seed in seeds:
        torch.manual_seed(seed)
        lm = TinyLM(200, 64, 4, num_layers, kind=kind, final_norm=kind == "pre", max_len=32)
        batches = random_token_batches(2, 16, 33, vocab_size=200, seed=seed)
        per_seed.append(ffn_grad_norms(lm, batches))
    return torch.tensor(per_seed).mean(0)


def copy_task_curve(
    kind: BlockKind,
    warmup: int,
    seed: int,
    lr: float = 1e-2,
    max_steps: int = 60,
    target: float = 1.5,
) -> list[float]:
    """Notebook 04's warm-up experiment (Xiong et al.'s Fig. 2, in miniature): train a 5-layer
    :class:`TinyLM` (D = 32, 2 heads; a final LayerNorm for ``"pre"`` only) on the copy task
    (:func:`~norm_utils.data.copy_task_batch`: 32 sequences of 4 tokens out of 9 a step, a fresh
    batch each step) with Adam (``betas=(0.9, 0.98)``) at ``lr``, warmed up linearly over
    ``warmup`` steps (:func:`linear_warmup`).

    Returns:
        The smoothed loss after each step (an exponential average, 0.2 on the newest step),
        stopping at the first step where it is below ``target``, or after ``max_steps``.

    Example:
        >>> len(copy_task_curve("pre", warmup=0, seed=0, max_steps=3))
        3
    """
    torch.manual_seed(seed)
    lm = TinyLM(10, 32, 2, 5, kind=kind, final_norm=kind == "pre", max_len=8)
    opt = torch.optim.Adam(lm.parameters(), lr=lr, betas=(0.9, 0.98), fused=True)  # fused: faster
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_warmup(s, warmup))
    smooth, curve = None, []
    for step in range(max_steps):
        inputs, targets = copy_task_batch(32, 4, vocab_size=10, seed=10_000 * seed + step)
        loss = lm.loss(inputs, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        schedule.step()
        smooth = loss.item() if smooth is None else 0.8 * smooth + 0.2 * loss.item()
        curve.append(smooth)
        if smooth < target:
            break
    return curve


def linear_warmup(step: int, warmup_steps: int) -> float:
    """Learning-rate multiplier rising linearly from ``1/warmup_steps`` to 1, then flat.

    ``warmup_steps=0`` means no warm-up. Use with
    ``torch.optim.lr_scheduler.LambdaLR(opt, lambda s: linear_warmup(s, 100))``.

    Example:
        >>> [linear_warmup(s, 4) for s in range(6)]
        [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    """
    return 1.0 if warmup_steps == 0 else min(1.0, (step + 1) / warmup_steps)
