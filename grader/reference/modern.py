"""Reference Pre-RMSNorm Transformer block with QK-norm (the answer to notebook 06's Exercise 4).

LLaMA's placement (Touvron et al. 2023, https://arxiv.org/abs/2302.13971): Pre-LN with RMSNorm
and no biases. QK-norm (Dehghani et al. 2023, https://arxiv.org/abs/2302.05442; Wortsman et al.
2023, https://arxiv.org/abs/2309.14322) normalizes each head's queries and keys before their dot
product, so that growing query and key weights cannot grow the attention logits without bound.
"""

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["PreRMSNormBlock"]


class PreRMSNormBlock(nn.Module):
    r"""Pre-RMSNorm Transformer block with QK-norm, no biases.

    .. math::
        h = x + \mathrm{SA}\big(\mathrm{RMS}_1(x)\big), \qquad
        y = h + \mathrm{FFN}\big(\mathrm{RMS}_2(h)\big),

    where each head of SA attends with
    :math:`\mathrm{softmax}\big(\hat q \hat k^\top / \sqrt{d_h}\big)`,
    :math:`\hat q = \mathrm{RMS}_q(q)` and :math:`\hat k = \mathrm{RMS}_k(k)` normalized over the
    head's own :math:`d_h` features (``head_dim``); the values are not normalized.

    Args:
        d_model: width D of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: hidden width of the feed-forward sublayer.

    Shape:
        - x: :math:`(B, T, D)`; output: same shape.
        - ``attention(x)``: :math:`(B, H, T, T)`, each row a distribution over the keys.

    Example:
        >>> block = PreRMSNormBlock(d_model=16, n_heads=2, d_ff=64)
        >>> block(torch.randn(3, 5, 16)).shape
        torch.Size([3, 5, 16])
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.q_norm = nn.RMSNorm(self.head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(self.head_dim, eps=1e-6)
        self.linear1 = nn.Linear(d_model, d_ff, bias=False)
        self.linear2 = nn.Linear(d_ff, d_model, bias=False)
        self.norm1 = nn.RMSNorm(d_model, eps=1e-6)
        self.norm2 = nn.RMSNorm(d_model, eps=1e-6)

    def _heads(self, t: Tensor) -> Tensor:
        """(B, T, D) -> (B, H, T, head_dim)."""
        b, length, _ = t.shape
        return t.view(b, length, self.n_heads, self.head_dim).transpose(1, 2)

    def _merge(self, t: Tensor) -> Tensor:
        """(B, H, T, head_dim) -> (B, T, D)."""
        return t.transpose(1, 2).flatten(2)

    def _ff_block(self, x: Tensor) -> Tensor:
        return self.linear2(F.relu(self.linear1(x)))

    def attention(self, x: Tensor) -> Tensor:
        """Attention weights, (B, T, D) -> (B, H, T, T): QK-norm per head, then the softmax."""
        q = self.q_norm(self._heads(self.q_proj(x)))
        k = self.k_norm(self._heads(self.k_proj(x)))
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), dim=-1)

    def _values(self, x: Tensor) -> Tensor:
        return self._heads(self.v_proj(x))

    def _sa_block(self, x: Tensor) -> Tensor:
        return self.out_proj(self._merge(self.attention(x) @ self._values(x)))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self._sa_block(self.norm1(x))  # (B, T, D)
        return x + self._ff_block(self.norm2(x))  # (B, T, D)
